"""memory_save: remember something about the run's user for their later runs.

Scoped by tenant, agent and the run's `user_id`, all injected. Its effect is `idempotent` with the
content as key field, so the effects ledger saves one content once per trigger: a retried step, or a
replay of the run (which keeps its original's trigger), finds the memory already saved instead of saving
it twice. The content is a private key field: the ledger keys on it but records only its digest, so
forgetting a user leaves no copy of their memories in the ledger.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from stepwise.memory import service
from stepwise.memory.models import (
    CONTENT_LIMIT,
    MAX_PER_USER,
    TAG_LENGTH,
    TAG_LIMIT,
    EmbeddingFailed,
    MemoryFull,
)
from stepwise.tools.base import ToolResult
from stepwise.tools.builtin import Settings, ToolScope, input_schema
from stepwise.tools.builtin._memory import Config, owner

__all__ = ["Arguments", "Config", "run"]

NAME = "memory_save"
DESCRIPTION = (
    "Remember one fact about the user you are talking to (a preference, a detail of their situation, "
    "a decision) so you can recall it in later conversations with them; get {memory_id}. Write it so "
    "it reads on its own, e.g. 'Prefers answers in French'. Tags are optional keywords to file it under."
)


class Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str = Field(min_length=1, max_length=CONTENT_LIMIT, description="The fact.")
    tags: list[Annotated[str, StringConstraints(min_length=1, max_length=TAG_LENGTH)]] | None = Field(
        None, max_length=TAG_LIMIT, description="Keywords, e.g. ['language', 'billing']."
    )


INPUT_SCHEMA: dict[str, Any] = input_schema(Arguments)
READ_ONLY = False
EFFECT: Literal["idempotent"] = "idempotent"
KEY_FIELDS = ["content"]
PRIVATE_KEY_FIELDS = ["content"]


def run(arguments: Arguments, *, scope: ToolScope, settings: Settings, config: Config) -> ToolResult:
    whose = owner(scope)
    if isinstance(whose, ToolResult):
        return whose
    content = arguments.content.strip()
    if not content:
        return ToolResult.failure("invalid_arguments", "content: must not be blank")
    tags = list(dict.fromkeys(t.strip() for t in arguments.tags or [] if t.strip()))
    try:
        memory = service.save(
            whose,
            content,
            tags,
            source_run_id=scope.run_id,
            origin="tool" if scope.read_tool_results else "user",
            embed=service.embedder(),
        )
    except EmbeddingFailed as exc:
        return ToolResult.failure("embedding_unavailable", f"nothing was saved: {exc}")
    except MemoryFull:
        return ToolResult.failure(
            "memory_full",
            f"this user already has {MAX_PER_USER} memories, the most one user may hold; nothing was "
            "saved. Find outdated ones with memory_search and remove them with memory_delete first.",
        )
    return ToolResult(output={"memory_id": memory.memory_id, "saved": True})
