"""Cancelling a run: stop its execution, close what it waits on, hand its session on."""

from __future__ import annotations

import contextlib

from stepwise.core.errors import Conflict
from stepwise.runs.ending import end_run, settle
from stepwise.runs.models import Run, RunError
from stepwise.runs.ports import stores
from stepwise.runs.queue import CANCELLED_ERROR, stop_run

__all__ = ["CANCELLED_ERROR", "cancel", "cancel_active"]


def cancel(tenant_id: str, run_id: str, *, reason: str = "cancelled on request") -> Run:
    run = stores().runs.get(tenant_id, run_id)
    if run.done:
        settle(tenant_id, run_id)  # a cancel that died after its transition is finished by its retry
        raise Conflict(f"run {run_id} already {run.status}; there is nothing to cancel", code="run_finished")
    stop_run(run, reason)  # a queued run that never started has no execution: nothing to stop
    end_run(tenant_id, run_id, "cancelled", error=RunError(code="cancelled", message=reason))
    return stores().runs.get(tenant_id, run_id)


def cancel_active(tenant_id: str, session_id: str, *, reason: str) -> None:
    active = stores().sessions.get(tenant_id, session_id).active_run_id
    if active is not None:
        with contextlib.suppress(Conflict):  # it ended on its own meanwhile: the session moved on already
            cancel(tenant_id, active, reason=reason)
