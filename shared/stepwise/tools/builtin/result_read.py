"""result_read: page through a tool result that reached the model as a description (a large table; see
stepwise.tools.tables). Every agent with tools gets it, declared from the first call (stepwise.loop.prompt
says why): the agent asked for the table, so reading the rest of it needs no registration. It reads
only results of the run's own session (the scope is injected, the model names only the call).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from stepwise.runs.ports import stores
from stepwise.tools import tables
from stepwise.tools.base import ToolResult
from stepwise.tools.builtin import Settings, ToolScope, input_schema

NAME = tables.RESULT_READ
# Short on purpose: every agent with tools declares it on every call (stepwise.loop.prompt), and the
# description it reads names the tool_call_id and how to page.
DESCRIPTION = (
    "Read rows or text characters of a tool result that was described instead of shown in full; "
    "next_offset is null at the end."
)


class Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool_call_id: str = Field(min_length=1, max_length=256, description="As given in the description.")
    offset: int | None = Field(None, ge=0, description="First row or character (0-based), default 0.")
    limit: int | None = Field(
        None,
        ge=1,
        le=tables.PAGE_CHARS,
        description=f"Rows (max {tables.MAX_PAGE}) or characters (max {tables.PAGE_CHARS}).",
    )


INPUT_SCHEMA: dict[str, Any] = input_schema(Arguments)
READ_ONLY = True
EFFECT: Literal["none"] = "none"
KEY_FIELDS: list[str] = []


class Config(BaseModel):
    """result_read takes no configuration."""

    model_config = ConfigDict(extra="forbid")


def run(arguments: Arguments, *, scope: ToolScope, settings: Settings, config: Config) -> ToolResult:
    tool_call_id = arguments.tool_call_id
    text = stores().described.load(scope.tenant_id, scope.session_id, tool_call_id)
    if text is None:
        return ToolResult.failure(
            "result_not_found", f"no described result with tool_call_id {tool_call_id!r} in this session"
        )
    offset = arguments.offset or 0
    answer = tables.page(text, tool_call_id, offset, arguments.limit or tables.DEFAULT_PAGE)
    if answer is None:  # long text, not a table: paged in characters
        if offset and offset >= len(text):
            return ToolResult.failure(
                "offset_out_of_range", f"offset {offset}: the result has {len(text):,} characters"
            )
        return ToolResult(
            output=tables.page_text(text, tool_call_id, offset, arguments.limit or tables.TEXT_PAGE_DEFAULT)
        )
    if offset and offset >= answer["total_rows"]:
        return ToolResult.failure(
            "offset_out_of_range", f"offset {offset}: the result has {answer['total_rows']} rows"
        )
    return ToolResult(output=answer)
