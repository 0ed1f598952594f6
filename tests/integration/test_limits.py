"""The loop's safeguards: doom loops, truncation, token budgets, step limits, tool concurrency."""

import itertools
from typing import Any

from stepwise_local.stack import LocalStack
from tests.fakes.receiver import Receiver, Reply
from tests.integration.support import tool, wait_for_run


def agent_with(stack: LocalStack, **body: Any) -> str:
    status, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "limits", **body})
    assert status == 201, agent
    return str(agent["agent_id"])


def run(stack: LocalStack, agent_id: str, **body: Any) -> dict[str, Any]:
    status, _, accepted = stack.invoke_api("POST", f"/v1/agents/{agent_id}/runs", {"message": "go", **body})
    assert status == 202, accepted
    return wait_for_run(stack, accepted["run_id"])


def test_the_same_call_three_times_in_a_row_is_a_doom_loop(stack: LocalStack, receiver: Receiver) -> None:
    agent_id = agent_with(stack, tools=[tool("lookup", f"{receiver.url}/lookup")])
    same = {"tool_calls": [{"name": "lookup", "arguments": {"q": "again"}}]}

    result = run(stack, agent_id, script=[same, same, same, {"text": "never"}])

    assert result["status"] == "failed"
    assert result["error"]["code"] == "doom_loop"
    assert "lookup" in result["error"]["message"] and "3 times" in result["error"]["message"]
    assert len(receiver.to("/lookup")) == 2  # the third call was never made


def test_varying_arguments_are_not_a_loop(stack: LocalStack, receiver: Receiver) -> None:
    agent_id = agent_with(stack, tools=[tool("lookup", f"{receiver.url}/lookup")])
    script = [{"tool_calls": [{"name": "lookup", "arguments": {"q": str(i % 2)}}]} for i in range(4)]

    result = run(stack, agent_id, script=[*script, {"text": "done"}])

    assert result["status"] == "succeeded" and len(receiver.to("/lookup")) == 4


def test_a_huge_tool_result_reaches_the_model_as_its_start_and_a_note(
    stack: LocalStack, receiver: Receiver
) -> None:
    import json

    from stepwise.store import described, sessions

    receiver.replies["/big"] = Reply(body="x" * 60_000)  # over the tool result limit (50,000)
    agent_id = agent_with(stack, tools=[tool("big", f"{receiver.url}/big")])

    result = run(stack, agent_id, script=[{"tool_calls": [{"name": "big", "arguments": {"q": "all"}}]}])

    (tool_message,) = [m for m in sessions.messages("local", result["session_id"]) if m["role"] == "tool"]
    shown = json.loads(tool_message["content"])
    assert len(tool_message["content"]) < 10_600 and shown["first_chars"] == "x" * 10_000
    assert "result_read" in shown["note"] and shown["chars"] == 60_000
    # the whole is kept for result_read, not cut
    kept = described.load("local", result["session_id"], tool_message["tool_call_id"])
    assert kept == "x" * 60_000


def test_a_token_budget_stops_the_run_before_it_is_spent(stack: LocalStack, receiver: Receiver) -> None:
    agent_id = agent_with(stack, tools=[tool("lookup", f"{receiver.url}/lookup")])
    call = [{"tool_calls": [{"name": "lookup", "arguments": {"q": str(i)}}]} for i in range(10)]

    result = run(stack, agent_id, max_tokens_budget=300, script=call)

    assert result["status"] == "failed"
    assert result["error"]["code"] == "budget_exceeded"
    assert result["usage"]["input_tokens"] + result["usage"]["output_tokens"] <= 300


def test_the_agents_budget_applies_when_the_run_names_none(stack: LocalStack) -> None:
    agent_id = agent_with(stack, max_tokens_budget=1)

    result = run(stack, agent_id)

    assert result["error"]["code"] == "budget_exceeded" and result["steps"] == 0


def test_parallel_safe_calls_overlap_and_results_keep_the_models_order(
    stack: LocalStack, receiver: Receiver
) -> None:
    from stepwise.store import sessions

    receiver.replies["/slow"] = Reply(body={"slow": True}, delay=1.0)
    agent_id = agent_with(stack, tools=[tool("slow", f"{receiver.url}/slow", read_only=True)])
    calls = [{"name": "slow", "arguments": {"q": str(i)}} for i in range(3)]

    result = run(stack, agent_id, script=[{"tool_calls": calls}, {"text": "done"}])

    assert result["status"] == "succeeded"
    arrivals = [r.at for r in receiver.to("/slow")]
    spread = max(arrivals) - min(arrivals)
    assert len(arrivals) == 3 and spread < 1.0, f"calls arrived {spread:.1f}s apart: they did not overlap"
    messages = sessions.messages("local", result["session_id"])
    assistant = next(m for m in messages if m.get("tool_calls"))
    assert [m["tool_call_id"] for m in messages if m["role"] == "tool"] == [
        c["id"] for c in assistant["tool_calls"]
    ]


def test_calls_that_are_not_parallel_safe_run_one_at_a_time_in_order(
    stack: LocalStack, receiver: Receiver
) -> None:
    receiver.replies["/write"] = Reply(delay=0.3)
    agent_id = agent_with(stack, tools=[tool("write", f"{receiver.url}/write")])
    calls = [{"name": "write", "arguments": {"q": str(i)}} for i in range(3)]

    result = run(stack, agent_id, script=[{"tool_calls": calls}, {"text": "done"}])

    assert result["status"] == "succeeded"
    writes = receiver.to("/write")
    assert [r.json()["q"] for r in writes] == ["0", "1", "2"]
    assert all(b.at - a.at >= 0.29 for a, b in itertools.pairwise(writes)), "writes overlapped"
