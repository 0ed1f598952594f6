"""Runs as the API takes and shows them, the record the store keeps, and the events of their log."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field, field_validator

from stepwise.agents.models import DEFAULT_MAX_STEPS, MAX_STEPS_LIMIT
from stepwise.attachments.models import MAX_ATTACHMENTS, Attachment, AttachmentIn
from stepwise.core.errors import Conflict
from stepwise.core.ids import SESSION_ID, USER_ID
from stepwise.core.schema import Strict, Timestamp
from stepwise.llm.models import ScriptTurn, Usage
from stepwise.sessions.models import Session
from stepwise.webhooks.models import RunTarget, WebhookConfig

RunStatus = Literal["queued", "running", "waiting", "succeeded", "failed", "cancelled", "timed_out"]
TERMINAL_STATUSES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled", "timed_out"})
ACTIVE_STATUSES: frozenset[str] = frozenset(get_args(RunStatus)) - TERMINAL_STATUSES
# What kind of thing started a run (RunView.trigger): "api" for a run whose trigger id carries none of
# the other kinds as its "<kind>:" prefix.
# The last four are tenants' triggers (stepwise.triggers), whose intent key is "<type>:<trigger id>/<key>".
Trigger = Literal[
    "api", "schedule", "event", "delegation", "what_if", "workflow", "webhook", "gmail", "outlook", "ses"
]
TRIGGER_TYPES = ("webhook", "gmail", "outlook", "ses")
PREFIXED_TRIGGERS: tuple[str, ...] = tuple(t for t in get_args(Trigger) if t != "api")

EventType = Literal[
    "run_started",
    "step_started",
    "chunk",
    "tool_call",
    "tool_result",
    "approval_requested",
    "approval_decided",
    "client_tool_requested",
    "client_tool_answered",
    "hook_blocked",
    "delegation_started",
    "delegation_completed",
    "provider_paused",
    "compaction",
    "step_completed",
    "run_completed",
    "run_failed",
    "run_cancelled",
    # An eval run's own log (keyed by its eval_run_id): started, each case's run ended, scored.
    "eval_run_started",
    "eval_case_completed",
    "eval_run_completed",
    "budget_reached",
    "budget_warning",
    "run_resumed",
    # A workflow run's nodes (stepwise.workflows): {node_id, iteration?, index?, run_id?, error?}.
    "node_started",
    "node_completed",
    "node_failed",
]

MESSAGE_LIMIT = 100_000  # characters; a message is stored in one DynamoDB item (400 KB)


METADATA_LIMIT = 16_384  # bytes of JSON: metadata rides on the run record


def _small_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    if len(json.dumps(metadata, default=str).encode()) > METADATA_LIMIT:
        raise ValueError(f"metadata is over {METADATA_LIMIT} bytes of JSON")
    return metadata


def _fits_an_item(message: str) -> str:
    if len(message.encode()) > 300_000:
        raise ValueError("message is over 300,000 bytes of UTF-8")
    return message


class RunCreate(Strict):
    message: str = Field(min_length=1, max_length=MESSAGE_LIMIT)
    session_id: str | None = Field(default=None, pattern=SESSION_ID)
    max_steps: int | None = Field(default=None, ge=1, le=MAX_STEPS_LIMIT)
    max_tokens_budget: int | None = Field(default=None, ge=1)
    metadata: dict[str, Any] = Field(default_factory=dict)
    script: list[ScriptTurn] | None = None
    multitask_strategy: Literal["enqueue", "reject", "interrupt"] = "enqueue"
    webhook: WebhookConfig | None = None  # else the agent's (the run keeps the one that applies)
    # The app's end user: narrows what the run may remember (never widens the tenant, which is the key's).
    user_id: str | None = Field(default=None, pattern=USER_ID)
    attachments: list[AttachmentIn] = Field(
        default_factory=list,
        max_length=MAX_ATTACHMENTS,
        description="Files for the model: `{upload_id}` from POST /v1/uploads, or "
        "`{name, content_type, data}` with the file in base64 (5 MiB of base64 in total)",
    )

    _message_fits = field_validator("message")(_fits_an_item)
    _metadata_small = field_validator("metadata")(_small_metadata)


class SyncRunCreate(Strict):
    message: str = Field(min_length=1, max_length=MESSAGE_LIMIT)
    _message_fits = field_validator("message")(_fits_an_item)
    _metadata_small = field_validator("metadata")(_small_metadata)
    session_id: str | None = Field(default=None, pattern=SESSION_ID)
    metadata: dict[str, Any] = Field(default_factory=dict)
    script: list[ScriptTurn] | None = None
    user_id: str | None = Field(default=None, pattern=USER_ID)


class RunExists(Conflict):
    """A run with this id was recorded before: a duplicate delivery of what started it."""


class AgentPaused(Conflict):
    """The agent is paused (PATCH paused: true): it starts no run until it is unpaused."""

    code = "agent_paused"


class RunError(BaseModel):
    code: str
    message: str


class Run(BaseModel):
    run_id: str
    agent_id: str
    session_id: str
    user_id: str | None = None
    status: RunStatus
    input: str
    output: str | None = None
    error: RunError | None = None
    steps: int = 0
    max_steps: int = DEFAULT_MAX_STEPS
    max_tokens_budget: int | None = None
    compaction_failures: int = 0
    usage: Usage = Field(default_factory=Usage)
    tools_executed: list[str] | None = None
    replay_of: str | None = None
    # What started the run (its own id for an API call, "schedule:<id>@<time>", "event:<id>"); a replay
    # keeps its original's, so effects keyed on it happen once across both.
    trigger_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    script: list[ScriptTurn] | None = None
    # Appended to the agent's system prompt for this run only (a protocol door's `instructions`).
    instructions: str | None = None
    webhook: WebhookConfig | None = None
    attachments: list[Attachment] = Field(default_factory=list)
    # When DELETE /v1/runs/{id}/attachments erased the run's files (the list goes with them).
    attachments_erased_at: Timestamp | None = None
    created_at: Timestamp
    finished_at: Timestamp | None = None
    # Delegation: a child run of an agent tool call knows its parent, the tree's root and its depth (the
    # root is 0); the parent knows its children and what they spent (`descendants_usage`).
    parent_run_id: str | None = None
    root_run_id: str | None = None
    depth: int = 0
    parent_interaction_id: str | None = None  # the parent's wait that this run's ending answers
    root_session_id: str | None = None  # where the tree's human waits are listed
    children: list[str] = Field(default_factory=list)
    descendants_usage: Usage = Field(default_factory=Usage)
    # The ancestors whose `max_tokens_budget` this run's spending counts against, as [{run_id,
    # max_tokens}]: a child checks their trees' spend before each model call (stepwise.usage).
    tree_budgets: list[dict[str, Any]] = Field(default_factory=list)
    # Client tools of this run alone, beside the agent's own (a protocol door's caller brings its own
    # tools: AG-UI's `tools`), as ClientTool specs that whoever starts the run validated (runs must not
    # import tools: the builtins import runs). The loop declares them and pauses on them exactly as on
    # the agent's client tools (stepwise.loop.step).
    client_tools: list[dict[str, Any]] = Field(default_factory=list)
    # What-if replay (stepwise.evals.whatif): the run it replays, its request (the overrides, `match`,
    # `live_reads` and the opt-ins, plus the original's session, where its record is), and what became
    # of each of its own tool calls: `served:<original call id>`, `live`, or `diverged:<code>`.
    what_if_of: str | None = None
    what_if: dict[str, Any] | None = None
    what_if_calls: dict[str, str] = Field(default_factory=dict)
    # A Step Functions task token the run's ending sends back with its outcome: an eval case's run
    # (stepwise.evals.runner), whose EvalRun execution waits on it as a parent waits on a child.
    callback_token: str | None = None

    @property
    def done(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def trigger(self) -> str:
        """What kind of thing started the run, from its trigger id."""
        kind, _, _ = (self.trigger_id or "").partition(":")
        if kind == "workflow-node":  # a workflow's node run (stepwise.workflows.running)
            return "workflow"
        return kind if kind in PREFIXED_TRIGGERS else "api"

    @property
    def kind(self) -> str:
        """`workflow` for a workflow run (trigger id `workflow:<workflow_id>@<version>`), else `agent`."""
        return "workflow" if (self.trigger_id or "").startswith("workflow:") else "agent"

    @property
    def workflow_ref(self) -> tuple[str, int]:
        """A workflow run's workflow id and version."""
        workflow_id, _, version = (self.trigger_id or "").removeprefix("workflow:").partition("@")
        return workflow_id, int(version or 0)

    @property
    def started_by(self) -> str | None:
        """The trigger resource that started the run (`trg_…`), for a run a trigger started; else None.
        Its intent key (`trigger_id`, "<type>:<trigger id>/<dedupe key>") names the delivery too."""
        kind, _, rest = (self.trigger_id or "").partition(":")
        return rest.partition("/")[0] if kind in TRIGGER_TYPES else None

    @property
    def total_usage(self) -> Usage:
        return self.usage + self.descendants_usage

    def what_if_counters(self) -> dict[str, int]:
        """`served`, `live_reads` and `divergences`: what became of a what-if run's tool calls."""
        outcomes = [o.partition(":")[0] for o in self.what_if_calls.values()]
        return {
            "served": outcomes.count("served"),
            "live_reads": outcomes.count("live"),
            "divergences": outcomes.count("diverged"),
        }

    def target(self) -> RunTarget:
        """What the run's webhook deliveries say about it."""
        return RunTarget(
            run_id=self.run_id,
            agent_id=self.agent_id,
            session_id=self.session_id,
            metadata=self.metadata,
            webhook=self.webhook,
        )

    def public(self) -> dict[str, Any]:
        """The run as the API shows it (the script and a door's instructions are input plumbing, not
        part of the record)."""
        shown = self.model_dump(
            mode="json",
            exclude={
                "script",
                "instructions",
                "parent_interaction_id",
                "root_session_id",
                "descendants_usage",
                "client_tools",
                "what_if",
                "what_if_calls",
                "callback_token",
            },
        )
        shown["root_run_id"] = self.root_run_id or self.run_id
        if self.what_if_of is not None:
            shown.update(self.what_if_counters())
            shown["what_if"] = {k: v for k, v in (self.what_if or {}).items() if k != "session_id"}
        if self.kind == "workflow":
            shown["workflow_id"], shown["workflow_version"] = self.workflow_ref
        if self.started_by is not None:
            shown["trigger_id"] = self.started_by  # the trigger resource; its delivery is in metadata
        return {
            **shown,
            "kind": self.kind,
            "trigger": self.trigger,
            "total_usage": self.total_usage.model_dump(mode="json"),
        }


class RunEvent(BaseModel):
    seq: int
    type: EventType
    data: dict[str, Any] = Field(default_factory=dict)
    at: Timestamp


class RunView(BaseModel):
    """A run as `GET /v1/runs/{run_id}` shows it."""

    run_id: str
    agent_id: str
    session_id: str
    user_id: str | None
    status: RunStatus
    input: str  # a workflow run's: its input as JSON text
    output: str | None
    error: RunError | None
    steps: int
    max_steps: int
    max_tokens_budget: int | None
    usage: Usage
    tools_executed: list[str] | None
    replay_of: str | None
    metadata: dict[str, Any]
    webhook: WebhookConfig | None = None
    attachments: list[Attachment]
    attachments_erased_at: Timestamp | None
    created_at: Timestamp
    finished_at: Timestamp | None
    trigger: Trigger
    kind: Literal["agent", "workflow"] = "agent"
    workflow_id: str | None = None  # a workflow run's workflow and the version it ran
    workflow_version: int | None = None
    # What started it: the trigger's id (`trg_…`) for a run a trigger started; otherwise the run's intent
    # (its own id for an API call, "schedule:<id>@<time>", ...).
    trigger_id: str | None = None
    parent_run_id: str | None
    root_run_id: str
    depth: int
    children: list[str]
    total_usage: Usage  # its own and every descendant's
    # A what-if run's (absent on others): the run it replays, its request, and its counters.
    what_if_of: str | None = None
    what_if: dict[str, Any] | None = None
    served: int | None = None
    live_reads: int | None = None
    divergences: int | None = None


class RunList(BaseModel):
    runs: list[RunView]
    next_token: str | None


class RunAccepted(BaseModel):
    run_id: str
    session_id: str
    status: RunStatus
    replay_of: str | None = None
    attachments: list[Attachment] = Field(default_factory=list)


class SyncRunResult(BaseModel):
    run_id: str
    session_id: str
    output: str | None


TERMINAL_EVENTS = frozenset({"run_completed", "run_failed", "run_cancelled", "eval_run_completed"})


@dataclass(frozen=True)
class Appended:
    events: list[RunEvent]
    followed: bool  # a follower had connected when these seqs were reserved
    push: dict[str, Any] | None = None  # the task's A2A push configs when these seqs were reserved


@dataclass(frozen=True)
class Head:
    last_seq: int  # the last sequence number handed out (its event may still be in flight)
    done: bool  # the last event handed out is terminal
    moved_at: Timestamp | None


class SessionView(Session):
    usage: Usage  # every run of the session, summed (cost null when any run's is unknown)
    runs: list[RunView]
    messages: list[dict[str, Any]]
    next_token: str | None = None  # the page of older runs, as GET /v1/runs pages them
