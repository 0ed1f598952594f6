"""Big answers of HTTP and MCP tools take the path of every big result: a 500-row JSON endpoint is
described and paged with result_read, a 2 MB text is kept whole and paged in characters, an MCP tool's
large table is described. Through the real loop, litellm and a fake model on loopback that records what
it was sent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from stepwise.tools import tables
from stepwise_local.stack import LocalStack
from tests.fakes.mcp_server import FakeMcpServer
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.receiver import Receiver
from tests.fakes.receiver import Reply as Answer
from tests.integration.support import wait_for_run

ROWS = [
    {"id": i, "sku": f"sku-{i:05d}", "name": f"item {i}", "price": i * 3, "stock": i % 17} for i in range(500)
]
LOG = "".join(
    f"{i:07d} GET /api/items/{i} answered in {i % 97} ms for user u{i % 13}\n" for i in range(36_000)
)
EMPTY = {"type": "object", "properties": {}}


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
    yield fake
    fake.close()


def http_tool(name: str, url: str) -> dict[str, Any]:
    return {
        "type": "http",
        "name": name,
        "description": f"read {name}",
        "input_schema": EMPTY,
        "endpoint": url,
        "method": "GET",
        "effect": "none",
    }


def read_on(arguments: dict[str, Any]) -> Reply:
    """The model's next turn: result_read on the call it was just answered, once it is known."""

    def decide(request: dict[str, Any]) -> Reply:
        last = [m for m in request["messages"] if m["role"] == "tool"][-1]
        return Reply(calls=[("result_read", {"tool_call_id": last["tool_call_id"], **arguments})])

    return Reply(decide=decide, finish_reason="tool_calls")


def run(
    stack: LocalStack, model: FakeOpenAI, tools: list[dict[str, Any]], first: str, read: dict[str, Any]
) -> Any:
    _, _, agent = stack.invoke_api(
        "POST", "/v1/agents", {"name": "big", "model": "openai/gpt-fake", "tools": tools}
    )
    model.tool_calls([(first, {})])
    model.push(read_on(read))
    model.text("done")
    _, _, accepted = stack.invoke_api("POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "go"})
    finished = wait_for_run(stack, accepted["run_id"], timeout=180)  # the first model call imports litellm
    assert finished["status"] == "succeeded", finished
    return model.bodies[-2:]


def tool_contents(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def test_a_json_api_answering_500_rows_is_described_and_paged(
    stack: LocalStack, model: FakeOpenAI, receiver: Receiver
) -> None:
    receiver.replies["/items"] = Answer(body=ROWS)

    second, third = run(
        stack, model, [http_tool("items", f"{receiver.url}/items")], "items", {"offset": 480, "limit": 50}
    )

    (shown,) = tool_contents(second)
    assert tables.is_description(shown) and len(shown) < len(json.dumps(ROWS)) / 4
    description = json.loads(shown)
    assert description["rows"] == 500 and description["first_rows"] == ROWS[:20]
    price = next(c for c in description["columns"] if c["name"] == "price")
    assert (price["min"], price["max"]) == (0, 1497)
    page = json.loads(tool_contents(third)[-1])
    assert page["rows"] == ROWS[480:] and page["total_rows"] == 500 and page["next_offset"] is None


def test_a_2_mb_text_is_kept_whole_and_paged_in_characters(
    stack: LocalStack, model: FakeOpenAI, receiver: Receiver
) -> None:
    assert len(LOG) > 2_000_000
    receiver.replies["/log"] = Answer(body=LOG.encode(), content_type="text/plain; charset=utf-8")
    offset = len(LOG) - 1_000

    second, third = run(
        stack, model, [http_tool("log", f"{receiver.url}/log")], "log", {"offset": offset, "limit": 40_000}
    )

    (shown,) = tool_contents(second)
    head = json.loads(shown)
    assert head["described"] is True and head["format"] == "text" and head["chars"] == len(LOG)
    assert head["first_chars"] == LOG[: tables.TEXT_HEAD_CHARS]
    assert f"offset {tables.TEXT_HEAD_CHARS}" in head["note"]
    page = json.loads(tool_contents(third)[-1])
    assert page["text"] == LOG[offset:] and page["total_chars"] == len(LOG) and page["next_offset"] is None


def test_an_mcp_tool_answering_a_large_table_is_described(stack: LocalStack, model: FakeOpenAI) -> None:
    server = FakeMcpServer(orders=True)
    try:
        _, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "mcp-big", "model": "openai/gpt-fake"})
        status, _, registered = stack.invoke_api(
            "POST",
            f"/v1/agents/{agent['agent_id']}/mcp-servers",
            {"name": "shop", "url": server.url, "trusted": True},
        )
        assert status == 201, registered
        model.tool_calls([("mcp__shop__orders", {"count": 400})])
        model.push(read_on({"offset": 399, "limit": 5}))
        model.text("done")
        _, _, accepted = stack.invoke_api("POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "go"})
        assert wait_for_run(stack, accepted["run_id"], timeout=180)["status"] == "succeeded"
    finally:
        server.close()

    second, third = model.bodies[-2:]
    description = json.loads(tool_contents(second)[0])
    assert description["described"] is True and description["rows"] == 400
    page = json.loads(tool_contents(third)[-1])
    assert page["rows"] == [{"order_id": "o-0399", "region": "south", "amount": 399}]
