"""Bad input never becomes a 500 or a crashed step: JSON nested too deep (from a tenant or from the
model) and items that would be over DynamoDB's 400 KB are each a 4xx with a code, or an error result
the model reads."""

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest

from stepwise.core import safejson
from stepwise.core.tables import ITEM_LIMIT
from stepwise_local.stack import LocalStack
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.receiver import Receiver
from tests.integration.support import tool, wait_for_run


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


def deep_text(depth: int) -> str:
    return "[" * depth + "]" * depth


def error_code(body: Any) -> str:
    assert set(body) == {"error"}, body
    return str(body["error"]["code"])


@pytest.fixture
def agent_id(stack: LocalStack) -> str:
    status, _, body = stack.invoke_api("POST", "/v1/agents", {"name": "bad-input"})
    assert status == 201
    return str(body["agent_id"])


# --- JSON depth ------------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [safejson.MAX_DEPTH + 1, 5_000, 200_000])
def test_an_over_deep_body_is_a_422_with_its_code(stack: LocalStack, depth: int) -> None:
    # 5,000 levels is past the interpreter's recursion limit; 200,000 past any stack.
    raw = ('{"name": "deep", "metadata": ' + "[" * depth + "]" * depth + "}").encode()
    status, _, body = stack.invoke_api("POST", "/v1/agents", raw=raw)
    assert status == 422 and error_code(body) == "json_too_deep"


def test_a_body_at_the_depth_cap_is_accepted(stack: LocalStack, agent_id: str) -> None:
    # The body is one level, script/turn/tool_calls/call/arguments five more.
    arguments = nested(safejson.MAX_DEPTH - 7)
    script = [{"tool_calls": [{"name": "t", "arguments": arguments}]}]
    status, _, body = stack.invoke_api("PATCH", f"/v1/agents/{agent_id}", {"script": script})
    assert status == 200, body
    assert body["script"][0]["tool_calls"][0]["arguments"] == arguments


def test_an_over_deep_next_token_is_a_400(stack: LocalStack) -> None:
    # Only openings, so the token stays under its 2048 characters: the parser recurses on each one
    # before it finds the end, and 1,500 of them are past the interpreter's recursion limit.
    token = base64.urlsafe_b64encode(b"[" * 1_500).decode()
    assert len(token) <= 2048
    status, _, body = stack.invoke_api("GET", f"/v1/runs?next_token={token}")
    assert status == 400 and error_code(body) == "invalid_next_token"


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
    yield fake
    fake.close()


@pytest.mark.parametrize("depth", [safejson.MAX_DEPTH + 1, 20_000])
def test_over_deep_arguments_from_the_model_are_an_error_result_it_reads(
    stack: LocalStack, model: FakeOpenAI, receiver: Receiver, depth: int
) -> None:
    model.tool_calls([("lookup", '{"q": ' + deep_text(depth) + "}")])
    model.text("sorry")
    _, _, created = stack.invoke_api(
        "POST",
        "/v1/agents",
        {"name": "deep-model", "model": "openai/gpt-fake", "tools": [tool("lookup", receiver.url)]},
    )
    _, _, accepted = stack.invoke_api("POST", f"/v1/agents/{created['agent_id']}/runs", {"message": "go"})

    run = wait_for_run(stack, accepted["run_id"])

    assert run["status"] == "succeeded" and run["output"] == "sorry", run
    assert receiver.requests == []  # the tool never ran
    tool_message = next(m for m in model.requests[1].body["messages"] if m["role"] == "tool")
    assert "invalid_arguments" in tool_message["content"]
    assert f"at most {safejson.MAX_DEPTH} levels" in tool_message["content"]


# --- Items over 400 KB -----------------------------------------------------------------------------


def big_script(size: int) -> list[dict[str, Any]]:
    return [{"text": "x" * 50_000} for _ in range(size // 50_000 + 1)]


def test_an_agent_over_an_item_is_a_413_and_is_not_created(stack: LocalStack) -> None:
    _, _, before = stack.invoke_api("GET", "/v1/agents")
    huge = {"name": "huge", "script": big_script(ITEM_LIMIT)}
    status, _, body = stack.invoke_api("POST", "/v1/agents", huge)
    assert status == 413 and error_code(body) == "item_too_large"
    assert body["error"]["details"]["limit"] == ITEM_LIMIT
    _, _, after = stack.invoke_api("GET", "/v1/agents")
    assert len(after["agents"]) == len(before["agents"])


def test_a_patch_over_an_item_is_a_413_and_changes_nothing(stack: LocalStack, agent_id: str) -> None:
    status, _, body = stack.invoke_api("PATCH", f"/v1/agents/{agent_id}", {"script": big_script(ITEM_LIMIT)})
    assert status == 413 and error_code(body) == "item_too_large"
    assert stack.invoke_api("GET", f"/v1/agents/{agent_id}")[2]["script"] is None


def test_tools_that_fill_the_item_are_a_413_for_the_one_that_does_not_fit(
    stack: LocalStack, agent_id: str
) -> None:
    schema = {"type": "object", "description": "s" * 150_000}
    added = []
    for i in range(4):
        status, _, body = stack.invoke_api(
            "POST",
            f"/v1/agents/{agent_id}/tools",
            {**tool(f"t{i}", "https://tools.example/x"), "input_schema": schema},
        )
        added.append((status, body))
    assert [s for s, _ in added[:2]] == [201, 201]
    assert added[2][0] == 413 and error_code(added[2][1]) == "item_too_large"
    names = [t["name"] for t in stack.invoke_api("GET", f"/v1/agents/{agent_id}/tools")[2]["tools"]]
    assert names == ["t0", "t1"]


def test_a_run_over_an_item_is_a_413_and_leaves_no_session(stack: LocalStack, agent_id: str) -> None:
    status, _, body = stack.invoke_api(
        "POST",
        f"/v1/agents/{agent_id}/runs",
        {"message": "m" * 90_000, "script": big_script(ITEM_LIMIT)},
    )
    assert status == 413 and error_code(body) == "item_too_large"
    assert stack.invoke_api("GET", f"/v1/runs?agent_id={agent_id}")[2]["runs"] == []


def test_the_item_size_counts_what_dynamodb_counts() -> None:
    from stepwise.core.tables import AgentItem, item_size

    item = AgentItem("local", "agt_1", doc={"k": "é" * 10})
    doc = json.dumps({"k": "é" * 10})
    # names and values in UTF-8; the version attribute is not set until the first save
    assert item_size(item) == len("tenant_id") + 5 + len("agent_id") + 5 + len("doc") + len(doc.encode())
