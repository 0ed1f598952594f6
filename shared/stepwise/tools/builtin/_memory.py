"""What the memory builtins share: whose memories a call reaches, from the injected scope alone."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from stepwise.memory.models import Hit, Memory, Owner
from stepwise.tools.base import ToolResult
from stepwise.tools.builtin import ToolScope


class Config(BaseModel):
    """The memory tools take no configuration of their own: the agent's `memory` setting is theirs."""

    model_config = ConfigDict(extra="forbid")


def owner(scope: ToolScope) -> Owner | ToolResult:
    """The run's user, or the failure for a run without one (its tools never declare memory, so only a
    model calling an undeclared tool gets here)."""
    if scope.user_id is None:
        return ToolResult.failure(
            "memory_unavailable", "this run has no user_id, so there is no user whose memories to use"
        )
    return Owner(tenant_id=scope.tenant_id, agent_id=scope.agent_id, user_id=scope.user_id)


def shown(memory: Memory) -> dict[str, Any]:
    return {
        "memory_id": memory.memory_id,
        "content": memory.content,
        "tags": memory.tags,
        "created_at": memory.created_at.isoformat(timespec="seconds"),
    }


def shown_hit(hit: Hit) -> dict[str, Any]:
    return {**shown(hit.memory), "score": hit.score}
