"""Reconciliation: runs whose execution ended where none of our steps could record it.

Every state of agent_run.asl.json catches its errors and ends in Failed, which records them. A few
endings bypass that: an execution stopped from outside (the console, a bare StopExecution), one that
timed out, one that failed where Catch cannot see (States.Runtime, States.DataLimitExceeded), or a
Failed state that failed itself. Step Functions announces each as an "Execution Status Change"; an
EventBridge rule (template.yaml, ReconcilerFunction) delivers them to `on_status_change`, which moves
the run from the active status it was left in to the matching terminal one, with its terminal event,
through the same conditional transition as every step: a run already final is left alone, so a
repeated event, or the event of a failure our Failed state already recorded, changes nothing.

EventBridge can still lose an event (retries exhausted, a rule briefly absent), so `sweep` runs every
five minutes and asks Step Functions about every run still marked active. It finds them with a Scan
of the runs table filtered on status: one read of the whole table per sweep, which is cheap at small
scale and linear in the table's size. The way out when that hurts is a sparse index keyed on a
tenant-scoped attribute that exists only while a run is active (set by `create`, removed by every
terminal `transition`), and a per-tenant query of it instead of the Scan.

Queued runs need care: a run enqueued behind its session's active run (double texting) has no
execution yet, legitimately and for as long as the active run lasts. The sweep never fails a run that
sits in its session's queue. A queued run with no execution that is in no queue lost its start (the
API died between recording it and starting it); it is failed with `start_lost`, but only once it is a
day old (LOST_AFTER), so no start in flight, however slow, is ever mistaken for a lost one.
"""

from __future__ import annotations

import contextlib
import json
import time
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from botocore.exceptions import ClientError
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from stepwise.core import aws, config
from stepwise.core.errors import NotFound
from stepwise.core.schema import utcnow
from stepwise.runs.ending import end_run
from stepwise.runs.models import EventType, Run, RunError, RunStatus
from stepwise.runs.ports import stores
from stepwise.runs.queue import CANCELLED_ERROR, start_next
from stepwise.runs.state import StepFailure, describe_failure

logger = Logger(service="stepwise")

# Younger runs are left to the event path: their execution may be starting this very moment.
SWEEP_GRACE = timedelta(minutes=5)
# A run with no execution at all is only declared lost once it is this old (see the module docstring).
LOST_AFTER = timedelta(hours=24)
# Executions that may still move. PENDING_REDRIVE: a redrive of an ended execution is on its way.
ALIVE = frozenset({"RUNNING", "PENDING_REDRIVE"})
MESSAGE_LIMIT = 2000  # as the Failed state keeps them


# --- What arrives --------------------------------------------------------------------------------


class ExecutionDetail(BaseModel):
    """The `detail` of a Step Functions "Execution Status Change" event."""

    model_config = ConfigDict(populate_by_name=True)

    execution_arn: str = Field(alias="executionArn")
    state_machine_arn: str = Field(alias="stateMachineArn")
    name: str  # the execution's name: our run id
    status: str
    input: str | None = None  # absent when too large for the event (inputDetails.included false)
    error: str | None = None
    cause: str | None = None


class ExecutionStatusChange(EventBridgeModel):
    source: Literal["aws.states"]
    detail_type: Literal["Step Functions Execution Status Change"] = Field(alias="detail-type")
    detail: ExecutionDetail


class SweepTick(EventBridgeModel):
    """The `rate(5 minutes)` schedule's event."""

    source: Literal["aws.events"]
    detail_type: Literal["Scheduled Event"] = Field(alias="detail-type")


Trigger = Annotated[ExecutionStatusChange | SweepTick, Field(discriminator="source")]
_TRIGGER: TypeAdapter[ExecutionStatusChange | SweepTick] = TypeAdapter(Trigger)


def parse(event: dict[str, Any]) -> ExecutionStatusChange | SweepTick:
    """The reconciler's two events, told apart by their source; anything else is a ValidationError."""
    return _TRIGGER.validate_python(event)


# --- What it means for the run -------------------------------------------------------------------


class Ending(BaseModel):
    """The terminal status, error and event a run gets for how its execution ended."""

    status: RunStatus
    error: RunError
    event: EventType


def _end(status: RunStatus, code: str, message: str) -> Ending:
    event: EventType = "run_cancelled" if status == "cancelled" else "run_failed"
    return Ending(status=status, error=RunError(code=code, message=message[:MESSAGE_LIMIT]), event=event)


def _detail(error: str | None, cause: str | None) -> str:
    """The error and its message (read out of a Lambda error's JSON cause), in parentheses."""
    if not error and not cause:
        return ""
    described = describe_failure(StepFailure(Error=error or "", Cause=cause)).message
    text = ": ".join(part for part in (error, described if described != error else None) if part)
    return f" ({text})"


def ending(status: str, error: str | None = None, cause: str | None = None) -> Ending | None:
    """How a run ends when its execution ended with `status` (None while it may still move)."""
    if status in ALIVE:
        return None
    if status == "ABORTED" and error == CANCELLED_ERROR:
        # Our cancel stops the execution before it marks the run: whichever of us gets there first
        # records the same thing.
        return _end("cancelled", "cancelled", cause or "cancelled on request")
    if status == "ABORTED":
        return _end(
            "cancelled", "aborted", f"the run's execution was stopped outside Stepwise{_detail(error, cause)}"
        )
    if status == "TIMED_OUT":
        return _end("timed_out", "timed_out", f"the run's execution timed out{_detail(error, cause)}")
    if status == "FAILED":
        return _end(
            "failed",
            "execution_failed",
            f"the run's execution failed outside its steps{_detail(error, cause)}",
        )
    # SUCCEEDED with the run still active: the execution is over, nothing will ever finish the run.
    return _end(
        "failed", "execution_ended", f"the run's execution ended ({status}) without recording its outcome"
    )


def _lost(run: Run) -> Ending:
    if run.status == "queued":
        return _end("failed", "start_lost", "the run was recorded but its execution never started")
    return _end("failed", "execution_lost", "the run's execution no longer exists")


Action = Literal["reconciled", "already_final", "alive", "kept", "resumed_queue", "ignored"]


class Outcome(BaseModel):
    """What reconciling one run did."""

    run_id: str
    tenant_id: str | None = None
    action: Action
    status: RunStatus | None = None  # the run's status afterwards
    error: RunError | None = None
    reason: str | None = None


# --- Settling a run ------------------------------------------------------------------------------


def settle(tenant_id: str, run_id: str, end: Ending) -> Outcome:
    """Give an active run its ending, once; a run already final is left as it is."""
    try:
        run = stores().runs.get(tenant_id, run_id)
    except NotFound:
        return Outcome(run_id=run_id, tenant_id=tenant_id, action="ignored", reason="no such run")
    if run.done or not end_run(tenant_id, run_id, end.status, error=end.error):
        if run.done:
            _hand_on(tenant_id, run)
        final = stores().runs.get(tenant_id, run_id).status
        return Outcome(run_id=run_id, tenant_id=tenant_id, action="already_final", status=final)
    return Outcome(
        run_id=run_id, tenant_id=tenant_id, action="reconciled", status=end.status, error=end.error
    )


def _hand_on(tenant_id: str, run: Run) -> None:
    """Give the run's session to its next queued run. A no-op when whoever ended the run did it
    already; it matters when that step died between marking the run and handing the session on."""
    with contextlib.suppress(NotFound):  # the session was deleted: nobody waits on it
        start_next(tenant_id, run.session_id, run.run_id)


# --- The event path ------------------------------------------------------------------------------


class RunRef(BaseModel):
    """The part of an execution's input (a RunState) that names its run."""

    tenant_id: str
    run_id: str


def _run_ref(detail: ExecutionDetail) -> RunRef | None:
    raw = detail.input
    if raw is None:  # too large to ride in the event: ask for it
        raw = aws.client("stepfunctions").describe_execution(executionArn=detail.execution_arn).get("input")
    try:
        ref = RunRef.model_validate(json.loads(raw or ""))
    except (ValueError, ValidationError):
        return None
    return ref if ref.run_id == detail.name else None


def on_status_change(change: ExecutionStatusChange) -> Outcome:
    """An execution of ours ended: settle its run."""
    detail = change.detail
    if detail.state_machine_arn != config.machine().state_machine_arn:
        logger.warning("an execution of another state machine", extra={"execution_arn": detail.execution_arn})
        return Outcome(run_id=detail.name, action="ignored", reason="not our state machine")
    ref = _run_ref(detail)
    if ref is None:
        logger.warning("an execution whose input names no run", extra={"execution_arn": detail.execution_arn})
        return Outcome(run_id=detail.name, action="ignored", reason="the execution's input names no run")
    end = ending(detail.status, detail.error, detail.cause)
    if end is None:
        return Outcome(run_id=ref.run_id, tenant_id=ref.tenant_id, action="alive", reason=detail.status)
    outcome = settle(ref.tenant_id, ref.run_id, end)
    logger.info("execution ended", extra={"status": detail.status, **outcome.model_dump(mode="json")})
    return outcome


# --- The sweep -----------------------------------------------------------------------------------


class SweepReport(BaseModel):
    checked: int = 0  # active runs old enough to look at
    outcomes: list[Outcome] = Field(default_factory=list)  # those whose execution is not running
    complete: bool = True  # False when the time budget ran out before the last run

    def of(self, run_id: str) -> Outcome | None:
        return next((o for o in self.outcomes if o.run_id == run_id), None)


def _running_executions() -> set[str]:
    """Names of the executions still running: one call per 1,000, instead of one per run."""
    paginator = aws.client("stepfunctions").get_paginator("list_executions")
    pages = paginator.paginate(stateMachineArn=config.machine().state_machine_arn, statusFilter="RUNNING")
    return {execution["name"] for page in pages for execution in page["executions"]}


def _describe(run_id: str) -> dict[str, Any] | None:
    try:
        described: dict[str, Any] = aws.client("stepfunctions").describe_execution(
            executionArn=config.machine().execution_arn(run_id)
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ExecutionDoesNotExist":
            return None
        raise
    return described


def _without_execution(tenant_id: str, run: Run, now: datetime) -> Outcome:
    """A run with no execution: waiting its turn, its session stuck behind a finished run, or lost."""
    waiting = _in_queue(tenant_id, run)
    if waiting is not None:
        return waiting
    if now - run.created_at < LOST_AFTER:
        return Outcome(run_id=run.run_id, tenant_id=tenant_id, action="kept", reason="no execution yet")
    return settle(tenant_id, run.run_id, _lost(run))


def _in_queue(tenant_id: str, run: Run) -> Outcome | None:
    """What became of a queued run that waits in its session's queue; None: it is in no queue."""
    if run.status != "queued":
        return None
    try:
        session = stores().sessions.get(tenant_id, run.session_id)
    except NotFound:
        return None
    if run.run_id not in session.queue:
        return None
    return _queued(tenant_id, run, session.active_run_id)


def _queued(tenant_id: str, run: Run, active_run_id: str | None) -> Outcome:
    """A run waiting in its session's queue is never failed; but when the run it waits for is over
    (whoever ended it died before handing the session on), the queue is moved on."""
    if active_run_id is not None:
        try:
            active = stores().runs.get(tenant_id, active_run_id)
        except NotFound:
            active = None
        if active is None or active.done:
            started = start_next(tenant_id, run.session_id, active_run_id)
            return Outcome(
                run_id=run.run_id, tenant_id=tenant_id, action="resumed_queue", reason=f"started {started}"
            )
    return Outcome(
        run_id=run.run_id, tenant_id=tenant_id, action="kept", reason="queued behind the active run"
    )


def settle_lost(message: str) -> list[Outcome]:
    """Every execution is known to be gone (the local stack restarted: moto keeps executions in memory
    only), so every active run is failed `execution_lost` with `message`, through end_run as the sweep
    would once it found the execution missing, with no grace: nothing can be starting. A run waiting in
    its session's queue is not failed: it starts when the run ahead of it ends, as it would have. The
    deepest runs go first, so a delegated child reports its own loss to its parent (whose execution is
    gone too) instead of being cancelled as the parent ends."""
    lost = _end("failed", "execution_lost", message)
    everything = stores().runs.active_before(utcnow() + timedelta(minutes=1))  # every active run, however new
    active = sorted(everything, key=lambda pair: -pair[1].depth)
    outcomes = []
    for tenant_id, run in active:
        waiting = _in_queue(tenant_id, run)
        if waiting is not None:
            outcomes.append(waiting)
            continue
        if _describe(run.run_id) is not None:
            continue  # started during this pass: its queue moved on when the run ahead of it ended
        try:
            outcomes.append(settle(tenant_id, run.run_id, lost))
        except Exception:  # one run that cannot be settled must not keep the stack from starting
            logger.exception("lost execution not settled", extra={"run_id": run.run_id})
    changed = [o.model_dump(mode="json") for o in outcomes if o.action in ("reconciled", "resumed_queue")]
    logger.info("executions lost", extra={"changed": changed})
    return outcomes


def sweep(*, now: datetime | None = None, budget_seconds: float | None = None) -> SweepReport:
    """Settle every active run whose execution is over, or was lost, and move stuck queues on."""
    now = now or utcnow()
    deadline = time.monotonic() + budget_seconds if budget_seconds is not None else None
    alive = _running_executions()
    report = SweepReport()
    for tenant_id, run in stores().runs.active_before(now - SWEEP_GRACE):
        if deadline is not None and time.monotonic() > deadline:
            report.complete = False
            break
        report.checked += 1
        if run.run_id in alive:
            continue
        execution = _describe(run.run_id)
        if execution is None:
            outcome = _without_execution(tenant_id, run, now)
        else:
            end = ending(execution["status"], execution.get("error"), execution.get("cause"))
            if end is None:
                continue  # it was only just missing from the list
            outcome = settle(tenant_id, run.run_id, end)
        report.outcomes.append(outcome)
    changed = [
        o.model_dump(mode="json") for o in report.outcomes if o.action in ("reconciled", "resumed_queue")
    ]
    logger.info("sweep", extra={"checked": report.checked, "complete": report.complete, "changed": changed})
    return report
