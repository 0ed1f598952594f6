"""The run's context: the small record every Step reads once and writes once, so a step's DynamoDB
work does not grow with the run's history and the run item is written only when its status changes.

Writes are ordered by `version` (a conditional write that only a stale Step can fail); the run's
ending sets `ended` without touching the version, so a Step that outlived its run fails its next
write instead of acting for a finished run.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, Field
from pynamodb.exceptions import DoesNotExist, UpdateError

from stepwise.core import config
from stepwise.core.errors import RunStateError
from stepwise.core.schema import utcnow
from stepwise.core.tables import CONTEXT_SEQ, RunContextItem, bind, condition_failed, tenant_key
from stepwise.llm.models import Usage
from stepwise.runs.state import Compacted, Wait


class CallRef(BaseModel):
    """One tool call of the current step, as the cursor tracks it; its arguments stay in the stored
    assistant message."""

    id: str
    name: str
    index: int
    parallel_safe: bool = False


class RunContext(BaseModel):
    version: int = 0
    prepared: bool = False
    ended: bool = False
    steps: int = 0
    usage: Usage = Field(default_factory=Usage)
    tools_executed: list[str] = Field(default_factory=list)
    compaction_failures: int = 0
    # The last compaction, applied again to every later call of the run (stepwise.loop.compaction.fit).
    compacted: Compacted | None = None
    # (tool, canonical arguments) digests of the latest calls, oldest first: the doom-loop check.
    recent_calls: list[str] = Field(default_factory=list)
    # The cursor: the current step's calls, the first one without a result, those started whose result
    # may not be recorded (a retried Step checks them), and the pauses it waits on.
    calls: list[CallRef] = Field(default_factory=list)
    next_call: int = 0
    inflight: list[int] = Field(default_factory=list)
    waits: list[Wait] = Field(default_factory=list)
    # The prompt size the provider reported for the last call: with the messages added since, the
    # estimate of the next call's input without re-counting the history.
    prompt_tokens: int = 0
    counted_messages: int = 0
    # Delegation: the child runs this run started, and what they spent once they ended.
    children: list[str] = Field(default_factory=list)
    descendants_usage: Usage = Field(default_factory=Usage)

    @property
    def pending_calls(self) -> list[CallRef]:
        return self.calls[self.next_call :]


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
