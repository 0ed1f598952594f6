"""memory_search: the memories of the run's user most relevant to a query, best first.

Lexical (BM25) by default; hybrid (BM25 fused with embedding similarity) when STEPWISE_EMBEDDING_MODEL
is set. Only the run's user's memories are ever searched: the owner comes from the injected scope.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from stepwise.memory import service
from stepwise.memory.models import MEMORY_TOP_K_LIMIT
from stepwise.tools.base import ToolResult
from stepwise.tools.builtin import Settings, ToolScope, input_schema
from stepwise.tools.builtin._memory import Config, owner, shown_hit

__all__ = ["Arguments", "Config", "run"]

NAME = "memory_search"
DEFAULT_TOP_K = 5
DESCRIPTION = (
    "Search what you remember about the user you are talking to, from earlier conversations with "
    "them, and get {memories: [{memory_id, content, tags, created_at, score}]}, most relevant first."
)


class Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=2_000, description="What to look for.")
    top_k: int = Field(DEFAULT_TOP_K, ge=1, le=MEMORY_TOP_K_LIMIT)


INPUT_SCHEMA: dict[str, Any] = input_schema(Arguments)
READ_ONLY = True
EFFECT: Literal["none"] = "none"
KEY_FIELDS: list[str] = []


def run(arguments: Arguments, *, scope: ToolScope, settings: Settings, config: Config) -> ToolResult:
    whose = owner(scope)
    if isinstance(whose, ToolResult):
        return whose
    hits = service.search(whose, arguments.query, arguments.top_k, embed=service.embedder())
    return ToolResult(output={"memories": [shown_hit(h) for h in hits]})
