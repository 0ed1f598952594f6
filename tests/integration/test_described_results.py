"""Big tables reach the model described, and result_read pages through the stored whole: through the
real loop, litellm and a fake OpenAI-compatible model on loopback that records what it was sent."""

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from stepwise.local.stack import LocalStack
from stepwise.store import described
from stepwise.tools import tables
from tests.fakes.openai_server import FakeOpenAI
from tests.integration.support import wait_for_run

ROWS = [{"order_id": f"o-{i:04d}", "region": ("north", "south")[i % 2], "amount": i * 10} for i in range(300)]
EXPORT = {
    "type": "client",
    "name": "export",
    "description": "export the orders",
    "input_schema": {"type": "object", "properties": {}},
}


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
    yield fake
    fake.close()


def events(stack: LocalStack, run_id: str) -> list[dict[str, Any]]:
    return list(stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after=0")[2]["events"])


def client_call(stack: LocalStack, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120  # the first model call imports litellm: slow on a busy machine
    while True:
        found = [e["data"] for e in events(stack, run_id) if e["type"] == "client_tool_requested"]
        if found:
            return dict(found[0])
        assert time.monotonic() < deadline, events(stack, run_id)
        time.sleep(0.05)


def declared(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or []]


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "tool"]


def exported_run(stack: LocalStack, model: FakeOpenAI) -> tuple[dict[str, Any], str, str]:
    """A run whose client tool answers with ROWS, then reads rows 280.. of it with result_read.
    The read's call is queued once the export's tool_call_id is known (while the run waits)."""
    _, _, agent = stack.invoke_api(
        "POST", "/v1/agents", {"name": "described", "model": "openai/gpt-fake", "tools": [EXPORT]}
    )
    model.tool_calls([("export", {})])
    _, _, accepted = stack.invoke_api("POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "orders?"})
    requested = client_call(stack, accepted["run_id"])
    call_id = requested["tool_call_id"]
    model.tool_calls([("result_read", {"tool_call_id": call_id, "offset": 280, "limit": 50})])
    model.text("the last order is o-0299")
    answer = {"answer": {"tool_call_id": call_id, "outcome": "completed", "output": ROWS}}
    status, _, _ = stack.invoke_api(
        "POST",
        f"/v1/sessions/interactions/{requested['interaction_id']}/respond",
        answer,
        headers={"Idempotency-Key": "described-1"},
    )
    assert status == 202
    return wait_for_run(stack, accepted["run_id"], timeout=120), call_id, str(agent["agent_id"])


def test_a_large_table_is_described_and_result_read_pages_through_the_whole(
    stack: LocalStack, model: FakeOpenAI
) -> None:
    run, call_id, _ = exported_run(stack, model)

    assert run["status"] == "succeeded", run
    first, second, third = model.bodies
    assert "result_read" not in declared(first)  # nothing described yet: nothing extra declared
    (shown,) = tool_messages(second)
    description = json.loads(shown["content"])
    assert tables.is_description(shown["content"]) and len(shown["content"]) < len(json.dumps(ROWS)) / 4
    assert description["rows"] == 300 and description["tool_call_id"] == call_id
    assert description["first_rows"] == ROWS[:20]
    amount = next(c for c in description["columns"] if c["name"] == "amount")
    assert (amount["min"], amount["max"], amount["sum"]) == (0, 2990, sum(r["amount"] for r in ROWS))
    assert "result_read" in declared(second) and declared(second) == sorted(declared(second))
    page = json.loads(tool_messages(third)[-1]["content"])
    assert page["rows"] == ROWS[280:] and page["total_rows"] == 300 and page["next_offset"] is None
    (result,) = [
        e["data"]
        for e in events(stack, run["run_id"])
        if e["type"] == "tool_result" and e["data"]["tool_name"] == "export"
    ]
    assert result.get("described") is True and result["output"] == ROWS  # clients still see the output


def test_a_later_run_of_the_session_reads_it_and_another_session_cannot(
    stack: LocalStack, model: FakeOpenAI
) -> None:
    run, call_id, agent_id = exported_run(stack, model)
    model.tool_calls([("result_read", {"tool_call_id": call_id, "limit": 5})])
    model.text("read")
    _, _, later = stack.invoke_api(
        "POST", f"/v1/agents/{agent_id}/runs", {"message": "first five?", "session_id": run["session_id"]}
    )
    assert wait_for_run(stack, later["run_id"])["status"] == "succeeded"
    model.tool_calls([("result_read", {"tool_call_id": call_id})])
    model.text("nothing")
    _, _, elsewhere = stack.invoke_api("POST", f"/v1/agents/{agent_id}/runs", {"message": "peek"})
    assert wait_for_run(stack, elsewhere["run_id"])["status"] == "succeeded"

    later_first, later_second, _, other_second = model.bodies[3:7]
    assert "result_read" in declared(later_first)  # the session's history holds the description
    assert json.loads(tool_messages(later_second)[-1]["content"])["rows"] == ROWS[:5]
    refused = json.loads(tool_messages(other_second)[-1]["content"])
    assert refused["error"]["code"] == "result_not_found"
    assert described.load("other", run["session_id"], call_id) is None  # another tenant's key


def test_a_table_beyond_an_item_is_read_back_from_storage(stack: LocalStack) -> None:
    from stepwise.tools import results

    rows = [{**row, "note": "n" * 200} for row in ROWS * 10]  # about 900 KB: past what an item holds
    text = json.dumps(rows)
    assert results.offload("local", "run_big", "call_big", text) is not None

    assert described.save("local", "ses_big", "run_big", "call_big", text, in_s3=True)
    assert described.load("local", "ses_big", "call_big") == text
    page = tables.page(text, "call_big", offset=2_990, limit=50)
    assert page is not None and page["rows"] == rows[2_990:] and page["total_rows"] == 3_000
    # Nowhere to keep it (no object in storage, too large for an item): the model is not promised it.
    assert not described.save("local", "ses_big", "run_big", "call_none", text, in_s3=False)
    assert described.load("local", "ses_big", "call_none") is None
