"""What every tool execution returns: a result the model can read, never an exception."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

from stepwise.attachments.models import Attachment

TOOL_RESULT_LIMIT = 50_000  # characters of a tool result the model sees


class ToolError(BaseModel):
    code: str
    message: str


class ToolResult(BaseModel):
    """The outcome of one tool call: `output` on success, `error` otherwise."""

    output: Any = None
    error: ToolError | None = None
    # Files the tool returned (an MCP tool's images), stored under the run; the model is shown them
    # as it is shown a run's attachments.
    files: list[Attachment] = Field(default_factory=list)

    @classmethod
    def failure(cls, code: str, message: str) -> ToolResult:
        return cls(error=ToolError(code=code, message=message))

    @property
    def ok(self) -> bool:
        return self.error is None

    def for_model(self, limit: int | None = TOOL_RESULT_LIMIT) -> str:
        """The text that goes back to the model as the tool message's content, cut at `limit`
        characters with a marker the model can see (None: never cut)."""
        if self.error is not None:
            text = json.dumps({"error": self.error.model_dump()}, ensure_ascii=False)
        elif isinstance(self.output, str):
            text = self.output
        else:
            text = json.dumps(self.output, ensure_ascii=False, sort_keys=True)
        if limit is None or len(text) <= limit:
            return text
        return text[:limit] + f"\n…[truncated: {len(text) - limit} of {len(text)} characters omitted]"
