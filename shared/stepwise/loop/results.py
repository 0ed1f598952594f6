"""Where a call's result goes: stored at its fixed key in the session, where the model will read it,
and as a `tool_result` event, where clients see it. A large table is described instead (the whole
kept for result_read), and a result too large for an item is kept whole in S3."""

from __future__ import annotations

from typing import Any

from stepwise.attachments import render
from stepwise.loop.calls import Message, Refused, StepScope
from stepwise.runs import events
from stepwise.runs.ports import stores
from stepwise.runs.state import CallRef
from stepwise.sessions.models import tool_slot
from stepwise.tools import registry, tables
from stepwise.tools.base import TOOL_RESULT_LIMIT, ToolResult

EVENT_OUTPUT_LIMIT = 50_000  # characters of an output copied into a tool_result event


def store_result(
    scope: StepScope,
    ref: CallRef,
    result: ToolResult,
    flags: dict[str, Any] | None = None,
    limit: int | None = TOOL_RESULT_LIMIT,
) -> Message:
    """The result as the model will read it (its message), and as clients see it (its event)."""
    run = scope.run
    whole = result.for_model(None)
    stored = stores().results.offload(scope.tenant_id, run.run_id, ref.id, whole)  # beyond what an item holds
    description = _description(scope, ref, result, whole, in_s3=stored is not None)
    if description is None and limit is not None and len(whole) > limit and result.ok:
        description = _long_text(scope, ref, whole, in_s3=stored is not None)
    content = description if description is not None else result.for_model(limit)
    message: Message = {"role": "tool", "tool_call_id": ref.id, "content": content}
    if result.files:  # images it returned: stored under the run, shown by stepwise.attachments.render
        files = [f.model_dump() for f in result.files]
        message[render.EXTENSION] = {"run_id": run.run_id, "attachments": files}
    stores().sessions.put_message(
        scope.tenant_id, run.session_id, run.run_id, scope.step, tool_slot(ref.index), message
    )
    payload: dict[str, Any] = {"tool_call_id": ref.id, "tool_name": ref.name}
    if result.error is not None:
        payload["error"] = result.error.model_dump()
    elif len(whole) > EVENT_OUTPUT_LIMIT:  # events are items too: 400 KB each
        payload["output"] = result.for_model(EVENT_OUTPUT_LIMIT)
    else:
        payload["output"] = result.output
    if stored is not None:
        payload["output_ref"] = stored
    if description is not None:
        payload["described"] = True  # the model read a description and can page with result_read
    payload.update(flags or {})
    events.emit(scope.tenant_id, run.run_id, "tool_result", payload)
    return message


def refuse(scope: StepScope, ref: CallRef, result: ToolResult) -> Refused:
    """The call will not run: its error result is stored now."""
    return Refused(ref, store_result(scope, ref, result), result.error.code if result.error else None)


def _long_text(scope: StepScope, ref: CallRef, whole: str, *, in_s3: bool) -> str | None:
    """What the model reads of a long result that is not a table (a log, a page): the start and a note,
    the whole kept for result_read to page in characters. None when it can be kept nowhere (then the
    model gets it cut at the tool's limit, as before). result_read's own pages are never paged again."""
    if ref.name == registry.RESULT_READ:
        return None
    run = scope.run
    kept = stores().described.save(scope.tenant_id, run.session_id, run.run_id, ref.id, whole, in_s3=in_s3)
    return tables.describe_text(whole, ref.id) if kept else None


def _description(
    scope: StepScope, ref: CallRef, result: ToolResult, whole: str, *, in_s3: bool
) -> str | None:
    """What the model reads instead of a large table (the whole kept for result_read), or None to
    send the result itself. result_read's own pages are never described again."""
    if not result.ok or ref.name == registry.RESULT_READ:
        return None
    text = tables.describe(whole, ref.id)
    if text is None:
        return None
    run = scope.run
    kept = stores().described.save(scope.tenant_id, run.session_id, run.run_id, ref.id, whole, in_s3=in_s3)
    return text if kept else None
