"""Erasing what a run was given: its files and their list, for a user's right to deletion."""

from __future__ import annotations

from stepwise.attachments import intake
from stepwise.core.errors import Conflict
from stepwise.runs.ports import stores


def attachments(tenant_id: str, run_id: str) -> None:
    """A user's right to deletion: the run's files and their list go, for good (every S3 version);
    a replay of the run is refused from then on (410 input_gone). A run still active would read them
    in its next step: 409 until it ends."""
    runs = stores().runs
    run = runs.get(tenant_id, run_id)  # 404 for another tenant's run, like a missing one
    if not runs.erase_attachments(tenant_id, run_id):
        raise Conflict(
            f"run {run.run_id} is still {run.status}; cancel it or wait for it to end, then delete its "
            "attachments",
            code="run_active",
        )
    intake.erase(tenant_id, run_id)  # after the record: a retried DELETE finishes what a failed one began
