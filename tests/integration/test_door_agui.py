"""The AG-UI 1.0 door against the local stack: every event it emits parsed with ag-ui-protocol's own
models (the discriminated `Event` union), the input held to its `RunAgentInput`, and one round trip
driven by the official `@ag-ui/client` HttpAgent under Node over loopback HTTP."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from ag_ui.core import Event, RunAgentInput
from pydantic import TypeAdapter

from stepwise.runs.ports import stores
from stepwise_local.stack import DEFAULT_KEY, DEFAULT_TENANT, LocalStack
from tests.eventually import eventually
from tests.fakes.receiver import Receiver
from tests.integration.support import CONFORMANCE, OTHER_KEY, node, served, tool, wait_for_run

EVENTS: TypeAdapter[Any] = TypeAdapter(Event)
LOOKUP = {
    "type": "object",
    "properties": {"q": {"type": "string"}},
    "required": ["q"],
}


def _agent(stack: LocalStack, tools: list[dict[str, Any]] | None = None, **extra: Any) -> str:
    status, _, agent = stack.invoke_api(
        "POST", "/v1/agents", {"name": "ui helper", "model": "scripted", "tools": tools or [], **extra}
    )
    assert status == 201, agent
    return str(agent["agent_id"])


def _input(thread: str, text: str | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "threadId": thread,
        "runId": str(uuid.uuid4()),
        "messages": [{"id": "m1", "role": "user", "content": text}] if text else [],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
        **extra,
    }
    RunAgentInput.model_validate(body)  # what we send is what the official models accept
    return body


def _events(text: str) -> list[Any]:
    """The SSE body as ag_ui events: each `data:` frame validated by the protocol's Event union."""
    frames = [f for f in text.split("\n\n") if f.strip()]
    assert frames and all(f.startswith("data: ") for f in frames), text[:500]
    return [EVENTS.validate_json(f.removeprefix("data: ")) for f in frames]


def _post_once(
    stack: LocalStack, agent_id: str, body: dict[str, Any], key: str | None = None, wait: float = 20
) -> tuple[int, Any]:
    status, headers, answer = stack.invoke_api(
        "POST", f"/v1/agents/{agent_id}/ag-ui?wait={wait}", body, key=key or DEFAULT_KEY
    )
    if status == 200:
        assert headers["content-type"].startswith("text/event-stream")
        return status, _events(answer)
    return status, answer


def _post(
    stack: LocalStack, agent_id: str, body: dict[str, Any], key: str | None = None, wait: float = 20
) -> tuple[int, Any]:
    """One request, and the resumes of its `stepwise:continue` interrupts while the run works on (a cold
    model step can outlast a response): every response's events, in order."""
    status, events = _post_once(stack, agent_id, body, key, wait)
    while status == 200 and _continues(events):
        token = events[-1].outcome.interrupts[0].id
        resume = _input(body["threadId"], resume=[{"interruptId": token, "status": "resolved"}])
        status, more = _post_once(stack, agent_id, resume, key, wait)
        events = [*events, *more] if status == 200 else more
    return status, events


def _continues(events: list[Any]) -> bool:
    outcome = getattr(events[-1], "outcome", None)  # RUN_ERROR has none
    return bool(
        outcome and outcome.type == "interrupt" and outcome.interrupts[0].reason == "stepwise:continue"
    )


def _types(events: list[Any]) -> list[str]:
    return [e.type.value for e in events]


def _finished(events: list[Any]) -> Any:
    assert events[0].type.value == "RUN_STARTED" and events[-1].type.value == "RUN_FINISHED", _types(events)
    return events[-1]


def _stepwise_run(events: list[Any]) -> str:
    return str(events[0].metadata["stepwise"]["runId"])


def test_a_plain_run_streams_its_text_and_finishes_with_usage(stack: LocalStack) -> None:
    agent_id = _agent(stack)
    body = _input("thread-plain", "hello", state={"page": 3}, forwardedProps={"locale": "fr"})
    body["messages"][0]["content"] = [{"type": "text", "text": "hello"}]

    status, events = _post(stack, agent_id, body)

    assert status == 200
    finished = _finished(events)
    assert (events[0].thread_id, events[0].run_id) == ("thread-plain", body["runId"])
    assert "STEP_STARTED" in _types(events) and "STEP_FINISHED" in _types(events)
    text = "".join(e.delta for e in events if e.type.value == "TEXT_MESSAGE_CONTENT")
    assert text and finished.result == text
    assert finished.outcome.type == "success"
    [usage] = finished.usage
    assert usage.input_tokens > 0 and usage.cached_input_tokens == 0
    _, _, run = stack.invoke_api("GET", f"/v1/runs/{_stepwise_run(events)}")
    assert run["status"] == "succeeded" and run["input"] == "hello"
    assert run["metadata"]["ag_ui"] == {
        "thread_id": "thread-plain",
        "run_id": body["runId"],
        "state": {"page": 3},
        "forwarded_props": {"locale": "fr"},
    }


def test_a_retried_run_id_starts_no_second_run(stack: LocalStack) -> None:
    agent_id = _agent(stack)
    body = _input("thread-retry", "once")

    _, first = _post(stack, agent_id, body)
    _, again = _post(stack, agent_id, body)
    status, other = _post(
        stack, agent_id, {**body, "messages": [{"id": "m2", "role": "user", "content": "x"}]}
    )

    assert _stepwise_run(first) == _stepwise_run(again)
    assert _finished(again).result == _finished(first).result  # the same run, streamed again
    _, _, listed = stack.invoke_api("GET", f"/v1/runs?agent_id={agent_id}")
    assert len(listed["runs"]) == 1
    assert status == 422 and other["error"]["code"] == "run_id_reused"


def test_a_thread_is_a_session_and_another_tenants_is_never_reached(stack: LocalStack) -> None:
    agent_id = _agent(stack)
    _, first = _post(stack, agent_id, _input("thread-shared", "one"))
    _, second = _post(stack, agent_id, _input("thread-shared", "two"))
    session = first[0].metadata["stepwise"]["sessionId"]
    assert second[0].metadata["stepwise"]["sessionId"] == session

    other_agent = _agent_of_other_tenant(stack)
    status, refused = _post(stack, other_agent, _input(session, "peek"), key=OTHER_KEY)
    unknown, missing = _post(stack, agent_id, _input("thread-x", "hi"), key=OTHER_KEY)
    _, elsewhere = _post(stack, other_agent, _input("thread-shared", "mine"), key=OTHER_KEY)

    assert status == 404 and refused["error"]["code"] == "session_not_found"  # another tenant's ses_ thread
    assert unknown == 404 and missing["error"]["code"] == "agent_not_found"  # another tenant's agent
    assert elsewhere[0].metadata["stepwise"]["sessionId"] != session  # same threadId, its own session


def _agent_of_other_tenant(stack: LocalStack) -> str:
    status, _, agent = stack.invoke_api(
        "POST", "/v1/agents", {"name": "theirs", "model": "scripted"}, key=OTHER_KEY
    )
    assert status == 201
    return str(agent["agent_id"])


def test_bad_input_is_refused_with_a_stable_code(stack: LocalStack) -> None:
    agent_id = _agent(stack)

    malformed, body = _post(stack, agent_id, {"threadId": "t"})
    no_message, none = _post(stack, agent_id, _input("thread-bad"))
    unknown, gone = _post(stack, "agt_" + "0" * 26, _input("thread-bad", "hi"))
    interrupt, stray = _post(
        stack, agent_id, _input("thread-bad", resume=[{"interruptId": "nope", "status": "resolved"}])
    )

    assert (malformed, body["error"]["code"]) == (422, "validation_error")
    assert (no_message, none["error"]["code"]) == (422, "no_user_message")
    assert (unknown, gone["error"]["code"]) == (404, "agent_not_found")
    assert (interrupt, stray["error"]["code"]) == (404, "interrupt_not_found")


def test_a_failed_run_ends_its_stream_with_run_error(stack: LocalStack) -> None:
    agent_id = _agent(stack, max_tokens_budget=1, script=[{"text": "never said"}])

    _, events = _post(stack, agent_id, _input("thread-fails", "hi"))

    failed = events[-1]
    assert events[0].type.value == "RUN_STARTED" and failed.type.value == "RUN_ERROR", _types(events)
    assert failed.code == "budget_exceeded" and "budget" in failed.message
    assert "STEP_FINISHED" in _types(events)  # the open step is closed before the error


def test_a_tool_call_is_streamed_with_its_result(stack: LocalStack) -> None:
    script = [
        {
            "tool_calls": [
                {"name": "http_request", "arguments": {"method": "GET", "url": "http://127.0.0.1:9/"}}
            ]
        },
        {"text": "no such result"},
    ]
    agent_id = _agent(stack, [{"name": "http_request"}], script=script)
    body = _input("thread-tools", "look it up")

    _, events = _post(stack, agent_id, body)

    types = _types(events)
    start = types.index("TOOL_CALL_START")
    assert types[start : start + 4] == [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
    ]
    call, args, _, result = events[start : start + 4]
    assert call.tool_call_name == "http_request" and json.loads(args.delta)["url"] == "http://127.0.0.1:9/"
    assert result.tool_call_id == call.tool_call_id and "error" in json.loads(result.content)
    assert _finished(events).result == "no such result"


def test_a_front_end_tool_is_answered_by_a_tool_message(stack: LocalStack) -> None:
    script = [
        {"tool_calls": [{"name": "pick_colour", "arguments": {"hint": "sky"}}]},
        {"text": "You picked it."},
    ]
    agent_id = _agent(stack, script=script)
    tools = [
        {
            "name": "pick_colour",
            "description": "Shows a colour picker",
            "parameters": {"type": "object", "properties": {"hint": {"type": "string"}}},
        }
    ]
    first = _input("thread-front", "pick one", tools=tools)

    _, asked = _post(stack, agent_id, first)

    finished = _finished(asked)
    call = next(e for e in asked if e.type.value == "TOOL_CALL_START")
    assert call.tool_call_name == "pick_colour"
    assert finished.outcome.type == "success" and finished.outcome.pending_tool_call_ids == [
        call.tool_call_id
    ]
    history = [
        *first["messages"],
        {
            "id": "a1",
            "role": "assistant",
            "toolCalls": [
                {
                    "id": call.tool_call_id,
                    "type": "function",
                    "function": {"name": "pick_colour", "arguments": "{}"},
                }
            ],
        },
        {"id": "t1", "role": "tool", "toolCallId": call.tool_call_id, "content": "blue"},
    ]
    oversized = [*history[:-1], {**history[-1], "content": "b" * 600_000}]  # no wait could take it
    too_large, refused = _post(stack, agent_id, _input("thread-front", messages=oversized, tools=tools))
    assert (too_large, refused["error"]["code"]) == (413, "answer_too_large")

    _, answered = _post(stack, agent_id, _input("thread-front", messages=history, tools=tools))

    assert _stepwise_run(answered) == _stepwise_run(asked)  # the same run, streamed on
    result = next(e for e in answered if e.type.value == "TOOL_CALL_RESULT")
    assert result.tool_call_id == call.tool_call_id and "blue" in result.content
    assert _finished(answered).result == "You picked it."


@pytest.fixture(scope="module")
def peer() -> Iterator[Receiver]:
    """What the approved HTTP tools call (it answers 200 to anything)."""
    receiving = Receiver()
    yield receiving
    receiving.close()


def _approvals_agent(stack: LocalStack, peer: Receiver) -> str:
    """Two parallel-safe (read-only) tools that ask a human: one step asks for both approvals."""
    tools = [
        tool(name, f"{peer.url}/{name}", read_only=True, permission="ask")
        for name in ("lookup_a", "lookup_b")
    ]
    calls = [{"name": "lookup_a", "arguments": {"q": "a"}}, {"name": "lookup_b", "arguments": {"q": "b"}}]
    return _agent(stack, tools, script=[{"tool_calls": calls}, {"text": "both done"}])


def _interrupts(events: list[Any]) -> list[Any]:
    finished = _finished(events)
    assert finished.outcome.type == "interrupt", finished
    return list(finished.outcome.interrupts)


def test_two_parallel_approvals_resume_one_at_a_time(stack: LocalStack, peer: Receiver) -> None:
    agent_id = _approvals_agent(stack, peer)
    _, first = _post(stack, agent_id, _input("thread-two", "look both up"))
    waiting = _interrupts(first)
    assert sorted(i.metadata["stepwise"]["tool"] for i in waiting) == ["lookup_a", "lookup_b"]
    assert {i.reason for i in waiting} == {"approval"}
    a, b = sorted(waiting, key=lambda i: i.metadata["stepwise"]["tool"])

    _, second = _post(
        stack,
        agent_id,
        _input(
            "thread-two", resume=[{"interruptId": a.id, "status": "resolved", "payload": {"approved": True}}]
        ),
    )
    [left] = _interrupts(second)
    assert left.id == b.id
    _, third = _post(
        stack, agent_id, _input("thread-two", resume=[{"interruptId": b.id, "status": "cancelled"}])
    )

    assert _stepwise_run(first) == _stepwise_run(second) == _stepwise_run(third)
    assert _finished(third).outcome.type == "success" and _finished(third).result == "both done"
    results = {e.tool_call_id: e.content for e in [*second, *third] if e.type.value == "TOOL_CALL_RESULT"}
    assert '"denied"' in results[b.tool_call_id] and '"error"' not in results[a.tool_call_id]  # a ran
    # nothing repeated: each call's events appear in exactly one response
    starts = [
        e.tool_call_id
        for events in (first, second, third)
        for e in events
        if e.type.value == "TOOL_CALL_START"
    ]
    assert sorted(starts) == sorted({a.tool_call_id, b.tool_call_id})


def test_two_parallel_approvals_resume_at_once(stack: LocalStack, peer: Receiver) -> None:
    agent_id = _approvals_agent(stack, peer)
    _, first = _post(stack, agent_id, _input("thread-both", "look both up"))
    resume = [
        {"interruptId": i.id, "status": "resolved", "payload": {"decision": "approve"}}
        for i in _interrupts(first)
    ]
    mine = _input("thread-both", resume=resume)
    elsewhere, wrong_agent = _post(stack, _agent(stack), mine)
    theirs, other_tenant = _post(stack, _agent_of_other_tenant(stack), mine, key=OTHER_KEY)
    assert (elsewhere, wrong_agent["error"]["code"]) == (404, "interrupt_not_found")  # nothing answered
    assert (theirs, other_tenant["error"]["code"]) == (404, "interaction_not_found")

    _, done = _post(stack, agent_id, _input("thread-both", resume=resume))

    finished = _finished(done)
    assert finished.outcome.type == "success" and finished.result == "both done"
    run = wait_for_run(stack, _stepwise_run(first))
    assert run["status"] == "succeeded"
    again, twice = _post(stack, agent_id, _input("thread-both", resume=resume))
    assert (again, twice["error"]["code"]) == (409, "already_answered")  # a second answer, as over the API


def test_a_delegation_is_a_subagent_bracket(stack: LocalStack) -> None:
    child_id = _agent(stack, script=[{"text": "child says hi"}])
    script = [
        {"tool_calls": [{"name": "helper", "arguments": {"message": "say hi"}}]},
        {"text": "parent done"},
    ]
    tools = [{"type": "agent", "name": "helper", "description": "A helper", "agent_id": child_id}]
    parent_id = _agent(stack, tools, script=script)

    _, events = _post(stack, parent_id, _input("thread-sub", "delegate"))

    types = _types(events)
    opened, closed = types.index("SUBAGENT_STARTED"), types.index("SUBAGENT_FINISHED")
    started, finished = events[opened], events[closed]
    inside = events[opened + 1 : closed]
    assert started.subagent_run_id == finished.subagent_run_id and started.name == "helper"
    assert inside and all(e.subagent_run_id == started.subagent_run_id for e in inside)
    assert "".join(e.delta for e in inside if e.type.value == "TEXT_MESSAGE_CONTENT") == "child says hi"
    assert finished.outcome.type == "success" and finished.result == "child says hi"
    assert _finished(events).result == "parent done"


def test_a_stream_bounded_early_continues_without_repeating(stack: LocalStack, peer: Receiver) -> None:
    agent_id = _approvals_agent(stack, peer)

    _, cut = _post_once(stack, agent_id, _input("thread-cut", "look both up"), wait=0.2)
    parts = [cut]
    while _finished(parts[-1]).outcome.type == "interrupt":
        interrupts = _interrupts(parts[-1])
        if interrupts[0].reason != "stepwise:continue":
            break
        resume = [{"interruptId": interrupts[0].id, "status": "resolved"}]
        _, more = _post_once(stack, agent_id, _input("thread-cut", resume=resume), wait=0.2)
        parts.append(more)

    assert {i.reason for i in _interrupts(parts[-1])} == {"approval"}
    steps = [e.step_name for part in parts for e in part if e.type.value == "STEP_STARTED"]
    assert steps.count("step 1") <= len(parts)  # reopened only where a response took over
    calls = [e.tool_call_id for part in parts for e in part if e.type.value == "TOOL_CALL_START"]
    assert len(calls) == len(set(calls)) == 2


def test_a_subagents_approval_interrupts_the_root_and_resumes_inside_its_bracket(
    stack: LocalStack, peer: Receiver
) -> None:
    asks = [tool("lookup_a", f"{peer.url}/child", permission="ask")]
    child_id = _agent(
        stack,
        asks,
        script=[{"tool_calls": [{"name": "lookup_a", "arguments": {"q": "c"}}]}, {"text": "child done"}],
    )
    helper = [{"type": "agent", "name": "helper", "description": "A helper", "agent_id": child_id}]
    script = [{"tool_calls": [{"name": "helper", "arguments": {"message": "go"}}]}, {"text": "parent done"}]
    parent_id = _agent(stack, helper, script=script)

    _, asked = _post(stack, parent_id, _input("thread-nested", "delegate"))

    [waiting] = _interrupts(asked)
    suspended = [e for e in asked if e.type.value == "SUBAGENT_FINISHED"][-1]
    assert waiting.reason == "approval" and waiting.subagent_run_id == suspended.subagent_run_id
    assert suspended.outcome.type == "suspended" and suspended.outcome.interrupt_ids == [waiting.id]
    # The parent's own wait on its child (hidden, but derivable) is answered by the child's ending alone:
    # resuming it would hand the parent a made-up result.
    child = stores().runs.get(DEFAULT_TENANT, waiting.subagent_run_id)
    forged = [{"interruptId": child.parent_interaction_id, "status": "resolved", "payload": "made up"}]
    refused, why = _post(stack, parent_id, _input("thread-nested", resume=forged))
    assert (refused, why["error"]["code"]) == (404, "interrupt_not_found")
    assert stores().interactions.get(DEFAULT_TENANT, str(child.parent_interaction_id)).status == "pending"

    _, done = _post(
        stack, parent_id, _input("thread-nested", resume=[{"interruptId": waiting.id, "status": "resolved"}])
    )

    reopened = next(e for e in done if e.type.value == "SUBAGENT_STARTED")
    assert (reopened.subagent_run_id, reopened.name) == (waiting.subagent_run_id, "helper")
    inside = "".join(e.delta for e in done if e.type.value == "TEXT_MESSAGE_CONTENT" and e.subagent_run_id)
    assert inside == "child done" and _finished(done).result == "parent done"


# --- The official client: @ag-ui/client's HttpAgent under Node, over loopback HTTP ----------------------

NODE_SCRIPT = r"""
const { HttpAgent } = require("@ag-ui/client");
const [url, key] = process.argv.slice(-2);
(async () => {
  const agent = new HttpAgent({ url, headers: { Authorization: `Bearer ${key}` } });
  agent.messages = [{ id: "u1", role: "user", content: "look both up" }];
  const seen = [];
  const interrupts = [];
  const onEvent = ({ event }) => { seen.push(event.type); };
  await agent.runAgent({}, { onEvent });
  // Approve every approval; a `stepwise:continue` interrupt (a response cut at its bound) just resumes.
  for (let round = 0; agent.pendingInterrupts.length && round < 10; round++) {
    interrupts.push(...agent.pendingInterrupts.map((i) => ({ id: i.id, reason: i.reason })));
    const resume = agent.pendingInterrupts.map((i) => (
      { interruptId: i.id, status: "resolved", payload: { approved: true } }));
    await agent.runAgent({ resume }, { onEvent });
  }
  const text = agent.messages.filter((m) => m.role === "assistant").map((m) => m.content || "").join("");
  console.log(JSON.stringify({ interrupts, seen, text, pending: agent.pendingInterrupts.length }));
})().catch((e) => { console.error(e && e.stack || e); process.exit(1); });
"""


@pytest.fixture(scope="module")
def server(stack: LocalStack) -> Iterator[str]:
    with served(stack.gateway) as url:
        yield url


def test_the_official_http_agent_runs_interrupts_and_resumes(
    stack: LocalStack, server: str, peer: Receiver
) -> None:
    agent_id = _approvals_agent(stack, peer)

    done = subprocess.run(
        [node(), "-e", NODE_SCRIPT, f"{server}/v1/agents/{agent_id}/ag-ui", "sk-local-dev"],
        cwd=CONFORMANCE,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    approvals = [i for i in seen["interrupts"] if i["reason"] == "approval"]
    assert len(approvals) == 2 and len({i["id"] for i in approvals}) == 2
    assert seen["seen"].count("RUN_STARTED") == seen["seen"].count("RUN_FINISHED") >= 2
    assert seen["pending"] == 0 and "both done" in seen["text"]
    eventually(
        lambda: wait_for_run(stack, _run_of(stack, agent_id))["status"] == "succeeded", what="the run to end"
    )


def _run_of(stack: LocalStack, agent_id: str) -> str:
    _, _, listed = stack.invoke_api("GET", f"/v1/runs?agent_id={agent_id}")
    [run] = listed["runs"]
    return str(run["run_id"])
