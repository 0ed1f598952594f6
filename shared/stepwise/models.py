"""The pydantic models at Stepwise's edges: API bodies, stored documents and step payloads.

One name per concept: the same field names travel through the API, the tables, the ASL and the code.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

DEFAULT_MAX_STEPS = 25
MAX_STEPS_LIMIT = 200
TOOL_NAME = r"^[a-zA-Z0-9_-]{1,64}$"  # what every major model provider accepts as a function name

RunStatus = Literal["queued", "running", "waiting", "succeeded", "failed", "cancelled", "timed_out"]
TERMINAL_STATUSES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled", "timed_out"})
ACTIVE_STATUSES: frozenset[str] = frozenset(get_args(RunStatus)) - TERMINAL_STATUSES
Permission = Literal["allow", "ask", "deny", "inherit"]
Effect = Literal["none", "idempotent", "undeclared"]

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
    "compaction",
    "step_completed",
    "run_completed",
    "run_failed",
    "run_cancelled",
]


def utcnow() -> datetime:
    return datetime.now(UTC)


class Strict(BaseModel):
    """Request bodies reject unknown fields, so a typo is a 422 rather than a silently ignored setting."""

    model_config = ConfigDict(extra="forbid")


# --- Scripts (the `scripted` model) --------------------------------------------------------------


class ScriptedToolCall(Strict):
    name: str = Field(pattern=TOOL_NAME)
    arguments: dict[str, Any] = Field(default_factory=dict)


class ScriptTurn(Strict):
    """One model step of a script: either text or tool calls."""

    text: str | None = None
    tool_calls: list[ScriptedToolCall] | None = None

    @model_validator(mode="after")
    def _one_of(self) -> ScriptTurn:
        if (self.text is None) == (self.tool_calls is None):
            raise ValueError("a script turn has exactly one of 'text' or 'tool_calls'")
        return self


# --- Tools --------------------------------------------------------------------------------------


def valid_input_schema(value: dict[str, Any]) -> dict[str, Any]:
    """A tool's input schema must be a valid JSON Schema for an object."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(value)
    except SchemaError as exc:
        raise ValueError(f"input_schema is not a valid JSON Schema: {exc.message}") from exc
    if value.get("type", "object") != "object":
        raise ValueError("input_schema must describe an object (type: object)")
    return value


class ToolBase(Strict):
    name: str = Field(pattern=TOOL_NAME)
    permission: Permission = "inherit"


class HttpTool(ToolBase):
    """A custom HTTP tool: the model's arguments are POSTed as JSON to `endpoint`."""

    type: Literal["http"]
    description: str = Field(min_length=1, max_length=4096)
    input_schema: dict[str, Any]
    endpoint: str = Field(min_length=1, max_length=2048)
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    headers: dict[str, str] = Field(default_factory=dict)
    read_only: bool = False
    effect: Effect = "undeclared"
    key_fields: list[str] = Field(default_factory=list)

    @field_validator("endpoint")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not re.match(r"^https?://", value, re.IGNORECASE):
            raise ValueError("endpoint must be an http:// or https:// URL")
        return value

    _schema = field_validator("input_schema")(lambda v: valid_input_schema(v))

    @model_validator(mode="after")
    def _key_fields_need_idempotent(self) -> HttpTool:
        if self.key_fields and self.effect != "idempotent":
            raise ValueError("key_fields only apply to tools with effect 'idempotent'")
        return self

    @property
    def parallel_safe(self) -> bool:
        return self.read_only


class ClientTool(ToolBase):
    """A tool the calling app runs itself: the run pauses until the app answers with its result."""

    type: Literal["client"]
    description: str = Field(min_length=1, max_length=4096)
    input_schema: dict[str, Any]
    read_only: bool = False

    _schema = field_validator("input_schema")(lambda v: valid_input_schema(v))

    @property
    def parallel_safe(self) -> bool:
        return self.read_only


class BuiltinTool(ToolBase):
    """A builtin (`{name, config?, permission?}`): its description, schema and behaviour are Stepwise's;
    `config` is the tool's own per-agent settings, validated at creation."""

    type: Literal["builtin"] = "builtin"
    config: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known_and_configured(self) -> BuiltinTool:
        from stepwise.tools.builtin.catalog import load

        module = load(self.name)  # an unknown name is a ValueError listing the builtins
        self.config = module.Config.model_validate(self.config).model_dump(mode="json")
        return self

    @property
    def read_only(self) -> bool:
        from stepwise.tools.builtin.catalog import load

        return bool(load(self.name).READ_ONLY)

    @property
    def effect(self) -> Effect:
        from stepwise.tools.builtin.catalog import load

        effect: Effect = load(self.name).EFFECT
        return effect

    @property
    def key_fields(self) -> list[str]:
        from stepwise.tools.builtin.catalog import load

        return list(getattr(load(self.name), "KEY_FIELDS", []))

    @property
    def parallel_safe(self) -> bool:
        return self.read_only


def _tool_type(value: Any) -> str:
    """A tool body without `type` is a builtin, as the contract writes it: `{name, config?}`."""
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return str(kind or "builtin")


# MCP tools are not listed here: they are discovered from the agent's MCP servers.
Tool = Annotated[
    Annotated[HttpTool, Tag("http")]
    | Annotated[ClientTool, Tag("client")]
    | Annotated[BuiltinTool, Tag("builtin")],
    Discriminator(_tool_type),
]


# --- Agents -------------------------------------------------------------------------------------


class Permissions(Strict):
    default: Literal["allow", "ask", "deny", "allow_reads"] = "allow"


class AgentFields(Strict):
    model: str | None = Field(default=None, min_length=1, max_length=256)
    system_prompt: str | None = Field(default=None, max_length=100_000)
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_steps: int | None = Field(default=None, ge=1, le=MAX_STEPS_LIMIT)
    max_tokens_budget: int | None = Field(default=None, ge=1)
    permissions: Permissions = Field(default_factory=Permissions)
    script: list[ScriptTurn] | None = None


class AgentCreate(AgentFields):
    name: str = Field(min_length=1, max_length=128)
    tools: list[Tool] = Field(default_factory=list)

    @field_validator("tools")
    @classmethod
    def _unique_names(cls, tools: list[Tool]) -> list[Tool]:
        names = [t.name for t in tools]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"tool names must be unique: {', '.join(duplicates)}")
        return tools


class AgentPatch(Strict):
    """Fields to change; `null` clears an optional field, an absent field is left alone."""

    name: str | None = Field(default=None, min_length=1, max_length=128)
    model: str | None = Field(default=None, min_length=1, max_length=256)
    system_prompt: str | None = Field(default=None, max_length=100_000)
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_steps: int | None = Field(default=None, ge=1, le=MAX_STEPS_LIMIT)
    max_tokens_budget: int | None = Field(default=None, ge=1)
    permissions: Permissions | None = None
    script: list[ScriptTurn] | None = None

    @field_validator("name")
    @classmethod
    def _name_not_null(cls, value: str | None) -> str:
        if value is None:
            raise ValueError("name cannot be cleared")
        return value


class Agent(AgentCreate):
    model_config = ConfigDict(extra="ignore")

    agent_id: str
    created_at: datetime
    updated_at: datetime
    # Lifecycle hooks, kept in the agent's item so a run reads its agent and hooks in one read; managed
    # through /v1/agents/{id}/hooks and parsed by stepwise.hooks (which imports this module).
    hooks: list[dict[str, Any]] = Field(default_factory=list)
    # MCP servers with their cached tools, likewise in the agent's item; managed through
    # /v1/agents/{id}/mcp-servers and parsed by stepwise.mcp (which imports this module).
    mcp_servers: list[dict[str, Any]] = Field(default_factory=list)

    def tool(self, name: str) -> HttpTool | ClientTool | BuiltinTool | None:
        return next((t for t in self.tools if t.name == name), None)


# --- Runs ---------------------------------------------------------------------------------------


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
    session_id: str | None = Field(default=None, min_length=1, max_length=64)
    max_steps: int | None = Field(default=None, ge=1, le=MAX_STEPS_LIMIT)
    max_tokens_budget: int | None = Field(default=None, ge=1)
    metadata: dict[str, Any] = Field(default_factory=dict)
    script: list[ScriptTurn] | None = None
    multitask_strategy: Literal["enqueue", "reject", "interrupt"] = "enqueue"

    _message_fits = field_validator("message")(_fits_an_item)
    _metadata_small = field_validator("metadata")(_small_metadata)


class SyncRunCreate(Strict):
    message: str = Field(min_length=1, max_length=MESSAGE_LIMIT)
    _message_fits = field_validator("message")(_fits_an_item)
    _metadata_small = field_validator("metadata")(_small_metadata)
    session_id: str | None = Field(default=None, min_length=1, max_length=64)
    metadata: dict[str, Any] = Field(default_factory=dict)
    script: list[ScriptTurn] | None = None


class Usage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
        )


class RunError(BaseModel):
    code: str
    message: str


class Run(BaseModel):
    run_id: str
    agent_id: str
    session_id: str
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
    created_at: datetime
    finished_at: datetime | None = None

    @property
    def done(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def public(self) -> dict[str, Any]:
        """The run as the API shows it (the script is input plumbing, not part of the record)."""
        return self.model_dump(mode="json", exclude={"script"})


class RunEvent(BaseModel):
    seq: int
    type: EventType
    data: dict[str, Any] = Field(default_factory=dict)
    at: datetime


# --- Sessions -----------------------------------------------------------------------------------


class Session(BaseModel):
    session_id: str
    agent_id: str
    created_at: datetime
    # Runs whose messages make up the history the model sees, in order.
    completed_runs: list[str] = Field(default_factory=list)
    active_run_id: str | None = None
    queue: list[str] = Field(default_factory=list)


# --- Step Functions payloads (small control data only: ids, counters, decisions) ------------------


class Wait(BaseModel):
    """One pause of a run (an approval, a client tool) as the state machine carries it: the Await
    state's task token goes onto the interaction; TimeoutSecondsPath reads `timeout_seconds`."""

    interaction_id: str
    tool_call_id: str
    kind: Literal["approval", "client_tool"]
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


# --- API responses (documented in the OpenAPI spec) --------------------------------------------------


class RunView(BaseModel):
    """A run as `GET /v1/runs/{run_id}` shows it."""

    run_id: str
    agent_id: str
    session_id: str
    status: RunStatus
    input: str
    output: str | None
    error: RunError | None
    steps: int
    max_steps: int
    max_tokens_budget: int | None
    usage: Usage
    tools_executed: list[str] | None
    replay_of: str | None
    metadata: dict[str, Any]
    created_at: datetime
    finished_at: datetime | None


class RunList(BaseModel):
    runs: list[RunView]
    next_token: str | None


class RunAccepted(BaseModel):
    run_id: str
    session_id: str
    status: RunStatus
    replay_of: str | None = None


class SyncRunResult(BaseModel):
    run_id: str
    session_id: str
    output: str | None


class SessionView(Session):
    runs: list[RunView]
    messages: list[dict[str, Any]]
