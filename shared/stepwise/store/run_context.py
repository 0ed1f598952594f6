"""The run's context: the small record every Step reads once and writes once, so a step's DynamoDB
work does not grow with the run's history and the run item is written only when its status changes.

Writes are ordered by `version` (a conditional write that only a stale Step can fail); the run's
ending sets `ended` without touching the version, so a Step that outlived its run fails its next
write instead of acting for a finished run.
"""

from __future__ import annotations

from datetime import timedelta

from pynamodb.exceptions import DoesNotExist, UpdateError

from stepwise.core import config
from stepwise.core.errors import RunStateError
from stepwise.core.schema import utcnow
from stepwise.core.tables import CONTEXT_SEQ, RunContextItem, bind, condition_failed, tenant_key
from stepwise.runs.state import RunContext


def _key(tenant_id: str, run_id: str) -> str:
    return tenant_key(tenant_id, run_id)


def load(tenant_id: str, run_id: str) -> RunContext:
    """The run's context (a fresh one before the first Step)."""
    bind()
    try:
        item = RunContextItem.get(_key(tenant_id, run_id), CONTEXT_SEQ, consistent_read=True)
    except DoesNotExist:
        return RunContext()
    context = RunContext.model_validate(item.context or {})
    return context.model_copy(update={"version": int(item.version or 0), "ended": bool(item.ended)})


def peek(tenant_id: str, run_id: str) -> RunContext | None:
    """The context as readers see it (None before the first Step); eventually consistent is enough."""
    bind()
    try:
        item = RunContextItem.get(_key(tenant_id, run_id), CONTEXT_SEQ)
    except DoesNotExist:
        return None
    context = RunContext.model_validate(item.context or {})
    return context.model_copy(update={"version": int(item.version or 0), "ended": bool(item.ended)})


def save(tenant_id: str, run_id: str, context: RunContext) -> RunContext:
    """Write `context` over the version it was read at; returns it at its new version. A write that
    finds another version, or the run ended, raises RunStateError (a stale or late Step)."""
    bind()
    version = context.version
    body = context.model_dump(mode="json", exclude={"version", "ended"})
    expires = utcnow() + timedelta(days=config.runtime().events_ttl_days)
    condition = RunContextItem.ended.does_not_exist()
    condition &= (
        RunContextItem.version.does_not_exist() if version == 0 else RunContextItem.version == version
    )
    try:
        RunContextItem(_key(tenant_id, run_id), CONTEXT_SEQ).update(
            actions=[
                RunContextItem.context.set(body),
                RunContextItem.version.set(version + 1),
                RunContextItem.expires_at.set(expires),
            ],
            condition=condition,
        )
    except UpdateError as exc:
        if condition_failed(exc):
            raise RunStateError(
                f"run {run_id} moved on without this step (ended, or another step wrote version "
                f"{version + 1}); this step stops"
            ) from exc
        raise
    return context.model_copy(update={"version": version + 1})


def mark_ended(tenant_id: str, run_id: str) -> None:
    """The run has ended: any Step still running for it fails its next write."""
    bind()
    RunContextItem(_key(tenant_id, run_id), CONTEXT_SEQ).update(actions=[RunContextItem.ended.set(True)])
