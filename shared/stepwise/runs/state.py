"""The Step Functions payloads of agent_run.asl.json: small control data only (ids, counters, decisions)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from stepwise.agents.models import DEFAULT_MAX_STEPS


class Wait(BaseModel):
    """One pause of a run (an approval, a client tool) as the state machine carries it: the Await
    state's task token goes onto the interaction; TimeoutSecondsPath reads `timeout_seconds`."""

    interaction_id: str
    tool_call_id: str
    kind: Literal["approval", "client_tool", "delegation"]
    timeout_seconds: int


StepAction = Literal["start", "continue", "wait", "waits", "done"]


class RunState(BaseModel):
    """The state that flows between the states of agent_run.asl.json: Step returns it and Route
    chooses on `action` (`wait`: one pause → Await; `waits`: several of one parallel batch → AwaitAll)."""

    tenant_id: str
    run_id: str
    step: int = 0
    max_steps: int = DEFAULT_MAX_STEPS
    action: StepAction = "start"
    wait: Wait | None = None
    waits: list[Wait] = Field(default_factory=list)


class StepFailure(BaseModel):
    """What a Catch hands to the Failed state (`ResultPath: $.error`)."""

    Error: str = "States.Runtime"
    Cause: str | None = None


class FailedState(RunState):
    error: StepFailure = Field(default_factory=StepFailure)


class Compacted(BaseModel):
    """How far the run's last compaction reached, so the next calls send the same compacted prefix
    (stepwise.loop.compaction.fit) instead of compacting a little further each call: a provider caches a
    prefix only while it stays byte for byte the same. Indices are into the whole conversation as
    sent (system prompt included), which only grows within a run."""

    through: int  # the messages before this index are compacted; from here on they are sent as stored
    summary: str | None = (
        None  # replaces messages[1 or 0:through] when set; else their tool results are placeholders
    )
