"""Sessions: the conversation a series of runs shares, and the queue of runs waiting for it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from stepwise.llm.models import Usage
from stepwise.runs.models import RunView


class Session(BaseModel):
    session_id: str
    agent_id: str
    user_id: str | None = None  # set by the session's first run; every later run is that user's
    created_at: datetime
    # Runs whose messages make up the history the model sees, in order.
    completed_runs: list[str] = Field(default_factory=list)
    active_run_id: str | None = None
    queue: list[str] = Field(default_factory=list)


class SessionView(Session):
    usage: Usage  # every run of the session, summed (cost null when any run's is unknown)
    runs: list[RunView]
    messages: list[dict[str, Any]]
