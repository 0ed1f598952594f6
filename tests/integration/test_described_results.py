"""Big tables reach the model described, and result_read pages through the stored whole: through the
real loop, litellm and a fake model on loopback that records what it was sent: OpenAI-compatible, and
Anthropic's Messages API (where the cache marks show)."""

import json
from collections.abc import Iterator
from typing import Any

import pytest

from stepwise.store import described
from stepwise.tools import tables
from stepwise_local.stack import LocalStack
from tests.eventually import eventually
from tests.fakes.anthropic_server import AnthropicReply, FakeAnthropic
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
    def requested() -> dict[str, Any]:
        log = events(stack, run_id)
        found = [e["data"] for e in log if e["type"] == "client_tool_requested"]
        assert found, log
        return dict(found[0])

    # the first model call imports litellm: slow on a busy machine
    return eventually(requested, timeout=120, what="the client tool's request")


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
    # declared from the first call, so the first described table changes no byte of the declarations
    assert "result_read" in declared(first) and declared(first) == sorted(declared(first))
    assert json.dumps(first["tools"]) == json.dumps(second["tools"]) == json.dumps(third["tools"])
    (shown,) = tool_messages(second)
    description = json.loads(shown["content"])
    assert tables.is_description(shown["content"]) and len(shown["content"]) < len(json.dumps(ROWS)) / 4
    assert description["rows"] == 300 and description["tool_call_id"] == call_id
    assert description["first_rows"] == ROWS[:20]
    amount = next(c for c in description["columns"] if c["name"] == "amount")
    assert (amount["min"], amount["max"], amount["sum"]) == (0, 2990, sum(r["amount"] for r in ROWS))
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
    assert "result_read" in declared(later_first)
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


# --- the same path through Anthropic's Messages API, cache marks and all -----------------------------

CLAUDE = "anthropic/claude-sonnet-4-5"


@pytest.fixture
def claude(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAnthropic]:
    server = FakeAnthropic()
    monkeypatch.setenv("ANTHROPIC_API_BASE", server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-fake")
    yield server
    server.close()


def unmarked(value: Any) -> Any:
    """`value` without its cache marks: they move to the newest message on every call."""
    if isinstance(value, dict):
        return {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [unmarked(v) for v in value]
    return value


def tool_results(body: dict[str, Any]) -> dict[str, str]:
    """tool_use_id → the text of its tool_result block, across the request's user turns."""
    out: dict[str, str] = {}
    for message in body["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block.get("type") == "tool_result":
                content = block["content"]
                texts = [c["text"] for c in content] if isinstance(content, list) else [content]
                out[block["tool_use_id"]] = "".join(texts)
    return out


def last_block(body: dict[str, Any]) -> dict[str, Any]:
    content = body["messages"][-1]["content"]
    return dict(content[-1]) if isinstance(content, list) else {}


def test_through_anthropic_a_large_table_is_described_paged_and_cache_marked(
    stack: LocalStack, claude: FakeAnthropic
) -> None:
    _, _, agent = stack.invoke_api(
        "POST",
        "/v1/agents",
        {"name": "described", "model": CLAUDE, "system_prompt": "Be exact.", "tools": [EXPORT]},
    )
    claude.replies.append(AnthropicReply(text="", tool_calls=[("export", {})], cache_write=900))
    _, _, accepted = stack.invoke_api("POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "orders?"})
    requested = client_call(stack, accepted["run_id"])
    call_id = requested["tool_call_id"]
    read = ("result_read", {"tool_call_id": call_id, "offset": 280, "limit": 50})
    claude.replies += [
        AnthropicReply(text="", tool_calls=[read], cache_read=900, cache_write=600),
        AnthropicReply(text="the last order is o-0299", cache_read=1500, cache_write=300),
    ]
    answer = {"answer": {"tool_call_id": call_id, "outcome": "completed", "output": ROWS}}
    status, _, _ = stack.invoke_api(
        "POST",
        f"/v1/sessions/interactions/{requested['interaction_id']}/respond",
        answer,
        headers={"Idempotency-Key": "described-claude"},
    )
    assert status == 202
    run = wait_for_run(stack, accepted["run_id"], timeout=120)

    assert run["status"] == "succeeded" and run["output"] == "the last order is o-0299", run
    first, second, third = claude.requests
    # the declarations, result_read among them from the first call, are the same bytes on every call,
    # marked at their end as the stable prefix; so is the system prompt
    names = [t["name"] for t in first["tools"]]
    assert names == ["export", "result_read"]
    assert json.dumps(first["tools"]) == json.dumps(second["tools"]) == json.dumps(third["tools"])
    assert first["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert all(b.get("cache_control") == {"type": "ephemeral"} for b in second["system"])
    # the moving boundary: each call marks its newest block, and repeats the previous call before it
    assert all(last_block(body).get("cache_control") == {"type": "ephemeral"} for body in claude.requests)
    for before, after in ((first, second), (second, third)):
        assert unmarked(after["messages"][: len(before["messages"])]) == unmarked(before["messages"])

    shown = tool_results(second)[call_id]
    assert tables.is_description(shown) and len(shown) < len(json.dumps(ROWS)) / 4
    description = json.loads(shown)
    assert description["rows"] == 300 and description["first_rows"] == ROWS[:20]
    page = json.loads(tool_results(third)["toolu_2_0"])
    assert page["rows"] == ROWS[280:] and page["total_rows"] == 300 and page["next_offset"] is None
    assert tool_results(third)[call_id] == shown  # the description stays as it was: the prefix holds

    usage = run["usage"]
    assert (usage["cached_tokens"], usage["cache_write_tokens"]) == (2_400, 1_800)
    assert usage["cost_usd"] is not None and usage["cost_usd"] > 0
