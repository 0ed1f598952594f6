"""Reconciliation on the local stack: executions that end where no step of ours can record it.

moto's interpreter sends no EventBridge events, so each test builds the "Execution Status Change" that
Step Functions would send from describe_execution and hands it to ReconcilerFunction, as the rule does.
Executions that fail, stop or time out outside our handlers come from short-lived redefinitions of the
state machine (`LocalStack.redefined`): Prepare, the real one, marks the run running, then the
execution fails past every Catch, or idles until it is stopped or times out.
"""

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import boto3
import pytest

from stepwise.core import config, ids
from stepwise.core.schema import utcnow
from stepwise.runs import reconcile
from stepwise.runs.models import Run
from stepwise.store import runs, sessions
from stepwise_local.stack import LocalStack
from tests.eventually import eventually
from tests.fakes.receiver import Receiver
from tests.integration.support import tool, wait_for_run

TENANT = "local"
ASK = [{"tool_calls": [{"name": "send", "arguments": {"q": "x"}}]}, {"text": "done"}]


def sfn() -> Any:
    return boto3.client("stepfunctions")


def execution_arn(run_id: str) -> str:
    return config.machine().execution_arn(run_id)


def _millis(value: Any) -> int | None:
    return int(value.timestamp() * 1000) if value else None


def status_change(run_id: str, **override: Any) -> dict[str, Any]:
    """The event Step Functions sends when the run's execution ends, from describe_execution."""
    described = sfn().describe_execution(executionArn=execution_arn(run_id))
    detail = {
        "executionArn": described["executionArn"],
        "stateMachineArn": described["stateMachineArn"],
        "name": described["name"],
        "status": described["status"],
        "startDate": _millis(described.get("startDate")),
        "stopDate": _millis(described.get("stopDate")),
        "input": described.get("input"),
        "inputDetails": {"included": True},
        "output": described.get("output"),
        "outputDetails": None,
        "error": described.get("error"),
        "cause": described.get("cause"),
        **override,
    }
    return {
        "version": "0",
        "id": f"event-{run_id}",
        "detail-type": "Step Functions Execution Status Change",
        "source": "aws.states",
        "account": "123456789012",
        "time": utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": "us-east-1",
        "resources": [described["executionArn"]],
        "detail": detail,
    }


def deliver(stack: LocalStack, event: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = stack.lambdas.invoke("ReconcilerFunction", event)
    return result


def ended(run_id: str, timeout: float = 30) -> str:
    def status() -> str:
        now = str(sfn().describe_execution(executionArn=execution_arn(run_id))["status"])
        assert now != "RUNNING", f"execution of {run_id} still running"
        return now

    return eventually(status, timeout=timeout, what=f"execution of {run_id} to end")


def wait_status(stack: LocalStack, run_id: str, wanted: str, timeout: float = 30) -> dict[str, Any]:
    def current() -> dict[str, Any]:
        _, _, run = stack.invoke_api("GET", f"/v1/runs/{run_id}")
        assert run["status"] == wanted, run
        return dict(run)

    return eventually(current, timeout=timeout, what=f"{run_id} to be {wanted}")


def events_of(stack: LocalStack, run_id: str) -> list[dict[str, Any]]:
    _, _, page = stack.invoke_api("GET", f"/v1/runs/{run_id}/events")
    return list(page["events"])


def agent(stack: LocalStack, **body: Any) -> str:
    status, _, created = stack.invoke_api("POST", "/v1/agents", {"name": "reconciled", **body})
    assert status == 201, created
    return str(created["agent_id"])


def start(stack: LocalStack, agent_id: str, **body: Any) -> dict[str, Any]:
    status, _, accepted = stack.invoke_api("POST", f"/v1/agents/{agent_id}/runs", {"message": "go", **body})
    assert status == 202, accepted
    return dict(accepted)


# --- Redefinitions: after the real first Step, the execution ends outside our handlers -----------

# A first step that calls a tool (whose address the SSRF guard refuses: an error result, no request),
# so the run is still running when the redefinition takes over.
GO_ON = [{"tool_calls": [{"name": "nothing", "arguments": {"q": "x"}}]}, {"text": "done"}]
NOTHING = tool("nothing", "http://169.254.169.254/nothing")  # refused before any socket opens


def broken(definition: dict[str, Any]) -> dict[str, Any]:
    """Fails past every Catch: a path that is not in the state's input is a States.Runtime error."""
    states = {
        **definition["States"],
        "Broken": {"Type": "Pass", "Parameters": {"status.$": "$.no.such.path"}, "Next": "Done"},
    }
    states["Step"] = {**states["Step"], "Next": "Broken"}
    return {**definition, "States": states}


def idle(timeout: int | None = None) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Waits a minute after the first Step: long enough to be stopped, or to time out after `timeout` s."""

    def change(definition: dict[str, Any]) -> dict[str, Any]:
        states = {**definition["States"], "Idle": {"Type": "Wait", "Seconds": 60, "End": True}}
        states["Step"] = {**states["Step"], "Next": "Idle"}
        changed = {**definition, "States": states}
        if timeout is not None:
            changed["TimeoutSeconds"] = timeout
        return changed

    return change


ENDED = frozenset({"ExecutionSucceeded", "ExecutionFailed", "ExecutionTimedOut", "ExecutionAborted"})


def past_the_first_step(run_id: str, timeout: float = 30) -> None:
    """The first Step has returned: the run is running inside it already, so its status alone does
    not say that the execution moved on to the redefinition. An execution that ended first (a 1 s
    TimeoutSeconds can fire inside a slow first Step) is past it too."""

    def moved_on() -> bool:
        history = sfn().get_execution_history(executionArn=execution_arn(run_id), maxResults=1000)["events"]
        entered = [e["stateEnteredEventDetails"]["name"] for e in history if "stateEnteredEventDetails" in e]
        assert any(name != "Step" for name in entered) or any(e["type"] in ENDED for e in history), entered
        return True

    eventually(moved_on, timeout=timeout, what=f"{run_id} past its first Step")


def running_run(stack: LocalStack, change: Callable[[dict[str, Any]], dict[str, Any]]) -> str:
    agent_id = agent(stack, tools=[NOTHING])
    with stack.redefined(change):  # an execution keeps the definition it started with
        run_id = start(stack, agent_id, script=GO_ON)["run_id"]
        wait_status(stack, run_id, "running")
        past_the_first_step(run_id)
    return str(run_id)


def stopped_run(stack: LocalStack) -> str:
    run_id = running_run(stack, idle())
    sfn().stop_execution(executionArn=execution_arn(run_id), error="Oops", cause="stopped by an operator")
    assert ended(run_id) == "ABORTED"
    return run_id


def failed_run(stack: LocalStack) -> str:
    run_id = running_run(stack, broken)
    assert ended(run_id) == "FAILED"
    return run_id


def waiting_run(stack: LocalStack, receiver: Receiver, **body: Any) -> dict[str, Any]:
    agent_id = agent(stack, tools=[tool("send", f"{receiver.url}/send", permission="ask")])
    accepted = start(stack, agent_id, script=ASK, **body)
    eventually(
        lambda: any(e["type"] == "approval_requested" for e in events_of(stack, accepted["run_id"])),
        timeout=30,
        what="the approval",
    )
    return {**accepted, "agent_id": agent_id}


# --- The event path ------------------------------------------------------------------------------


def test_an_execution_that_fails_past_every_catch_fails_its_run(stack: LocalStack) -> None:
    run_id = failed_run(stack)
    assert stack.invoke_api("GET", f"/v1/runs/{run_id}")[2]["status"] == "running"  # nobody recorded it

    outcome = deliver(stack, status_change(run_id))

    assert outcome["action"] == "reconciled" and outcome["status"] == "failed"
    run = stack.invoke_api("GET", f"/v1/runs/{run_id}")[2]
    assert run["status"] == "failed" and run["error"]["code"] == "execution_failed"
    cause = sfn().describe_execution(executionArn=execution_arn(run_id))["cause"]
    assert "States.Runtime" in run["error"]["message"] and cause in run["error"]["message"]
    assert run["finished_at"] is not None
    last = events_of(stack, run_id)[-1]
    assert last["type"] == "run_failed" and last["data"]["error"] == run["error"]
    assert stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after={last['seq']}")[2]["done"] is True


def test_a_repeated_event_changes_nothing(stack: LocalStack) -> None:
    run_id = failed_run(stack)
    event = status_change(run_id)
    deliver(stack, event)
    run, log = stack.invoke_api("GET", f"/v1/runs/{run_id}")[2], events_of(stack, run_id)

    again = deliver(stack, event)

    assert again["action"] == "already_final" and again["status"] == "failed"
    assert stack.invoke_api("GET", f"/v1/runs/{run_id}")[2] == run
    assert events_of(stack, run_id) == log


def test_an_execution_stopped_from_outside_cancels_its_run_as_aborted(stack: LocalStack) -> None:
    run_id = stopped_run(stack)

    outcome = deliver(stack, status_change(run_id))

    assert outcome["action"] == "reconciled"
    run = stack.invoke_api("GET", f"/v1/runs/{run_id}")[2]
    # (moto keeps no error or cause for a stopped execution; the unit tests read them.)
    assert run["status"] == "cancelled" and run["error"]["code"] == "aborted"
    assert run["error"]["message"].startswith("the run's execution was stopped")
    last = events_of(stack, run_id)[-1]
    assert last["type"] == "run_cancelled" and last["data"]["error"]["code"] == "aborted"


def test_a_timed_out_execution_times_its_run_out(stack: LocalStack) -> None:
    run_id = running_run(stack, idle(timeout=1))
    assert ended(run_id) == "TIMED_OUT"

    deliver(stack, status_change(run_id))

    run = stack.invoke_api("GET", f"/v1/runs/{run_id}")[2]
    assert run["status"] == "timed_out" and run["error"]["code"] == "timed_out"
    assert events_of(stack, run_id)[-1]["type"] == "run_failed"


def test_a_run_stopped_during_an_approval_closes_the_approval(stack: LocalStack, receiver: Receiver) -> None:
    waiting = waiting_run(stack, receiver)
    run_id = waiting["run_id"]
    sfn().stop_execution(executionArn=execution_arn(run_id), error="Oops", cause="stopped by an operator")
    # AWS aborts a task-token wait at once and says so; moto 5.2.5 lets the wait run to its timeout,
    # so the status is the one AWS would send.
    deliver(stack, status_change(run_id, status="ABORTED", error="Oops", cause="stopped by an operator"))

    run = stack.invoke_api("GET", f"/v1/runs/{run_id}")[2]
    assert run["status"] == "cancelled" and run["error"]["code"] == "aborted"
    interactions = stack.invoke_api("GET", f"/v1/sessions/{waiting['session_id']}/interactions")[2]
    assert [i["status"] for i in interactions["interactions"]] == ["expired"]
    status, _, _ = stack.invoke_api("POST", f"/v1/runs/{run_id}/approve", {"approved": True})
    assert status in (404, 409, 410)
    assert receiver.to("/send") == []


def test_the_abort_of_our_own_cancel_leaves_the_cancel_as_it_was(stack: LocalStack) -> None:
    run_id = running_run(stack, idle())
    status, _, cancelled = stack.invoke_api("POST", f"/v1/runs/{run_id}/cancel")
    assert status == 200 and cancelled["status"] == "cancelled"
    assert ended(run_id) == "ABORTED"
    log = events_of(stack, run_id)

    outcome = deliver(stack, status_change(run_id))

    assert outcome["action"] == "already_final"
    assert stack.invoke_api("GET", f"/v1/runs/{run_id}")[2]["error"] == cancelled["error"]
    assert events_of(stack, run_id) == log
    assert [e["type"] for e in log].count("run_cancelled") == 1


def test_a_failure_the_failed_state_recorded_is_left_alone(stack: LocalStack) -> None:
    hook = {
        "event": "OnRunStart",
        "type": "rule",
        "config": {"rules": [{"field": "message", "operator": "CONTAINS", "value": "forbidden"}]},
    }
    agent_id = agent(stack)
    assert stack.invoke_api("POST", f"/v1/agents/{agent_id}/hooks", hook)[0] == 201
    run = wait_for_run(stack, start(stack, agent_id, message="the forbidden thing")["run_id"])
    assert run["status"] == "failed" and run["error"]["code"] == "hook_denied"
    assert ended(run["run_id"]) == "FAILED"  # every recorded failure ends in the RunFailed state
    log = events_of(stack, run["run_id"])

    outcome = deliver(stack, status_change(run["run_id"]))

    assert outcome["action"] == "already_final"
    assert stack.invoke_api("GET", f"/v1/runs/{run['run_id']}")[2] == run
    assert events_of(stack, run["run_id"]) == log


def test_an_event_of_another_state_machine_is_ignored(stack: LocalStack) -> None:
    run_id = failed_run(stack)
    other = "arn:aws:states:us-east-1:123456789012:stateMachine:someone-else"

    outcome = deliver(stack, status_change(run_id, stateMachineArn=other))

    assert outcome["action"] == "ignored"
    assert stack.invoke_api("GET", f"/v1/runs/{run_id}")[2]["status"] == "running"


def test_an_event_without_its_input_reads_it_from_the_execution(stack: LocalStack) -> None:
    run_id = failed_run(stack)

    outcome = deliver(stack, status_change(run_id, input=None, inputDetails={"included": False}))

    assert outcome["action"] == "reconciled" and outcome["tenant_id"] == TENANT


# --- The sweep -----------------------------------------------------------------------------------


def later() -> Any:
    """A sweep's clock once the runs a test just started are old enough to be looked at."""
    return utcnow() + reconcile.SWEEP_GRACE + timedelta(minutes=1)


def test_the_sweep_settles_runs_whose_execution_ended_and_nothing_else(
    stack: LocalStack, receiver: Receiver
) -> None:
    stopped, failed = stopped_run(stack), failed_run(stack)
    succeeded = wait_for_run(stack, start(stack, agent(stack))["run_id"])
    waiting = waiting_run(stack, receiver)["run_id"]
    succeeded_log = events_of(stack, succeeded["run_id"])

    report = reconcile.sweep(now=later())

    assert report.complete
    stopped_outcome, failed_outcome = report.of(stopped), report.of(failed)
    assert stopped_outcome is not None and stopped_outcome.action == "reconciled"
    assert failed_outcome is not None and failed_outcome.action == "reconciled"
    assert stack.invoke_api("GET", f"/v1/runs/{stopped}")[2]["error"]["code"] == "aborted"
    assert stack.invoke_api("GET", f"/v1/runs/{failed}")[2]["error"]["code"] == "execution_failed"
    assert report.of(succeeded["run_id"]) is None and report.of(waiting) is None
    assert stack.invoke_api("GET", f"/v1/runs/{succeeded['run_id']}")[2] == succeeded
    assert events_of(stack, succeeded["run_id"]) == succeeded_log
    assert stack.invoke_api("GET", f"/v1/runs/{waiting}")[2]["status"] == "waiting"

    logs = {run_id: events_of(stack, run_id) for run_id in (stopped, failed)}
    again = reconcile.sweep(now=later())

    assert again.of(stopped) is None and again.of(failed) is None
    assert {run_id: events_of(stack, run_id) for run_id in (stopped, failed)} == logs


def test_the_scheduled_tick_sweeps_but_leaves_young_runs_to_their_events(stack: LocalStack) -> None:
    young = stopped_run(stack)
    tick = {
        "version": "0",
        "id": "tick",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/sweep"],
        "detail": {},
    }

    report = deliver(stack, tick)

    assert report["complete"] is True and young not in {o["run_id"] for o in report["outcomes"]}
    assert stack.invoke_api("GET", f"/v1/runs/{young}")[2]["status"] == "running"


def orphan(stack: LocalStack, age: timedelta) -> Run:
    """A run whose start was lost: recorded, holding its new session, but its execution never began
    (the API died between the two)."""
    agent_id = agent(stack)
    run_id, session_id = ids.new_id("run"), ids.new_id("ses")
    sessions.create(TENANT, session_id, agent_id, active_run_id=run_id)
    run = Run(
        run_id=run_id,
        agent_id=agent_id,
        session_id=session_id,
        status="queued",
        input="go",
        tools_executed=[],
        created_at=utcnow() - age,
    )
    return runs.create(TENANT, run)


def test_a_queued_run_whose_start_was_lost_fails_once_a_day_old(stack: LocalStack) -> None:
    lost, recent = orphan(stack, timedelta(hours=25)), orphan(stack, timedelta(hours=1))

    report = reconcile.sweep()

    lost_outcome, recent_outcome = report.of(lost.run_id), report.of(recent.run_id)
    assert lost_outcome is not None and lost_outcome.action == "reconciled"
    run = stack.invoke_api("GET", f"/v1/runs/{lost.run_id}")[2]
    assert run["status"] == "failed" and run["error"]["code"] == "start_lost"
    assert events_of(stack, lost.run_id)[-1]["type"] == "run_failed"
    assert sessions.get(TENANT, lost.session_id).active_run_id is None  # the session is free again
    assert recent_outcome is not None and recent_outcome.action == "kept"
    assert runs.get(TENANT, recent.run_id).status == "queued"


def test_a_run_enqueued_behind_an_active_run_is_never_failed(stack: LocalStack, receiver: Receiver) -> None:
    active = waiting_run(stack, receiver)
    queued = start(stack, active["agent_id"], session_id=active["session_id"])
    assert queued["status"] == "queued"

    report = reconcile.sweep(now=utcnow() + reconcile.LOST_AFTER + timedelta(hours=1))

    outcome = report.of(queued["run_id"])
    assert outcome is not None and outcome.action == "kept"
    assert runs.get(TENANT, queued["run_id"]).status == "queued"
    assert runs.get(TENANT, active["run_id"]).status == "waiting"


def test_a_queue_stuck_behind_a_finished_run_moves_on(stack: LocalStack, receiver: Receiver) -> None:
    active = waiting_run(stack, receiver)
    queued = start(stack, active["agent_id"], session_id=active["session_id"], script=[{"text": "hi"}])
    # The step that ended the active run died after marking it, before handing the session on.
    sfn().stop_execution(executionArn=execution_arn(active["run_id"]))
    error = {"code": "internal_error", "message": "lost"}
    assert runs.transition(TENANT, active["run_id"], "failed", allowed_from={"waiting"}, error=error)

    report = reconcile.sweep(now=later())

    outcome = report.of(queued["run_id"])
    assert outcome is not None and outcome.action == "resumed_queue"
    assert wait_for_run(stack, queued["run_id"])["status"] == "succeeded"


# --- Retention -----------------------------------------------------------------------------------


def test_messages_expire_and_the_session_shell_does_not(stack: LocalStack) -> None:
    accepted = start(stack, agent(stack), script=[{"text": "hello"}])
    assert wait_for_run(stack, accepted["run_id"])["status"] == "succeeded"

    items = boto3.client("dynamodb").query(
        TableName=config.tables().sessions,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": f"{TENANT}#{accepted['session_id']}"}},
        ConsistentRead=True,
    )["Items"]

    shell = [i for i in items if i["sk"]["S"] == sessions.SHELL]
    messages = [i for i in items if i["sk"]["S"].startswith(sessions.MESSAGE_PREFIX)]
    assert len(shell) == 1 and "expires_at" not in shell[0]
    assert len(messages) >= 2  # the user's message and the answer
    retention = timedelta(days=config.runtime().message_retention_days).total_seconds()
    for message in messages:
        expires = int(message["expires_at"]["N"])
        assert expires == pytest.approx(utcnow().timestamp() + retention, abs=300), json.dumps(message)
