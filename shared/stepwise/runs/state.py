"""A run's state as its execution carries and keeps it: the Step Functions payloads of
agent_run.asl.json (small control data only: ids, counters, decisions), and the run's context, the one
small record every Step reads once and writes once (stepwise.store.run_context keeps it).

They sit with the run, not in loop/: the run's lifecycle reads them too (its ending takes the
context's counters, the reconciler describes a caught failure), and the loop's states import runs."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Discriminator, Field, Tag

from stepwise.agents.models import DEFAULT_MAX_STEPS
from stepwise.core.errors import RunStateError, step_error_code
from stepwise.llm.models import Usage
from stepwise.runs.models import RunError


class Wait(BaseModel):
    """One pause of a run (an approval, a client tool) as the state machine carries it: the Await
    state's task token goes onto the interaction; TimeoutSecondsPath reads `timeout_seconds`."""

    interaction_id: str
    tool_call_id: str
    # `budget` and `provider`: run-level waits (no tool call, `tool_call_id` empty): a budget reached
    # (stepwise.loop.parking) or a provider's circuit open (stepwise.usage.circuits).
    kind: Literal["approval", "client_tool", "delegation", "budget", "provider"]
    timeout_seconds: int

    @property
    def run_level(self) -> bool:
        """A pause of the whole run, with no tool call (a budget, a provider's circuit: loop.parking)."""
        return self.kind in RUN_LEVEL_WAITS


RUN_LEVEL_WAITS = frozenset({"budget", "provider"})

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
    # When the step share the run holds between two steps ends (epoch seconds; stepwise.runs.shares).
    share_until: int | None = None


class SyncAnswer(BaseModel):
    """`POST /v1/agents/{id}/run`: the API function invokes the Step function for one step without
    tools, answered in the response."""

    mode: Literal["sync"] = "sync"
    tenant_id: str
    run_id: str


class Weigh(BaseModel):
    """`GET /v1/agents/{id}/weight`: the API function asks the Step function to count an agent's first
    call, where litellm's tokenizer is."""

    mode: Literal["weigh"] = "weigh"
    tenant_id: str
    agent_id: str


class CircuitProbe(BaseModel):
    """The reconciler's sweep asks the Step function (where litellm is) to try a provider whose circuit
    is open, with one minimal call (stepwise.usage.circuits)."""

    mode: Literal["probe"] = "probe"
    probe: dict[str, Any]


def _mode(event: Any) -> str:
    mode = event.get("mode") if isinstance(event, dict) else getattr(event, "mode", None)
    return str(mode or "step")


# What the Step function is invoked with: a state of agent_run.asl.json (no `mode`), or one of the API
# function's synchronous requests.
StepEvent = Annotated[
    Annotated[RunState, Tag("step")]
    | Annotated[SyncAnswer, Tag("sync")]
    | Annotated[Weigh, Tag("weigh")]
    | Annotated[CircuitProbe, Tag("probe")],
    Discriminator(_mode),
]


class StepFailure(BaseModel):
    """What a Catch hands to the Failed state (`ResultPath: $.error`)."""

    Error: str = "States.Runtime"
    Cause: str | None = None


def describe_failure(failure: StepFailure) -> RunError:
    """Turn what Step Functions caught into the run's {code, message}.

    A Lambda error's Cause is the JSON of {errorType, errorMessage}; our step errors carry a `code`.
    """
    message = failure.Cause or failure.Error
    error_type = failure.Error
    try:
        cause = json.loads(failure.Cause or "")
        if isinstance(cause, dict):
            message = str(cause.get("errorMessage") or message)
            error_type = str(cause.get("errorType") or error_type)
    except ValueError:
        pass
    code = step_error_code(error_type)
    if code is None and error_type.startswith("States."):
        code = error_type.removeprefix("States.").lower()  # e.g. States.Timeout -> timeout
    return RunError(code=code or "internal_error", message=message[:2000])


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


class CallRef(BaseModel):
    """One tool call of the current step, as the cursor tracks it; its arguments stay in the stored
    assistant message."""

    id: str
    name: str
    index: int
    parallel_safe: bool = False


class RunContext(BaseModel):
    version: int = 0
    prepared: bool = False
    ended: bool = False
    steps: int = 0
    usage: Usage = Field(default_factory=Usage)
    tools_executed: list[str] = Field(default_factory=list)
    compaction_failures: int = 0
    # The last compaction, applied again to every later call of the run (stepwise.loop.compaction.fit).
    compacted: Compacted | None = None
    # (tool, canonical arguments) digests of the latest calls, oldest first: the doom-loop check.
    recent_calls: list[str] = Field(default_factory=list)
    # The cursor: the current step's calls, the first one without a result, those started whose result
    # may not be recorded (a retried Step checks them), and the pauses it waits on.
    calls: list[CallRef] = Field(default_factory=list)
    next_call: int = 0
    inflight: list[int] = Field(default_factory=list)
    waits: list[Wait] = Field(default_factory=list)
    # The prompt size the provider reported for the last call: with the messages added since, the
    # estimate of the next call's input without re-counting the history.
    prompt_tokens: int = 0
    counted_messages: int = 0
    # Delegation: the child runs this run started, and what they spent once they ended.
    children: list[str] = Field(default_factory=list)
    descendants_usage: Usage = Field(default_factory=Usage)
    # A what-if run's: what became of each of its calls (stepwise.loop.whatif), by call id.
    what_if_calls: dict[str, str] = Field(default_factory=dict)
    # Usage lines not yet counted, as plain dicts (stepwise.usage.counters reads them): the next
    # context write counts them in its own transaction and clears them. Never stored.
    unbilled: list[dict[str, Any]] = Field(default_factory=list)
    # What the model calls made since the last write spent: paid whether or not that write succeeds
    # (a run cancelled mid-call still counts it, stepwise.runs.late). Never stored.
    unsaved_usage: Usage = Field(default_factory=Usage)
    # How many run-level pauses (loop.parking) the run has taken: each one's interaction id is new.
    parks: int = 0

    @property
    def pending_calls(self) -> list[CallRef]:
        return self.calls[self.next_call :]


# What a context write leaves out of the stored body: its key and fence, and what rides on it only
# until the write (the lines it counts, the spend it carries).
TRANSIENT = frozenset({"version", "ended", "unbilled", "unsaved_usage"})


class ContextMovedOn(RunStateError):
    """A context write found the run ended or another Step's version. It carries the context it could
    not write: what that context spent (`unsaved_usage`, `unbilled`) was paid all the same."""

    def __init__(self, message: str, context: RunContext) -> None:
        super().__init__(message)
        self.context = context

    @property
    def spent(self) -> bool:
        return bool(self.context.unbilled) or self.context.unsaved_usage != Usage()
