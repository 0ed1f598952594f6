"""Sessions: the conversation a series of runs shares, and the queue of runs waiting for it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from stepwise.core.schema import Timestamp


class Session(BaseModel):
    session_id: str
    agent_id: str
    user_id: str | None = None  # set by the session's first run; every later run is that user's
    created_at: Timestamp
    # Runs whose messages make up the history the model sees, in order.
    completed_runs: list[str] = Field(default_factory=list)
    active_run_id: str | None = None
    queue: list[str] = Field(default_factory=list)


USER_SLOT = "0"


ASSISTANT_SLOT = "1"


def tool_slot(index: int) -> str:
    return f"2#{index:03d}"  # after the assistant message that asked, in the model's order


@dataclass
class Earlier:
    """The history of a session's completed runs as a run found it, with when each message's
    retention ends (epoch seconds): a checkpoint carries messages on, never past their own expiry."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    expiries: list[int] = field(default_factory=list)

    def __add__(self, other: Earlier) -> Earlier:
        return Earlier([*self.messages, *other.messages], [*self.expiries, *other.expiries])

    def live(self, now: int) -> Earlier:
        kept = [(m, x) for m, x in zip(self.messages, self.expiries, strict=True) if x > now]
        return Earlier([m for m, _ in kept], [x for _, x in kept])
