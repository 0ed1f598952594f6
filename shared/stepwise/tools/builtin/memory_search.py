"""memory_search: the memories of the run's user most relevant to a query, best first.

Lexical (BM25) by default; hybrid (BM25 fused with embedding similarity) when STEPWISE_EMBEDDING_MODEL
is set. Only the run's user's memories are ever searched: the owner comes from the injected scope.
"""

from __future__ import annotations

from typing import Any, Literal

from stepwise.agents.models import MEMORY_TOP_K_LIMIT
from stepwise.memory import service
from stepwise.tools.base import ToolResult
from stepwise.tools.builtin import Settings, ToolScope
from stepwise.tools.builtin._memory import Config, owner, shown_hit
from stepwise.tools.builtin._provider import invalid_arguments

__all__ = ["Config", "run"]

NAME = "memory_search"
DEFAULT_TOP_K = 5
DESCRIPTION = (
    "Search what you remember about the user you are talking to, from earlier conversations with "
    "them, and get {memories: [{memory_id, content, tags, created_at, score}]}, most relevant first."
)
INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": 2_000, "description": "What to look for."},
        "top_k": {"type": "integer", "minimum": 1, "maximum": MEMORY_TOP_K_LIMIT, "default": DEFAULT_TOP_K},
    },
    "required": ["query"],
    "additionalProperties": False,
}
READ_ONLY = True
EFFECT: Literal["none"] = "none"
KEY_FIELDS: list[str] = []


def run(arguments: dict[str, Any], *, scope: ToolScope, settings: Settings, config: Config) -> ToolResult:
    failure = invalid_arguments(INPUT_SCHEMA, arguments)
    if failure is not None:
        return failure
    whose = owner(scope)
    if isinstance(whose, ToolResult):
        return whose
    top_k = int(arguments.get("top_k") or DEFAULT_TOP_K)
    hits = service.search(whose, arguments["query"], top_k, embed=service.embedder())
    return ToolResult(output={"memories": [shown_hit(h) for h in hits]})
