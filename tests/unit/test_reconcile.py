"""The reconciler's reading of its events, and what each way an execution ends means for its run."""

import json
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import ValidationError

from stepwise.core import config
from stepwise.runs import ports, reconcile
from stepwise_local.cfn_yaml import load_template
from tests.fakes.stores import FakeStores

MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:stepwise-dev-agent-run"
RUN_ID = "run_01J0000000000000000000000"


def status_change(status: str, **detail: Any) -> dict[str, Any]:
    """An "Execution Status Change" as EventBridge delivers it."""
    execution = f"{MACHINE.replace(':stateMachine:', ':execution:')}:{RUN_ID}"
    return {
        "version": "0",
        "id": "315c1398-40ff-a850-213b-158f73e60175",
        "detail-type": "Step Functions Execution Status Change",
        "source": "aws.states",
        "account": "123456789012",
        "time": "2025-01-02T03:04:05Z",
        "region": "us-east-1",
        "resources": [execution],
        "detail": {
            "executionArn": execution,
            "stateMachineArn": MACHINE,
            "name": RUN_ID,
            "status": status,
            "startDate": 1735787000000,
            "stopDate": 1735787045000,
            "input": json.dumps({"tenant_id": "acme", "run_id": RUN_ID, "step": 0, "max_steps": 25}),
            "inputDetails": {"included": True},
            "output": None,
            "outputDetails": None,
            "error": None,
            "cause": None,
            **detail,
        },
    }


SCHEDULED = {
    "version": "0",
    "id": "89d1a02d-5ec7-412e-82f5-13505f849b41",
    "detail-type": "Scheduled Event",
    "source": "aws.events",
    "account": "123456789012",
    "time": "2025-01-02T03:05:00Z",
    "region": "us-east-1",
    "resources": ["arn:aws:events:us-east-1:123456789012:rule/stepwise-dev-ReconcilerFunctionSweep"],
    "detail": {},
}


# --- Parsing ---------------------------------------------------------------------------------------


def test_a_status_change_is_read_with_its_run_and_error() -> None:
    event = status_change("ABORTED", error="Oops", cause="stopped by an operator")

    parsed = reconcile.parse(event)

    assert isinstance(parsed, reconcile.ExecutionStatusChange)
    assert parsed.detail.name == RUN_ID and parsed.detail.status == "ABORTED"
    assert parsed.detail.state_machine_arn == MACHINE
    assert parsed.detail.error == "Oops" and parsed.detail.cause == "stopped by an operator"
    assert reconcile._run_ref(parsed.detail) == reconcile.RunRef(tenant_id="acme", run_id=RUN_ID)


def test_the_schedule_tick_is_told_apart_by_its_source() -> None:
    assert isinstance(reconcile.parse(SCHEDULED), reconcile.SweepTick)


@pytest.mark.parametrize(
    "event",
    [
        {**SCHEDULED, "source": "aws.s3"},
        {**SCHEDULED, "detail-type": "Object Created"},
        {**status_change("FAILED"), "detail-type": "Step Functions State Machine Status Change"},
        {"hello": "world"},
    ],
)
def test_any_other_event_is_refused(event: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        reconcile.parse(event)


@pytest.mark.parametrize(
    "execution_input",
    [
        "not json",
        json.dumps({"run_id": RUN_ID}),  # no tenant
        json.dumps({"tenant_id": "acme", "run_id": "run_someone_else"}),  # names another run
    ],
)
def test_an_input_that_does_not_name_the_executions_run_names_nothing(execution_input: str) -> None:
    parsed = reconcile.parse(status_change("FAILED", input=execution_input))

    assert isinstance(parsed, reconcile.ExecutionStatusChange)
    assert reconcile._run_ref(parsed.detail) is None


# --- Endings ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["RUNNING", "PENDING_REDRIVE"])
def test_an_execution_that_may_still_move_ends_nothing(status: str) -> None:
    assert reconcile.ending(status) is None


def test_a_stop_from_outside_cancels_the_run_as_aborted() -> None:
    end = reconcile.ending("ABORTED", "Oops", "stopped by an operator")

    assert end is not None
    assert (end.status, end.error.code, end.event) == ("cancelled", "aborted", "run_cancelled")
    assert "Oops" in end.error.message and "stopped by an operator" in end.error.message


def test_a_stop_by_our_own_cancel_records_what_the_cancel_records() -> None:
    end = reconcile.ending("ABORTED", reconcile.CANCELLED_ERROR, "interrupted by run run_2")

    assert end is not None
    assert (end.status, end.error.code, end.event) == ("cancelled", "cancelled", "run_cancelled")
    assert end.error.message == "interrupted by run run_2"


def test_a_timeout_times_the_run_out() -> None:
    end = reconcile.ending("TIMED_OUT")

    assert end is not None
    assert (end.status, end.error.code, end.event) == ("timed_out", "timed_out", "run_failed")


def test_a_failure_past_every_catch_fails_the_run_with_its_error_and_cause() -> None:
    cause = "The JSONPath '$.gate.status' specified for the field 'Variable' could not be found in the input"

    end = reconcile.ending("FAILED", "States.Runtime", cause)

    assert end is not None
    assert (end.status, end.error.code, end.event) == ("failed", "execution_failed", "run_failed")
    assert "States.Runtime" in end.error.message and cause in end.error.message


def test_a_lambda_errors_cause_is_read_for_its_message() -> None:
    cause = json.dumps({"errorType": "ThrottlingException", "errorMessage": "Rate exceeded", "trace": []})

    end = reconcile.ending("FAILED", "ThrottlingException", cause)

    assert end is not None and end.error.code == "execution_failed"
    assert end.error.message.endswith("(ThrottlingException: Rate exceeded)")


def test_a_huge_cause_is_cut_to_fit_the_run() -> None:
    end = reconcile.ending("FAILED", "States.Runtime", "x" * 10_000)

    assert end is not None and len(end.error.message) <= 2000


def test_an_execution_that_succeeded_under_an_active_run_fails_it() -> None:
    end = reconcile.ending("SUCCEEDED")

    assert end is not None
    assert (end.status, end.error.code, end.event) == ("failed", "execution_ended", "run_failed")


# --- Retention -------------------------------------------------------------------------------------


def test_messages_are_kept_as_long_as_events_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    config.reset()
    monkeypatch.setenv("STEPWISE_EVENTS_TTL_DAYS", "30")
    monkeypatch.delenv("STEPWISE_MESSAGES_TTL_DAYS", raising=False)
    assert config.runtime().message_retention_days == 30

    config.reset()
    monkeypatch.setenv("STEPWISE_MESSAGES_TTL_DAYS", "7")
    assert config.runtime().message_retention_days == 7

    config.reset()
    monkeypatch.setenv("STEPWISE_MESSAGES_TTL_DAYS", "0")
    with pytest.raises(config.ConfigError, match="STEPWISE_MESSAGES_TTL_DAYS"):
        config.runtime()
    config.reset()


# --- The template's wiring -------------------------------------------------------------------------


def reconciler_events() -> dict[str, Any]:
    template = load_template(Path(__file__).resolve().parents[2] / "template.yaml")
    events: dict[str, Any] = template["Resources"]["ReconcilerFunction"]["Properties"]["Events"]
    return events


def test_the_rule_delivers_exactly_the_endings_the_reconciler_settles() -> None:
    (rule,) = [e["Properties"] for e in reconciler_events().values() if e["Type"] == "EventBridgeRule"]
    pattern = rule["Pattern"]
    (detail_type,) = get_args(reconcile.ExecutionStatusChange.model_fields["detail_type"].annotation)

    assert pattern["source"] == ["aws.states"] and pattern["detail-type"] == [detail_type]
    assert pattern["detail"]["stateMachineArn"] == [{"Ref": "AgentRunStateMachine"}]
    assert set(pattern["detail"]["status"]) == {"FAILED", "TIMED_OUT", "ABORTED"}
    assert all(reconcile.ending(status) is not None for status in pattern["detail"]["status"])


def test_the_sweep_is_scheduled_every_five_minutes() -> None:
    (schedule,) = [e["Properties"] for e in reconciler_events().values() if e["Type"] == "Schedule"]

    assert schedule["Schedule"] == "rate(5 minutes)"


def test_a_lost_run_that_cannot_be_settled_leaves_the_others_settled(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given two runs left active by a restart, the first of which cannot be ended (a broken item)
    from stepwise.runs.models import Run

    def run(run_id: str) -> Run:
        return Run(
            tenant_id="local",
            run_id=run_id,
            agent_id="agt_1",
            session_id="ses_1",
            status="running",
            input="go",
            created_at=reconcile.utcnow(),
        )

    fakes = FakeStores()
    for run_id in ("run_a", "run_b"):
        fakes.runs.create("local", run(run_id))
    monkeypatch.setattr(reconcile, "_describe", lambda _: None)

    def settle(tenant_id: str, run_id: str, ending: Any) -> reconcile.Outcome:
        if run_id == "run_a":
            raise RuntimeError("broken item")
        return reconcile.Outcome(run_id=run_id, tenant_id=tenant_id, action="reconciled", status="failed")

    monkeypatch.setattr(reconcile, "settle", settle)

    # When the lost executions are settled
    with ports.using(fakes.stores()):
        outcomes = reconcile.settle_lost("the local stack restarted")

    # Then the other run is still failed, and starting the stack does not stop at the first
    assert [(o.run_id, o.action) for o in outcomes] == [("run_b", "reconciled")]
