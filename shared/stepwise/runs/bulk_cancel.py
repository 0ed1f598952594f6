"""The kill switch for many runs at once: `POST /v1/runs:cancel` cancels every active run of the tenant
that matches its filters, each through the one cancel (stepwise.runs.cancel).

A request has 29 seconds at most (API Gateway's integration timeout), and a cancel costs a
StopExecution and the run's ending (a few DynamoDB writes), so a large set cannot be cancelled within
one. The request cancels for at most REQUEST_SECONDS (and at most MAX_PER_REQUEST runs); what is left
is handed to the reconciler function, invoked asynchronously with the same filters, which goes on in
its own invocations (each re-invokes itself while runs remain). `cancelled` is then the number this
request cancelled and `continuing` says the rest is being cancelled in the background.

The set is fixed by time: without `created_before`, runs created after the request are not cancelled
(the continuation carries the request's time), so a kill switch never races the runs started after it.
A run that ended meanwhile is skipped; a parent's cancel cancels its children, which are then skipped
(and not counted) when their own turn comes.
"""

from __future__ import annotations

import contextlib
import json
import time
from datetime import datetime
from typing import Any, Literal

from aws_lambda_powertools import Logger
from pydantic import BaseModel, Field

from stepwise.core import aws, config
from stepwise.core.errors import Conflict, NotFound
from stepwise.core.ids import AGENT_ID, USER_ID
from stepwise.core.schema import Strict, Timestamp, utcnow
from stepwise.runs.cancel import cancel
from stepwise.runs.models import Run, RunStatus
from stepwise.runs.ports import stores

logger = Logger(service="stepwise")

REQUEST_SECONDS = 10.0  # of the API's 29: the rest is margin for the hand-over and the answer
MAX_PER_REQUEST = 200
PAGE = 100
REASON = "cancelled in bulk (POST /v1/runs:cancel)"
# What the reconciler is invoked with to go on (stepwise.runs.reconcile tells it apart by this key).
CONTINUE_KEY = "bulk_cancel"

ActiveStatus = Literal["queued", "running", "waiting"]


class CancelFilter(Strict):
    """Which of the tenant's active runs to cancel; no filter cancels all of them."""

    agent_id: str | None = Field(default=None, pattern=AGENT_ID)
    user_id: str | None = Field(default=None, pattern=USER_ID)
    status: ActiveStatus | None = None
    created_before: Timestamp | None = None

    def statuses(self) -> list[RunStatus]:
        return [self.status] if self.status else ["queued", "running", "waiting"]

    def matches(self, run: Run, cutoff: datetime) -> bool:
        return (self.user_id is None or run.user_id == self.user_id) and run.created_at < cutoff


class BulkCancelled(BaseModel):
    cancelled: int = Field(description="Runs this request cancelled")
    continuing: bool = Field(
        description="More runs matched than one request may cancel: the rest are being cancelled in "
        "the background (list them with GET /v1/runs?status=...)"
    )


class Continuation(BaseModel):
    """What the reconciler gets to go on with a bulk cancel."""

    tenant_id: str
    filter: CancelFilter
    cutoff: Timestamp


def _matching(tenant_id: str, wanted: CancelFilter, cutoff: datetime) -> Any:
    """The tenant's active runs that match, page by page (a cancelled run drops out of its status)."""
    for status in wanted.statuses():
        token: str | None = None
        while True:
            page, token = stores().runs.list_runs(
                tenant_id, agent_id=wanted.agent_id, status=status, limit=PAGE, next_token=token
            )
            yield from (run for run in page if wanted.matches(run, cutoff))
            if token is None:
                break


def cancel_some(
    tenant_id: str, wanted: CancelFilter, cutoff: datetime, *, seconds: float, at_most: int
) -> tuple[int, bool]:
    """Cancel matching runs for up to `seconds` and `at_most` runs: (how many, whether any are left)."""
    deadline = time.monotonic() + seconds
    cancelled = 0
    for run in _matching(tenant_id, wanted, cutoff):
        if cancelled >= at_most or time.monotonic() > deadline:
            return cancelled, True
        with contextlib.suppress(Conflict, NotFound):  # it ended meanwhile (or with its parent)
            cancel(tenant_id, run.run_id, reason=REASON)
            cancelled += 1
    return cancelled, False


def cancel_matching(tenant_id: str, wanted: CancelFilter) -> BulkCancelled:
    """`POST /v1/runs:cancel`: what one request can cancel, the rest handed on."""
    now = utcnow()
    cutoff = min(wanted.created_before, now) if wanted.created_before else now
    cancelled, more = cancel_some(tenant_id, wanted, cutoff, seconds=REQUEST_SECONDS, at_most=MAX_PER_REQUEST)
    if more:
        rest = Continuation(tenant_id=tenant_id, filter=wanted, cutoff=cutoff)
        hand_on(rest, config.bulk_cancel().function)
    return BulkCancelled(cancelled=cancelled, continuing=more)


def hand_on(continuation: Continuation, function: str) -> None:
    """Invoke `function` (the reconciler) asynchronously to go on with the cancel."""
    payload = json.dumps({CONTINUE_KEY: continuation.model_dump(mode="json")})
    aws.client("lambda").invoke(FunctionName=function, InvocationType="Event", Payload=payload.encode())


def is_continuation(event: dict[str, Any]) -> bool:
    return CONTINUE_KEY in event


def go_on(event: dict[str, Any], *, seconds: float, function: str) -> dict[str, Any]:
    """The reconciler's part: cancel for `seconds`, then hand the rest on to `function` (itself) again.
    A pass that cancels nothing while runs still match stops (nothing it can do will change that)."""
    continuation = Continuation.model_validate(event[CONTINUE_KEY])
    cancelled, more = cancel_some(
        continuation.tenant_id, continuation.filter, continuation.cutoff, seconds=seconds, at_most=1 << 30
    )
    if more and cancelled:
        hand_on(continuation, function)
    logger.info(
        "bulk cancel", extra={"tenant_id": continuation.tenant_id, "cancelled": cancelled, "more": more}
    )
    return {"cancelled": cancelled, "continuing": more and bool(cancelled)}
