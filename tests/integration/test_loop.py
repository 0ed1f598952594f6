"""The fused loop on the real ASL: the states a run passes through, waits of one parallel batch
together, one ending for every way a run ends, large results kept whole."""

import json
from datetime import timedelta
from typing import Any

import boto3
import pytest

from stepwise.core import s3
from stepwise.core.schema import utcnow
from stepwise.store import interactions as interaction_store
from stepwise_local.stack import LocalStack
from tests.eventually import eventually
from tests.fakes.receiver import Receiver, Reply
from tests.integration.support import tool, wait_for_run


def agent_with(stack: LocalStack, **body: Any) -> str:
    status, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "loop", **body})
    assert status == 201, agent
    return str(agent["agent_id"])


def start(stack: LocalStack, agent_id: str, script: list[dict[str, Any]]) -> dict[str, Any]:
    status, _, accepted = stack.invoke_api(
        "POST", f"/v1/agents/{agent_id}/runs", {"message": "go", "script": script}
    )
    assert status == 202, accepted
    return dict(accepted)


def events(stack: LocalStack, run_id: str) -> list[dict[str, Any]]:
    _, _, page = stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after=0")
    return list(page["events"])


def wait_for_events(stack: LocalStack, run_id: str, etype: str, count: int) -> list[dict[str, Any]]:
    def written() -> list[dict[str, Any]]:
        log = events(stack, run_id)
        found = [e["data"] for e in log if e["type"] == etype]
        assert len(found) >= count, log
        return found

    return eventually(written, timeout=30, what=f"{count} {etype} event(s)")


def states_entered(stack: LocalStack, run_id: str) -> list[str]:
    """The states the run's execution entered, once it has ended (the run ends inside its last Step,
    a moment before the execution reaches Done)."""
    sfn = boto3.client("stepfunctions")
    arn = stack.state_machine_arn.replace(":stateMachine:", ":execution:") + f":{run_id}"
    eventually(
        lambda: sfn.describe_execution(executionArn=arn)["status"] != "RUNNING",
        timeout=30,
        what="the execution to end",
    )
    history = sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"]
    return [e["stateEnteredEventDetails"]["name"] for e in history if "stateEnteredEventDetails" in e]


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def test_a_canonical_run_enters_two_states_per_model_step_and_one_per_wait(
    stack: LocalStack, receiver: Receiver
) -> None:
    agent_id = agent_with(
        stack,
        tools=[
            tool("lookup", f"{receiver.url}/lookup"),
            tool("send", f"{receiver.url}/send", permission="ask"),
        ],
    )
    script = [call("lookup", q="a"), call("lookup", q="b"), call("send", q="c"), call("lookup", q="d")]
    accepted = start(stack, agent_id, [*script, {"text": "done"}])
    (approval,) = wait_for_events(stack, accepted["run_id"], "approval_requested", 1)

    status, _, _ = stack.invoke_api("POST", f"/v1/runs/{accepted['run_id']}/approve", {"approved": True})
    run = wait_for_run(stack, accepted["run_id"])

    assert status == 202 and run["status"] == "succeeded" and run["steps"] == 5
    assert run["tools_executed"] == ["lookup", "lookup", "send", "lookup"]
    # 5 model steps, 4 tool calls, 1 approval: no state per call that needs no human.
    entered = states_entered(stack, accepted["run_id"])
    assert entered == [
        *["Step", "Route"] * 3,
        "Await",
        *["Step", "Route"] * 2,
        "Done",
    ], entered
    assert approval["tool_name"] == "send"


def test_approvals_of_one_parallel_batch_are_asked_together(stack: LocalStack, receiver: Receiver) -> None:
    agent_id = agent_with(
        stack, tools=[tool("read", f"{receiver.url}/read", read_only=True, permission="ask")]
    )
    both = {
        "tool_calls": [{"name": "read", "arguments": {"q": "1"}}, {"name": "read", "arguments": {"q": "2"}}]
    }
    accepted = start(stack, agent_id, [both, {"text": "done"}])

    requested = wait_for_events(stack, accepted["run_id"], "approval_requested", 2)
    assert receiver.to("/read") == []  # neither runs before its approval
    for approval in requested:
        body = {"approved": True, "tool_call_id": approval["tool_call_id"]}
        status, _, answered = stack.invoke_api("POST", f"/v1/runs/{accepted['run_id']}/approve", body)
        assert status == 202, answered
    run = wait_for_run(stack, accepted["run_id"])

    assert run["status"] == "succeeded" and len(receiver.to("/read")) == 2
    assert "AwaitAll" in states_entered(stack, accepted["run_id"])


def test_a_mixed_batch_overlaps_its_reads_and_keeps_the_write_in_order(
    stack: LocalStack, receiver: Receiver
) -> None:
    receiver.replies["/read"] = Reply(body={"ok": True}, delay=0.5)
    receiver.replies["/write"] = Reply(body={"ok": True})
    agent_id = agent_with(
        stack,
        tools=[tool("read", f"{receiver.url}/read", read_only=True), tool("write", f"{receiver.url}/write")],
    )
    names = ["read", "read", "write", "read", "read"]
    calls = [{"name": n, "arguments": {"q": str(i)}} for i, n in enumerate(names)]

    run = wait_for_run(stack, start(stack, agent_id, [{"tool_calls": calls}, {"text": "done"}])["run_id"])

    assert run["status"] == "succeeded"
    reads = receiver.to("/read")
    (write,) = receiver.to("/write")
    first, second = reads[:2], reads[2:]
    assert {r.json()["q"] for r in first} == {"0", "1"} and {r.json()["q"] for r in second} == {"3", "4"}
    assert abs(first[0].at - first[1].at) < 0.5 and abs(second[0].at - second[1].at) < 0.5, (
        "reads did not overlap"
    )
    assert max(r.at for r in first) + 0.45 <= write.at <= min(r.at for r in second), (
        "the write was not between"
    )


def test_a_tool_that_crashes_gets_its_own_error_and_its_siblings_run(
    stack: LocalStack, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stepwise.tools import registry

    real = registry.run

    def crashing(tool: Any, arguments: dict[str, Any], **kwargs: Any) -> Any:
        if arguments.get("q") == "boom":
            raise ZeroDivisionError("inside the tool")
        return real(tool, arguments, **kwargs)

    monkeypatch.setattr(registry, "run", crashing)
    agent_id = agent_with(stack, tools=[tool("read", f"{receiver.url}/read", read_only=True)])
    calls = [{"name": "read", "arguments": {"q": q}} for q in ("boom", "fine")]

    run = wait_for_run(stack, start(stack, agent_id, [{"tool_calls": calls}, {"text": "done"}])["run_id"])

    assert run["status"] == "succeeded"
    results = [e["data"] for e in events(stack, run["run_id"]) if e["type"] == "tool_result"]
    assert sorted(("error" in r, r.get("error", {}).get("code")) for r in results) == [
        (False, None),
        (True, "tool_crashed"),
    ]
    assert len(receiver.to("/read")) == 1


def test_cancel_ends_the_run_once_with_on_run_complete(stack: LocalStack, receiver: Receiver) -> None:
    agent_id = agent_with(stack, tools=[tool("send", f"{receiver.url}/send", permission="ask")])
    hook = {"event": "OnRunComplete", "type": "http", "config": {"url": f"{receiver.url}/complete"}}
    status, _, _ = stack.invoke_api("POST", f"/v1/agents/{agent_id}/hooks", hook)
    assert status == 201
    accepted = start(stack, agent_id, [call("send", q="x"), {"text": "never"}])
    (approval,) = wait_for_events(stack, accepted["run_id"], "approval_requested", 1)

    status, _, cancelled = stack.invoke_api("POST", f"/v1/runs/{accepted['run_id']}/cancel")

    assert status == 200 and cancelled["status"] == "cancelled"
    interaction = interaction_store.get("local", approval["interaction_id"])
    assert interaction.status == "expired"  # its links now answer 410
    (completed,) = receiver.to("/complete")
    assert completed.json()["event"] == "OnRunComplete"
    assert completed.json()["data"] == {"status": "cancelled"}
    assert [e["type"] for e in events(stack, accepted["run_id"])].count("run_cancelled") == 1


def test_a_run_that_fails_while_waiting_closes_its_pending_approvals(
    stack: LocalStack, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = interaction_store.attach_token  # what the Await state stores its token through

    def attach(tenant_id: str, interaction_id: str, token: str) -> Any:
        if interaction_id.endswith("_1"):  # the batch's second wait cannot store its token
            raise RuntimeError("the interactions table is unavailable")
        return real(tenant_id, interaction_id, token)

    monkeypatch.setattr(interaction_store, "attach_token", attach)
    agent_id = agent_with(
        stack, tools=[tool("read", f"{receiver.url}/read", read_only=True, permission="ask")]
    )
    both = {
        "tool_calls": [{"name": "read", "arguments": {"q": "1"}}, {"name": "read", "arguments": {"q": "2"}}]
    }

    run = wait_for_run(stack, start(stack, agent_id, [both, {"text": "done"}])["run_id"])
    wait_for_events(stack, run["run_id"], "run_failed", 1)  # the ending's last act but its hooks

    assert run["status"] == "failed"
    pending = interaction_store.for_run("local", run["run_id"], "pending")
    assert pending == [] and len(interaction_store.for_run("local", run["run_id"])) == 2
    assert events(stack, run["run_id"])[-1]["type"] == "run_failed"


def test_a_result_too_large_for_an_item_is_kept_whole_in_storage(stack: LocalStack) -> None:
    import boto3

    from stepwise.store import sessions
    from stepwise.tools import results

    client = {
        "type": "client",
        "name": "export",
        "description": "export everything",
        "input_schema": {"type": "object", "properties": {}},
    }
    agent_id = agent_with(stack, tools=[client])
    accepted = start(stack, agent_id, [call("export"), {"text": "done"}])
    (requested,) = wait_for_events(stack, accepted["run_id"], "client_tool_requested", 1)
    whole = "0123456789" * 12_000  # 120,000 characters
    answer = {"answer": {"tool_call_id": requested["tool_call_id"], "outcome": "completed", "output": whole}}

    status, _, _ = stack.invoke_api(
        "POST",
        f"/v1/sessions/interactions/{requested['interaction_id']}/respond",
        answer,
        headers={"Idempotency-Key": "k1"},
    )
    run = wait_for_run(stack, accepted["run_id"])

    assert status == 202 and run["status"] == "succeeded"
    (result,) = [e["data"] for e in events(stack, run["run_id"]) if e["type"] == "tool_result"]
    assert result["output_ref"]["chars"] == 120_000 and len(result["output"]) < 50_200
    assert results.read("local", run["run_id"], requested["tool_call_id"]) == whole
    # It is kept as long as the events that cite it: the run's lifecycle tag (EventsTtlDays).
    key = results.key_for("local", run["run_id"], requested["tool_call_id"])
    tags = boto3.client("s3").get_object_tagging(Bucket=s3.bucket(), Key=key)["TagSet"]
    assert tags == [{"Key": s3.RETENTION_TAG, "Value": s3.RUN_RETENTION}]
    (message,) = [m for m in sessions.messages("local", run["session_id"]) if m["role"] == "tool"]
    # The model reads its start and a note: the whole is kept for result_read to page (issue 27).
    shown = json.loads(message["content"])
    assert shown["described"] is True and shown["format"] == "text" and shown["chars"] == 120_000
    assert shown["first_chars"] == whole[:10_000] and "result_read" in shown["note"]


def test_a_stale_or_late_step_cannot_write_the_runs_context(stack: LocalStack) -> None:
    from stepwise.core.errors import RunStateError
    from stepwise.store import run_context

    fresh = run_context.load("local", "run_ctx")
    written = run_context.save("local", "run_ctx", fresh.model_copy(update={"steps": 1}))

    with pytest.raises(RunStateError):
        run_context.save("local", "run_ctx", fresh.model_copy(update={"steps": 7}))  # read before that write
    run_context.mark_ended("local", "run_ctx")
    with pytest.raises(RunStateError):
        run_context.save("local", "run_ctx", written)
    assert run_context.load("local", "run_ctx").steps == 1 and run_context.load("local", "run_ctx").ended


def test_an_active_run_shows_the_counters_of_its_context(stack: LocalStack, receiver: Receiver) -> None:
    agent_id = agent_with(stack, tools=[tool("send", f"{receiver.url}/send", permission="ask")])
    accepted = start(stack, agent_id, [call("send", q="x"), {"text": "done"}])
    wait_for_events(stack, accepted["run_id"], "approval_requested", 1)

    _, _, waiting = stack.invoke_api("GET", f"/v1/runs/{accepted['run_id']}")
    _, _, listed = stack.invoke_api("GET", f"/v1/runs?session_id={accepted['session_id']}")

    assert waiting["status"] == "waiting" and waiting["steps"] == 1 and waiting["usage"]["input_tokens"] > 0
    assert waiting["tools_executed"] == []  # asked, not executed
    assert listed["runs"][0]["steps"] == 1


def test_a_step_that_misses_the_cache_rebuilds_from_the_checkpoint_never_the_session(
    stack: LocalStack, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stepwise.loop import model_call, working
    from stepwise.store import sessions

    agent_id = agent_with(stack, system_prompt="Be brief.", tools=[tool("lookup", f"{receiver.url}/lookup")])
    first = wait_for_run(stack, start(stack, agent_id, [call("lookup", q="1"), {"text": "first"}])["run_id"])
    seen: list[list[dict[str, Any]]] = []
    history_reads: list[str] = []
    real_complete, real_history = model_call.complete, sessions.history

    def recording(**kwargs: Any) -> Any:
        seen.append(kwargs["messages"])
        return real_complete(**kwargs)

    def counted(tenant_id: str, session_id: str, run_id: str) -> Any:
        history_reads.append(run_id)
        return real_history(tenant_id, session_id, run_id)

    monkeypatch.setattr(model_call, "complete", recording)
    monkeypatch.setattr(sessions, "history", counted)
    monkeypatch.setattr(working, "keep", lambda *args: None)  # every step is another function's
    body = {
        "message": "second",
        "session_id": first["session_id"],
        "script": [call("lookup", q="2"), call("lookup", q="3"), {"text": "second answer"}],
    }
    status, _, accepted = stack.invoke_api("POST", f"/v1/agents/{agent_id}/runs", body)
    second = wait_for_run(stack, accepted["run_id"])

    assert status == 202 and second["status"] == "succeeded" and second["steps"] == 3
    assert history_reads == []  # the first step folds the first run in from its checkpoint
    assert "first" in [m.get("content") for m in seen[-1] if m["role"] == "assistant"]  # the earlier run
    assert [m["content"] for m in seen[-1] if m["role"] == "user"] == ["go", "second"]
    assert len([m for m in seen[-1] if m["role"] == "tool"]) == 3  # one from the first run, two of this one


def test_each_run_folds_the_last_completed_one_into_its_history_once(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run 4 begins with runs 1 to 3 in order, read from run 3's checkpoint (which run 3 folded from
    run 2's) and run 3's own messages, never the session; a message past its retention is dropped."""
    from stepwise.core.tables import SessionItem, tenant_key
    from stepwise.loop import model_call
    from stepwise.store import sessions
    from stepwise_local.stack import DEFAULT_TENANT

    agent_id = agent_with(stack)

    def run(message: str, session_id: str | None, script: list[dict[str, Any]]) -> dict[str, Any]:
        body: dict[str, Any] = {"message": message, "script": script}
        if session_id:
            body["session_id"] = session_id
        status, _, accepted = stack.invoke_api("POST", f"/v1/agents/{agent_id}/runs", body)
        assert status == 202, accepted
        return wait_for_run(stack, accepted["run_id"])

    first = run("one", None, [{"text": "answer one"}])
    session_id = first["session_id"]
    # The first run's question will reach the end of its retention before run 4 begins; runs 2 and 3
    # carry it in their checkpoints with that expiry.
    key = tenant_key(DEFAULT_TENANT, session_id)
    item = next(i for i in SessionItem.query(key, SessionItem.sk.startswith(f"msg#{first['run_id']}#")))
    item.update(actions=[SessionItem.expires_at.set(utcnow() + timedelta(minutes=5))])
    second = run("two", session_id, [{"text": "answer two"}])
    third = run("three", session_id, [{"text": "answer three"}])
    assert [r["status"] for r in (first, second, third)] == ["succeeded"] * 3

    seen: list[list[dict[str, Any]]] = []
    reads: list[str] = []
    real_complete, real_history = model_call.complete, sessions.history

    def recording(**kwargs: Any) -> Any:
        seen.append(kwargs["messages"])
        return real_complete(**kwargs)

    def counted(*args: Any) -> Any:
        reads.append(args[2])
        return real_history(*args)

    monkeypatch.setattr(model_call, "complete", recording)
    monkeypatch.setattr(sessions, "history", counted)

    later = utcnow() + timedelta(minutes=10)
    monkeypatch.setattr(sessions, "utcnow", lambda: later)

    fourth = run("four", session_id, [{"text": "answer four"}])
    assert fourth["status"] == "succeeded" and reads == []
    said = [(m["role"], m["content"]) for m in seen[-1] if m["role"] in ("user", "assistant")]
    assert said == [
        ("assistant", "answer one"),  # its question's retention ended
        ("user", "two"),
        ("assistant", "answer two"),
        ("user", "three"),
        ("assistant", "answer three"),
        ("user", "four"),
    ]


def test_a_sessions_usage_sums_its_runs_and_the_scripted_model_costs_nothing(stack: LocalStack) -> None:
    agent_id = agent_with(stack)
    first = wait_for_run(stack, start(stack, agent_id, [{"text": "one"}])["run_id"])
    body = {"message": "again", "session_id": first["session_id"], "script": [{"text": "two"}]}
    _, _, accepted = stack.invoke_api("POST", f"/v1/agents/{agent_id}/runs", body)
    second = wait_for_run(stack, accepted["run_id"])

    assert first["usage"]["cost_usd"] == 0.0 and first["usage"]["cache_write_tokens"] == 0
    status, _, session = stack.invoke_api("GET", f"/v1/sessions/{first['session_id']}")
    assert status == 200
    for field in ("input_tokens", "output_tokens", "cached_tokens", "cache_write_tokens"):
        assert session["usage"][field] == first["usage"][field] + second["usage"][field]
    assert session["usage"]["input_tokens"] > 0 and session["usage"]["cost_usd"] == 0.0
