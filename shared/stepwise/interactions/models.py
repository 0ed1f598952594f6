"""An interaction as the API, the loop and the store share it."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel

from stepwise.core.schema import Timestamp


class NewInteraction(BaseModel):
    """A pause as the loop asks for it: everything the store keeps but its status, token, answer and
    times. `digest` binds an approval to its tenant, tool and exact arguments (`digest()`)."""

    interaction_id: str
    run_id: str
    session_id: str
    listed_session_id: str | None = None  # a delegated run's waits are listed in its root's session
    agent_id: str
    kind: Literal["approval", "client_tool", "delegation", "budget", "provider"]
    step: int
    tool_call_id: str
    tool_call_index: int
    tool_name: str
    arguments: dict[str, Any]
    digest: str
    timeout_seconds: int
    channels: list[dict[str, Any]] | None = None


class Interaction(BaseModel):
    interaction_id: str
    run_id: str
    session_id: str
    agent_id: str
    kind: str
    status: str
    step: int
    tool_call_id: str
    tool_call_index: int
    tool_name: str
    arguments: dict[str, Any]
    digest: str
    timeout_seconds: int
    channels: list[dict[str, Any]] | None = None
    has_token: bool = False
    answer: dict[str, Any] | None = None
    answer_key: str | None = None
    answered_by: str | None = None
    answered_at: Timestamp | None = None
    delivered: bool = False
    created_at: Timestamp
    deadline: Timestamp

    def public(self) -> dict[str, Any]:
        """As `GET /v1/sessions/{id}/interactions` shows it: never the token, never the digest."""
        return self.model_dump(
            mode="json",
            include={
                "interaction_id",
                "run_id",
                "kind",
                "status",
                "tool_call_id",
                "tool_name",
                "arguments",
                "created_at",
            },
        )


def digest(tenant_id: str, tool_name: str, arguments: dict[str, Any]) -> str:
    """What an approval is bound to: this tenant, this tool, exactly these arguments."""
    canonical = json.dumps([tenant_id, tool_name, arguments], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
