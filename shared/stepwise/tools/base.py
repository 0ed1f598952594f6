"""What every tool execution returns: a result the model can read, never an exception."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

TOOL_RESULT_LIMIT = 50_000  # characters of a tool result the model sees


class ToolError(BaseModel):
    code: str
    message: str


class ToolResult(BaseModel):
    """The outcome of one tool call: `output` on success, `error` otherwise."""

    output: Any = None
    error: ToolError | None = None

    @classmethod
    def failure(cls, code: str, message: str) -> ToolResult:
        return cls(error=ToolError(code=code, message=message))

    @property
    def ok(self) -> bool:
        return self.error is None

    def for_model(self) -> str:
        """The text that goes back to the model as the tool message's content."""
        if self.error is not None:
            return json.dumps({"error": self.error.model_dump()}, ensure_ascii=False)
        if isinstance(self.output, str):
            return self.output
        return json.dumps(self.output, ensure_ascii=False, sort_keys=True)
