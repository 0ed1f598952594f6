"""Durable runs: cancel, safe replay, Idempotency-Key on starts, double texting on a session."""

import threading
import time
from typing import Any
from urllib.parse import urlparse

import pytest

from stepwise_local.stack import LocalStack
from tests.eventually import eventually
from tests.fakes.receiver import Receiver, Reply
from tests.integration.support import OTHER_KEY, tool, wait_for_run


def agent(stack: LocalStack, **body: Any) -> str:
    status, _, created = stack.invoke_api("POST", "/v1/agents", {"name": "durable", **body})
    assert status == 201, created
    return str(created["agent_id"])


def start(
    stack: LocalStack, agent_id: str, headers: dict[str, str] | None = None, **body: Any
) -> tuple[int, Any]:
    status, _, response = stack.invoke_api(
        "POST", f"/v1/agents/{agent_id}/runs", {"message": "go", **body}, headers=headers
    )
    return status, response


def wait_status(stack: LocalStack, run_id: str, wanted: str, timeout: float = 30) -> dict[str, Any]:
    def current() -> dict[str, Any]:
        _, _, run = stack.invoke_api("GET", f"/v1/runs/{run_id}")
        assert run["status"] == wanted, (run.get("status"), run.get("error"))
        return dict(run)

    return eventually(current, timeout=timeout, what=f"{run_id} to be {wanted}")


ASK = [{"tool_calls": [{"name": "send", "arguments": {"q": "x"}}]}, {"text": "done"}]


# --- cancel ---------------------------------------------------------------------------------------


def test_cancel_during_an_approval_wait_closes_the_interaction(stack: LocalStack, receiver: Receiver) -> None:
    agent_id = agent(stack, tools=[tool("send", f"{receiver.url}/send", permission="ask")])
    _, accepted = start(stack, agent_id, script=ASK)
    wait_status(stack, accepted["run_id"], "waiting")
    _, _, page = stack.invoke_api("GET", f"/v1/runs/{accepted['run_id']}/events")
    (requested,) = [e["data"] for e in page["events"] if e["type"] == "approval_requested"]

    status, _, cancelled = stack.invoke_api("POST", f"/v1/runs/{accepted['run_id']}/cancel")

    assert status == 200 and cancelled["status"] == "cancelled" and cancelled["error"]["code"] == "cancelled"
    assert stack.invoke_api("GET", urlparse(requested["approval_url"]).path, key=None)[0] == 410
    (interaction,) = stack.invoke_api("GET", f"/v1/sessions/{accepted['session_id']}/interactions")[2][
        "interactions"
    ]
    assert interaction["status"] == "expired"  # the contract knows pending, answered, expired
    _, _, page = stack.invoke_api("GET", f"/v1/runs/{accepted['run_id']}/events?after=0&wait=2")
    assert page["events"][-1]["type"] == "run_cancelled" and page["done"] is True
    status, _, body = stack.invoke_api("POST", f"/v1/runs/{accepted['run_id']}/approve", {"approved": True})
    assert status == 410 and body["error"]["code"] == "interaction_closed"  # as respond answers it
    status, _, body = stack.invoke_api("POST", f"/v1/runs/{accepted['run_id']}/cancel")
    assert status == 409 and body["error"]["code"] == "run_finished"
    time.sleep(0.5)
    assert receiver.to("/send") == []


def test_cancel_of_another_tenants_run_is_404(stack: LocalStack) -> None:
    _, accepted = start(stack, agent(stack))
    assert stack.invoke_api("POST", f"/v1/runs/{accepted['run_id']}/cancel", key=OTHER_KEY)[0] == 404


# --- replay ---------------------------------------------------------------------------------------


def test_replay_rules(stack: LocalStack, receiver: Receiver) -> None:
    plain = agent(stack, model="no-such-provider/x")  # fails at the model: no tool ran
    _, failed_early = start(stack, plain)
    failed_early = wait_for_run(stack, failed_early["run_id"])
    assert failed_early["status"] == "failed" and failed_early["tools_executed"] == []

    status, _, replayed = stack.invoke_api("POST", f"/v1/runs/{failed_early['run_id']}/replay")
    assert status == 201 and replayed["replay_of"] == failed_early["run_id"]
    assert replayed["session_id"] != failed_early["session_id"]  # a fresh session
    assert wait_for_run(stack, replayed["run_id"])["replay_of"] == failed_early["run_id"]

    ok_agent = agent(stack)
    _, ok = start(stack, ok_agent)
    wait_for_run(stack, ok["run_id"])
    status, _, body = stack.invoke_api("POST", f"/v1/runs/{ok['run_id']}/replay")
    assert status == 409 and body["error"]["code"] == "run_succeeded"

    receiver.replies["/send"] = Reply(status=200)
    tooled = agent(stack, tools=[tool("send", f"{receiver.url}/send")])
    loop = [
        {"tool_calls": [{"name": "send", "arguments": {"q": "1"}}]}
    ] * 3  # a doom loop: fails after the tool ran twice
    _, after_tools = start(stack, tooled, script=loop)
    after_tools = wait_for_run(stack, after_tools["run_id"])
    assert after_tools["status"] == "failed" and after_tools["tools_executed"] == ["send", "send"], (
        after_tools
    )
    status, _, body = stack.invoke_api("POST", f"/v1/runs/{after_tools['run_id']}/replay")
    assert status == 409 and body["error"]["code"] == "tools_executed" and "send" in body["error"]["message"]
    assert stack.invoke_api("POST", f"/v1/runs/{after_tools['run_id']}/replay?force=true")[0] == 201

    _, waiting = start(
        stack, agent(stack, tools=[tool("send", f"{receiver.url}/send", permission="ask")]), script=ASK
    )
    wait_status(stack, waiting["run_id"], "waiting")
    status, _, body = stack.invoke_api("POST", f"/v1/runs/{waiting['run_id']}/replay?force=true")
    assert status == 409 and body["error"]["code"] == "run_active"
    stack.invoke_api("POST", f"/v1/runs/{waiting['run_id']}/cancel")


def test_replay_of_a_run_whose_tools_are_unknown_is_refused(stack: LocalStack) -> None:
    from stepwise.core.tables import RunItem

    _, accepted = start(stack, agent(stack, model="no-such-provider/x"))
    wait_for_run(stack, accepted["run_id"])
    RunItem("local", accepted["run_id"]).update(actions=[RunItem.tools_executed.remove()])  # unknown: null

    status, _, body = stack.invoke_api("POST", f"/v1/runs/{accepted['run_id']}/replay")
    assert status == 409 and body["error"]["code"] == "tools_unknown"
    assert stack.invoke_api("GET", f"/v1/runs/{accepted['run_id']}")[2]["tools_executed"] is None


# --- Idempotency-Key on starts --------------------------------------------------------------------


def test_the_same_key_and_body_give_the_same_run(stack: LocalStack) -> None:
    agent_id = agent(stack)
    headers = {"Idempotency-Key": "start-1"}

    first = start(stack, agent_id, headers=headers, message="once")
    second = start(stack, agent_id, headers=headers, message="once")
    other_body = start(stack, agent_id, headers=headers, message="different")
    other_tenant = stack.invoke_api(
        "POST", f"/v1/agents/{agent_id}/runs", {"message": "once"}, key=OTHER_KEY, headers=headers
    )

    assert first[0] == second[0] == 202 and first[1]["run_id"] == second[1]["run_id"]
    assert other_body[0] == 422 and other_body[1]["error"]["code"] == "idempotency_key_reused"
    assert other_tenant[0] == 404  # the key is scoped to the tenant: this is just an unknown agent there
    runs = stack.invoke_api("GET", f"/v1/runs?agent_id={agent_id}")[2]["runs"]
    assert len(runs) == 1


def test_concurrent_starts_with_one_key_make_one_run(stack: LocalStack) -> None:
    agent_id = agent(stack)
    results: list[tuple[int, Any]] = []

    def go() -> None:
        results.append(start(stack, agent_id, headers={"Idempotency-Key": "race"}, message="race"))

    threads = [threading.Thread(target=go) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert all(status in (202, 409) for status, _ in results), results
    assert len({body["run_id"] for status, body in results if status == 202}) == 1
    assert len(stack.invoke_api("GET", f"/v1/runs?agent_id={agent_id}")[2]["runs"]) == 1


def fail_once(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, error: Exception) -> list[int]:
    """`owner.name` raises `error` on its first call only: the process failing at that point once.
    Returns the list its calls are counted in."""
    real = getattr(owner, name)
    calls: list[int] = []

    def once(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise error
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, once)
    return calls


def agent_runs(stack: LocalStack, agent_id: str) -> list[dict[str, Any]]:
    return list(stack.invoke_api("GET", f"/v1/runs?agent_id={agent_id}")[2]["runs"])


def test_a_start_retried_after_failing_late_carries_on_its_run(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attempt recorded and launched its run, then failed before answering: Powertools forgot it,
    and the retry used to start a second run with the same message (issue 30's soak)."""
    from stepwise.runs import start as starting

    agent_id = agent(stack)
    fail_once(monkeypatch, starting, "accepted", RuntimeError("the process died after the launch"))
    headers = {"Idempotency-Key": "late-failure"}

    failed = start(stack, agent_id, headers=headers, message="once", script=[{"text": "ok"}])
    retried = start(stack, agent_id, headers=headers, message="once", script=[{"text": "ok"}])

    assert failed[0] == 500 and retried[0] == 202, (failed, retried)
    assert wait_for_run(stack, retried[1]["run_id"])["status"] == "succeeded"
    assert [r["run_id"] for r in agent_runs(stack, agent_id)] == [retried[1]["run_id"]]


def test_a_start_retried_before_its_run_launched_launches_it(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attempt died between recording the run (which holds its new session) and launching it: the
    retry launches that run, which would otherwise wait a day for the sweep to fail it start_lost."""
    from stepwise.runs import start as starting

    agent_id = agent(stack)
    launches = fail_once(monkeypatch, starting, "launch", RuntimeError("the process died before the launch"))
    headers = {"Idempotency-Key": "early-failure"}

    failed = start(stack, agent_id, headers=headers, message="once", script=[{"text": "ok"}])
    (recorded,) = agent_runs(stack, agent_id)
    retried = start(stack, agent_id, headers=headers, message="once", script=[{"text": "ok"}])

    assert failed[0] == 500 and recorded["status"] == "queued"
    assert retried[0] == 202 and retried[1]["run_id"] == recorded["run_id"], retried
    assert wait_for_run(stack, recorded["run_id"])["status"] == "succeeded"
    assert len(launches) == 2 and len(agent_runs(stack, agent_id)) == 1


def test_a_start_that_could_not_launch_starts_afresh_on_retry(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose execution could not be started is failed start_failed and the 503 says to try again:
    the retry under the same key makes a new run rather than answering with the failed one."""
    from botocore.exceptions import ClientError

    from stepwise.core import aws

    agent_id = agent(stack)
    sfn = aws.client("stepfunctions")
    refused = ClientError({"Error": {"Code": "ServiceUnavailable", "Message": "down"}}, "StartExecution")
    fail_once(monkeypatch, sfn, "start_execution", refused)
    headers = {"Idempotency-Key": "no-launch"}

    failed = start(stack, agent_id, headers=headers, message="once", script=[{"text": "ok"}])
    retried = start(stack, agent_id, headers=headers, message="once", script=[{"text": "ok"}])
    again = start(stack, agent_id, headers=headers, message="once", script=[{"text": "ok"}])

    assert failed[0] == 503 and failed[1]["error"]["code"] == "start_failed", failed
    assert retried[0] == again[0] == 202 and retried[1]["run_id"] == again[1]["run_id"]
    assert wait_for_run(stack, retried[1]["run_id"])["status"] == "succeeded"
    statuses = {r["run_id"]: r["status"] for r in agent_runs(stack, agent_id)}
    assert sorted(statuses.values()) == ["failed", "succeeded"], statuses


def test_a_key_reused_with_another_message_after_a_failed_attempt_is_refused(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Powertools forgot the failed attempt, so it cannot compare the bodies: the run it recorded can."""
    from stepwise.runs import start as starting

    agent_id = agent(stack)
    fail_once(monkeypatch, starting, "accepted", RuntimeError("the process died after the launch"))
    headers = {"Idempotency-Key": "reused-late"}

    start(stack, agent_id, headers=headers, message="first", script=[{"text": "ok"}])
    status, body = start(stack, agent_id, headers=headers, message="second", script=[{"text": "ok"}])

    assert status == 422 and body["error"]["code"] == "idempotency_key_reused", body
    assert [r["input"] for r in agent_runs(stack, agent_id)] == ["first"]


# --- double texting -------------------------------------------------------------------------------


def busy_session(stack: LocalStack, receiver: Receiver) -> tuple[str, dict[str, Any]]:
    agent_id = agent(stack, tools=[tool("send", f"{receiver.url}/send", permission="ask")])
    _, first = start(stack, agent_id, script=ASK)
    wait_status(stack, first["run_id"], "waiting")
    return agent_id, first


def test_enqueue_waits_for_the_active_run_then_starts_in_order(stack: LocalStack, receiver: Receiver) -> None:
    agent_id, first = busy_session(stack, receiver)

    text = [{"text": "ok"}]
    statuses = [
        start(stack, agent_id, session_id=first["session_id"], message=f"next {i}", script=text)
        for i in range(2)
    ]
    queued = [body["run_id"] for status, body in statuses]
    assert all(status == 202 and body["status"] == "queued" for status, body in statuses)
    time.sleep(1)
    assert [stack.invoke_api("GET", f"/v1/runs/{r}")[2]["status"] for r in queued] == ["queued", "queued"]

    stack.invoke_api("POST", f"/v1/runs/{first['run_id']}/approve", {"approved": True})
    finished = [wait_for_run(stack, r) for r in queued]

    assert [r["status"] for r in finished] == ["succeeded", "succeeded"]
    assert finished[0]["created_at"] < finished[1]["created_at"]
    assert finished[0]["finished_at"] <= finished[1]["finished_at"]
    session = stack.invoke_api("GET", f"/v1/sessions/{first['session_id']}")[2]
    assert [m["content"] for m in session["messages"] if m["role"] == "user"] == ["go", "next 0", "next 1"]


def test_reject_refuses_a_busy_session_and_writes_nothing(stack: LocalStack, receiver: Receiver) -> None:
    agent_id, first = busy_session(stack, receiver)

    status, body = start(stack, agent_id, session_id=first["session_id"], multitask_strategy="reject")

    assert status == 409 and body["error"]["code"] == "session_busy"
    runs = stack.invoke_api("GET", f"/v1/runs?session_id={first['session_id']}")[2]["runs"]
    assert [r["run_id"] for r in runs] == [first["run_id"]]
    stack.invoke_api("POST", f"/v1/runs/{first['run_id']}/cancel")


def test_interrupt_cancels_the_active_run_and_starts_the_new_one(
    stack: LocalStack, receiver: Receiver
) -> None:
    agent_id, first = busy_session(stack, receiver)

    status, body = start(
        stack,
        agent_id,
        session_id=first["session_id"],
        multitask_strategy="interrupt",
        script=[{"text": "ok"}],
    )

    assert status == 202
    assert wait_for_run(stack, body["run_id"])["status"] == "succeeded"
    interrupted = stack.invoke_api("GET", f"/v1/runs/{first['run_id']}")[2]
    assert interrupted["status"] == "cancelled" and body["run_id"] in interrupted["error"]["message"]


def test_concurrent_starts_on_one_session_never_both_run(stack: LocalStack, receiver: Receiver) -> None:
    agent_id = agent(stack, tools=[tool("send", f"{receiver.url}/send", permission="ask")])
    _, first = start(stack, agent_id, script=ASK)
    wait_status(stack, first["run_id"], "waiting")
    stack.invoke_api("POST", f"/v1/runs/{first['run_id']}/cancel")  # the session is free again
    results: list[tuple[int, Any]] = []

    def go() -> None:
        results.append(start(stack, agent_id, session_id=first["session_id"], script=ASK))

    threads = [threading.Thread(target=go) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    def settled() -> list[str]:
        statuses = [stack.invoke_api("GET", f"/v1/runs/{b['run_id']}")[2]["status"] for _, b in results]
        assert "waiting" in statuses, statuses  # the one that became active reached its approval
        return statuses

    statuses = eventually(settled, what="the active run to wait on its approval")
    assert sorted(statuses) == ["queued", "queued", "waiting"], statuses  # exactly one became active
    for _, body in results:
        stack.invoke_api("POST", f"/v1/runs/{body['run_id']}/cancel")


def test_a_step_whose_process_died_is_retried_and_the_run_completes(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 30's soak: a Lambda killed mid-step (Runtime.ExitError) failed its run at once, though
    every step is safe to run again (the ledger, the context's versions); it is retried like a
    lost answer now."""
    from stepwise_local.lambdas import FunctionError

    lambdas = stack.lambdas
    inner = lambdas.invoke
    died: list[str] = []

    def invoke(name_or_arn: str, event: Any) -> Any:
        if lambdas.logical_id(name_or_arn) == "StepFunction" and not died:
            died.append(str(event.get("run_id")))
            raise FunctionError({"errorType": "Runtime.ExitError", "errorMessage": "killed"})
        return inner(name_or_arn, event)

    monkeypatch.setattr(lambdas, "invoke", invoke)
    _, accepted = start(stack, agent(stack), script=[{"text": "still here"}])

    finished = wait_status(stack, accepted["run_id"], "succeeded")
    assert died == [accepted["run_id"]] and finished["output"] == "still here"
