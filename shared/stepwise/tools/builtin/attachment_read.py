"""attachment_read: more of a run's file than the model was shown. Declared for a run whose
conversation holds attachments, whether or not the agent lists it.

The file is looked up in the run's own attachments, then in those of the session's earlier runs (the
model sees their ids in its notes), newest first: the scope is injected, so nothing outside the
tenant's session can be named. A CSV is read in rows, anything else as text in characters; an image
has no text to read.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from stepwise.attachments import content
from stepwise.attachments.models import ATTACHMENT_ID, Attachment
from stepwise.tools.base import TOOL_RESULT_LIMIT, ToolResult
from stepwise.tools.builtin import Settings, ToolScope, input_schema

NAME = "attachment_read"
DEFAULT_ROWS, MAX_ROWS = 100, 1000
DEFAULT_CHARS, MAX_CHARS = 20_000, TOOL_RESULT_LIMIT - 1_000
EARLIER_RUNS = 50  # of the session's runs looked through, newest first

DESCRIPTION = (
    "Read a file attached to this conversation, by its attachment_id (shown with the file). For a CSV, "
    "`offset` and `limit` count data rows (default 100, at most 1000) and the answer is {columns, rows, "
    "offset, next_offset, row_count}; for other files (PDF text, JSON, text) they count characters "
    f"(default {DEFAULT_CHARS}) and the answer is {{text, offset, next_offset, total_chars}}. "
    "next_offset is null at the end."
)


class Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attachment_id: str = Field(pattern=ATTACHMENT_ID)
    offset: int = Field(0, ge=0)
    # Rows of a CSV (at most MAX_ROWS, default DEFAULT_ROWS), else characters (default DEFAULT_CHARS).
    limit: int | None = Field(None, ge=1, le=MAX_CHARS)


INPUT_SCHEMA: dict[str, Any] = input_schema(Arguments)
READ_ONLY = True
EFFECT: Literal["none"] = "none"
KEY_FIELDS: list[str] = []


class Config(BaseModel):
    """No configuration: a run may read its own files."""

    model_config = ConfigDict(extra="forbid")


def _find(scope: ToolScope, attachment_id: str) -> tuple[str, Attachment] | None:
    from stepwise.core.errors import NotFound
    from stepwise.runs.ports import stores

    store = stores()
    candidates = [scope.run_id]
    try:
        earlier = store.sessions.get(scope.tenant_id, scope.session_id).completed_runs
    except NotFound:
        earlier = []
    candidates += [r for r in reversed(earlier[-EARLIER_RUNS:]) if r != scope.run_id]
    for run_id in candidates:
        try:
            run = store.runs.get(scope.tenant_id, run_id)
        except NotFound:
            continue
        found = next((a for a in run.attachments if a.attachment_id == attachment_id), None)
        if found is not None:
            return run_id, found
    return None


def run(arguments: Arguments, *, scope: ToolScope, settings: Settings, config: Config) -> ToolResult:
    attachment_id = arguments.attachment_id
    found = _find(scope, attachment_id)
    if found is None:
        return ToolResult.failure("not_found", f"no attachment {attachment_id} in this conversation")
    run_id, attachment = found
    if content.is_image(attachment):
        return ToolResult.failure("not_text", f"{attachment.name} is an image: it has no text to read")
    try:
        # An earlier run's file is read from S3 each time: it may have been erased since.
        body = content.text(scope.tenant_id, run_id, attachment, cache=run_id == scope.run_id)
    except content.Missing:
        gone = f"{attachment.name} is no longer stored (deleted or past retention)"
        return ToolResult.failure("gone", gone)
    offset = arguments.offset
    if attachment.content_type == "text/csv":
        limit = min(arguments.limit or DEFAULT_ROWS, MAX_ROWS)
        columns, rows = content.csv_rows(body)
        end = min(offset + limit, len(rows))
        return ToolResult(
            output={
                "attachment_id": attachment_id,
                "columns": columns,
                "rows": rows[offset:end],
                "offset": offset,
                "next_offset": end if end < len(rows) else None,
                "row_count": len(rows),
            }
        )
    limit = arguments.limit or DEFAULT_CHARS
    end = min(offset + limit, len(body))
    return ToolResult(
        output={
            "attachment_id": attachment_id,
            "text": body[offset:end],
            "offset": offset,
            "next_offset": end if end < len(body) else None,
            "total_chars": len(body),
        }
    )
