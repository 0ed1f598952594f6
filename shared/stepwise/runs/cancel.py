"""Cancelling a run: stop its execution, close what it waits on, hand its session on."""

from __future__ import annotations

import contextlib

from stepwise.core.errors import Conflict
from stepwise.runs.ending import end_run
from stepwise.runs.models import Run, RunError
from stepwise.runs.ports import stores
from stepwise.runs.queue import CANCELLED_ERROR, stop

__all__ = ["CANCELLED_ERROR", "cancel", "cancel_active"]


def cancel(tenant_id: str, run_id: str, *, reason: str = "cancelled on request") -> Run:
    run = stores().runs.get(tenant_id, run_id)
    if run.done:
        raise Conflict(f"run {run_id} already {run.status}; there is nothing to cancel", code="run_finished")
    stop(run_id, reason)  # a queued run that never started has no execution: nothing to stop
    if run.kind == "workflow":
        _stop_workflow(run, reason)
    end_run(tenant_id, run_id, "cancelled", error=RunError(code="cancelled", message=reason))
    return stores().runs.get(tenant_id, run_id)


def cancel_active(tenant_id: str, session_id: str, *, reason: str) -> None:
    active = stores().sessions.get(tenant_id, session_id).active_run_id
    if active is not None:
        with contextlib.suppress(Conflict):  # it ended on its own meanwhile: the session moved on already
            cancel(tenant_id, active, reason=reason)


def _stop_workflow(run: Run, reason: str) -> None:
    """A workflow run's execution is on its version's state machine (`<prefix>-<workflow_id>-v<n>`, in
    the agent-run machine's account and region), named after the run."""
    from botocore.exceptions import ClientError

    from stepwise.core import aws, config
    from stepwise.runs.queue import CANCELLED_ERROR

    workflow_id, version = run.workflow_ref
    base = config.machine().state_machine_arn.rsplit(":", 1)[0].replace(":stateMachine", ":execution", 1)
    arn = f"{base}:{config.workflow_deploy().prefix}-{workflow_id}-v{version}:{run.run_id}"
    with contextlib.suppress(ClientError):  # it ended meanwhile
        aws.client("stepfunctions").stop_execution(
            executionArn=arn, error=CANCELLED_ERROR, cause=reason[:256]
        )
