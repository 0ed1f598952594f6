"""memory_delete: forget one memory of the run's user (one of another user's is `memory_not_found`,
exactly like one that does not exist). Through the ledger, keyed on the memory id."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from stepwise.core.ids import MEMORY_ID
from stepwise.memory import service
from stepwise.memory.models import MemoryNotFound
from stepwise.tools.base import ToolResult
from stepwise.tools.builtin import Settings, ToolScope, input_schema
from stepwise.tools.builtin._memory import Config, owner

__all__ = ["Arguments", "Config", "run"]

NAME = "memory_delete"
DESCRIPTION = (
    "Forget one thing you remembered about the user (it is outdated, wrong, or they asked you to), by "
    "the memory_id that memory_search or your recalled memories show; get {memory_id, deleted: true}."
)


class Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    memory_id: str = Field(pattern=MEMORY_ID, description="mem_…")


INPUT_SCHEMA: dict[str, Any] = input_schema(Arguments)
READ_ONLY = False
EFFECT: Literal["idempotent"] = "idempotent"
KEY_FIELDS = ["memory_id"]


def run(arguments: Arguments, *, scope: ToolScope, settings: Settings, config: Config) -> ToolResult:
    whose = owner(scope)
    if isinstance(whose, ToolResult):
        return whose
    try:
        service.delete(whose, arguments.memory_id)
    except MemoryNotFound:
        return ToolResult.failure("memory_not_found", f"this user has no memory {arguments.memory_id}")
    return ToolResult(output={"memory_id": arguments.memory_id, "deleted": True})
