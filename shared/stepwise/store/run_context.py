"""The run's context: the small record every Step reads once and writes once, so a step's DynamoDB
work does not grow with the run's history and the run item is written only when its status changes.

Writes are ordered by `version` (a conditional write that only a stale Step can fail); the run's
ending sets `ended` without touching the version, so a Step that outlived its run fails its next
write instead of acting for a finished run.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from pynamodb.exceptions import DoesNotExist, TransactWriteError, UpdateError
from pynamodb.expressions.update import Action
from pynamodb.transactions import TransactWrite

from stepwise.core import config
from stepwise.core.schema import utcnow
from stepwise.core.tables import CONTEXT_SEQ, RunContextItem, bind, condition_failed, connection, tenant_key
from stepwise.llm.models import Usage
from stepwise.runs.ports import SessionMessage
from stepwise.runs.state import TRANSIENT, ContextMovedOn, RunContext
from stepwise.store import sessions


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


def save(
    tenant_id: str, run_id: str, context: RunContext, messages: Sequence[SessionMessage] = ()
) -> RunContext:
    """Write `context` over the version it was read at; returns it at its new version. A write that
    finds another version, or the run ended, raises RunStateError (a stale or late Step).

    Usage lines on the context (`unbilled`) are counted in the same request: the write becomes one
    transaction with the tenant's usage counters and budget spend (stepwise.usage.counters), so a
    line is counted exactly when the run's own usage takes it. `messages` of the conversation go in
    that transaction too: the model's turn lands with the context that points at its calls, in one
    round trip instead of two in a row (stepwise.loop.step)."""
    bind()
    version = context.version
    lines = context.unbilled
    body = context.model_dump(mode="json", exclude=set(TRANSIENT))
    expires = utcnow() + timedelta(days=config.runtime().events_ttl_days)
    condition = RunContextItem.ended.does_not_exist()
    condition &= (
        RunContextItem.version.does_not_exist() if version == 0 else RunContextItem.version == version
    )
    item = RunContextItem(_key(tenant_id, run_id), CONTEXT_SEQ)
    actions: list[Action] = [
        RunContextItem.context.set(body),
        RunContextItem.version.set(version + 1),
        RunContextItem.expires_at.set(expires),
    ]
    try:
        if lines or messages:
            with TransactWrite(connection=connection()) as tx:
                tx.update(item, actions=actions, condition=condition)  # the first update
                if lines:
                    from stepwise.usage import counters

                    counters.count(tx, tenant_id, lines)
                for m in messages:
                    tx.save(
                        sessions.message_item(tenant_id, m.session_id, m.run_id, m.step, m.slot, m.message)
                    )
        else:
            item.update(actions=actions, condition=condition)
    except UpdateError as exc:
        if not condition_failed(exc):
            raise
        if not _applied(tenant_id, run_id, version + 1, body):
            raise _moved_on(run_id, context) from exc
    except TransactWriteError as exc:
        # pynamodb sends puts before updates: the context's update comes after the messages.
        reasons, at = exc.cancellation_reasons, len(messages)
        reason = reasons[at] if len(reasons) > at else None
        if reason is not None and reason.code == "ConditionalCheckFailed":
            raise _moved_on(run_id, context) from exc
        raise
    return context.model_copy(update={"version": version + 1, "unbilled": [], "unsaved_usage": Usage()})


def _applied(tenant_id: str, run_id: str, version: int, body: dict[str, object]) -> bool:
    """Whether the context stored is this write's own: botocore retries an update whose answer was
    lost, and the retry fails the version condition its first attempt met (the soak's "timeout after
    apply"); the step went on as if another had moved the run on. (The transaction path needs no such
    check: botocore's ClientRequestToken makes its retry a no-op.)"""
    try:
        item = RunContextItem.get(_key(tenant_id, run_id), CONTEXT_SEQ, consistent_read=True)
    except DoesNotExist:
        return False
    return int(item.version or 0) == version and item.context == body


def _moved_on(run_id: str, context: RunContext) -> ContextMovedOn:
    return ContextMovedOn(
        f"run {run_id} moved on without this step (ended, or another step wrote version "
        f"{context.version + 1}); this step stops",
        context,
    )


def mark_ended(tenant_id: str, run_id: str) -> RunContext:
    """The run has ended: any Step still running for it fails its next write. Returns the context as
    it stood when marked (the update's own answer, no read): a Step's write that landed after its
    ending read the context is in it."""
    bind()
    item = RunContextItem(_key(tenant_id, run_id), CONTEXT_SEQ)
    item.update(actions=[RunContextItem.ended.set(True)])  # pynamodb sets the item from ALL_NEW
    context = RunContext.model_validate(item.context or {})
    return context.model_copy(update={"version": int(item.version or 0), "ended": True})
