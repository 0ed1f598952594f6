"""The API's request, response and event shapes, as `/v1/openapi.json` describes them.

Each class is named after the spec's component it mirrors; tests/contract/test_sdk_models.py fails when
a field, its type or whether it is required differs from the spec (constraints such as lengths are left
to the server, which answers a 422 that raises `UnprocessableError`).

Responses keep fields a newer server adds (`extra="allow"`, read them from `model_extra`), so an older SDK
still parses them; a request body refuses unknown fields, so a misspelt keyword fails before any request.
An event's `type` is open for the same reason: a newer server may send types this SDK does not name.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

RunStatus = Literal["queued", "running", "waiting", "succeeded", "failed", "cancelled", "timed_out"]
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
    "delegation_started",
    "delegation_completed",
    "provider_paused",
    "hook_blocked",
    "compaction",
    "step_completed",
    "run_completed",
    "run_failed",
    "run_cancelled",
    "eval_run_started",
    "eval_case_completed",
    "eval_run_completed",
    "budget_reached",
    "budget_warning",
    "run_resumed",
    "node_started",
    "node_completed",
    "node_failed",
]
TERMINAL_EVENTS: frozenset[str] = frozenset(
    {"run_completed", "run_failed", "run_cancelled", "eval_run_completed"}
)
TERMINAL_STATUSES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled", "timed_out"})
Permission = Literal["allow", "ask", "deny", "inherit"]
HookEvent = Literal["OnRunStart", "PreToolUse", "OnDelegation", "PostToolUse", "PreResponse", "OnRunComplete"]
WebhookEvent = Literal[
    "run_completed",
    "run_failed",
    "run_cancelled",
    "approval_requested",
    "client_tool_requested",
    "budget_reached",
    "budget_warning",
]
McpServerStatus = Literal["ready", "needs_authorization", "failing"]


class Model(BaseModel):
    """A shape the API answers with."""

    model_config = ConfigDict(extra="allow")


class Request(BaseModel):
    """A request body: only fields that were set are sent, so the server's defaults apply."""

    model_config = ConfigDict(extra="forbid")


class Health(Model):
    status: Literal["ok"]


class CancelFilter(Request):
    """Which of the tenant's active runs `runs.cancel_many` cancels; none: all of them."""

    agent_id: str | None = None
    user_id: str | None = None
    status: Literal["queued", "running", "waiting"] | None = None
    created_before: datetime | None = None


class BulkCancelled(Model):
    cancelled: int
    continuing: bool


class Permissions(Model):
    default: Literal["allow", "ask", "deny", "allow_reads"] = "allow"


class ScriptedToolCall(Model):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ScriptTurn(Model):
    """One model step of a script: either text or tool calls."""

    text: str | None = None
    tool_calls: list[ScriptedToolCall] | None = None


class BuiltinTool(Model):
    """A builtin (`{name, config?, permission?}`): its description, schema and behaviour are Stepwise's;
    `config` is the tool's own per-agent settings, validated at creation."""

    name: str
    permission: Permission = "inherit"
    type: Literal["builtin"] = "builtin"
    config: dict[str, Any] = Field(default_factory=dict)


class ClientTool(Model):
    """A tool the calling app runs itself: the run pauses until the app answers with its result."""

    name: str
    permission: Permission = "inherit"
    type: Literal["client"]
    description: str
    input_schema: dict[str, Any]
    read_only: bool = False


class HttpTool(Model):
    """A custom HTTP tool: the model's arguments are POSTed as JSON to `endpoint`."""

    name: str
    permission: Permission = "inherit"
    type: Literal["http"]
    description: str
    input_schema: dict[str, Any]
    endpoint: str
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    headers: dict[str, str] = Field(default_factory=dict)
    read_only: bool = False
    effect: Literal["none", "idempotent", "undeclared"] = "undeclared"
    key_fields: list[str] = Field(default_factory=list)


class CodeTool(Model):
    """The tenant's own `run(args)` in Python or JavaScript, run in the tenant's code sandbox."""

    name: str
    permission: Permission = "inherit"
    type: Literal["code"]
    description: str
    input_schema: dict[str, Any]
    language: Literal["python", "javascript"]
    source: str
    timeout_seconds: int = 30
    read_only: bool = False
    effect: Literal["none", "idempotent", "undeclared"] = "undeclared"
    key_fields: list[str] = Field(default_factory=list)


class AgentTool(Model):
    """Another agent of the tenant as a tool: a call starts a child run of `agent_id` in a fresh session
    and its answer is the result. The default schema has the model write the child's `message`."""

    name: str
    permission: Permission = "inherit"
    type: Literal["agent"]
    description: str
    agent_id: str
    input_schema: dict[str, Any] = Field(default_factory=dict)
    read_only: bool = False


class WorkflowTool(Model):
    """A workflow of the tenant as a tool: a call starts a workflow run (a child of the calling run) on the
    model's arguments as its input, and the workflow's output is the result. `name` defaults to the
    workflow id; `description` and `input_schema` to the workflow's."""

    name: str
    permission: Permission = "inherit"
    type: Literal["workflow"]
    workflow_id: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=dict)
    version: int | None = None
    read_only: bool = False


Tool = HttpTool | ClientTool | CodeTool | BuiltinTool | AgentTool | WorkflowTool


class WebhookConfig(Model):
    """Where a run's events are POSTed; `events` defaults (server side) to the run's ending."""

    url: str
    events: list[WebhookEvent] = Field(default_factory=list)


class MemoryConfig(Model):
    """Long-term memory per end user: with `enabled`, a run that names a `user_id` can save and search
    memories, and with `auto_recall` the `top_k` most relevant are given to the model."""

    enabled: bool = False
    auto_recall: bool = True
    top_k: int = 5


class Door(Model):
    """Whether the agent answers through a protocol door: A2A, or a tool of the tenant's MCP server."""

    enabled: bool = False


class Agent(Model):
    model: str | None = None
    system_prompt: str | None = None
    temperature: float | None = None
    max_steps: int | None = None
    max_tokens_budget: int | None = None
    permissions: Permissions = Field(default_factory=Permissions)
    script: list[ScriptTurn] | None = None
    webhook: WebhookConfig | None = None
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    a2a: Door = Field(default_factory=Door)
    mcp: Door = Field(default_factory=Door)
    paused: bool = False
    name: str
    tools: list[Tool] = Field(default_factory=list)
    agent_id: str
    created_at: datetime
    updated_at: datetime
    hooks: list[dict[str, Any]] = Field(default_factory=list)
    mcp_servers: list[dict[str, Any]] = Field(default_factory=list)
    skipped_while_paused: int = 0


class AgentCreate(Request):
    model: str | None = None
    system_prompt: str | None = None
    temperature: float | None = None
    max_steps: int | None = None
    max_tokens_budget: int | None = None
    permissions: Permissions = Field(default_factory=Permissions)
    script: list[ScriptTurn] | None = None
    webhook: WebhookConfig | None = None
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    a2a: Door = Field(default_factory=Door)
    mcp: Door = Field(default_factory=Door)
    paused: bool = False
    name: str
    tools: list[Tool] = Field(default_factory=list)


class AgentList(Model):
    agents: list[Agent]


class AgentPatch(Request):
    """Fields to change; `null` clears an optional field, an absent field is left alone."""

    name: str | None = None
    model: str | None = None
    system_prompt: str | None = None
    temperature: float | None = None
    max_steps: int | None = None
    max_tokens_budget: int | None = None
    permissions: Permissions | None = None
    script: list[ScriptTurn] | None = None
    webhook: WebhookConfig | None = None
    memory: MemoryConfig | None = None  # null turns memory off (what was remembered stays, unread)
    a2a: Door | None = None  # null closes the door
    mcp: Door | None = None
    paused: bool | None = None


class ApprovalAnswer(Model):
    approved: bool
    reason: str | None = None


class EmailChannel(Model):
    type: Literal["email"]
    to: list[str]


class SlackChannel(Model):
    type: Literal["slack"]
    webhook_url: str


class ApprovalConfig(Model):
    """Ask a human before the tool runs; no answer within `timeout` seconds blocks the call."""

    timeout: int = 300
    channels: list[EmailChannel | SlackChannel] = Field(default_factory=list)


class ApproveBody(Request):
    approved: bool
    tool_call_id: str | None = None
    reason: str | None = None


class ClientToolAnswer(Model):
    tool_call_id: str
    outcome: Literal["completed", "error"]
    output: Any = None


class FieldError(Model):
    loc: list[str]
    msg: str
    type: str


class ErrorDetails(Model):
    """Always an object; a 422 lists the invalid fields under `errors`, other errors name what they are
    about (`run_id`, `quota` and `limit`…) as extra fields."""

    errors: list[FieldError] | None = None


class ErrorInfo(Model):
    code: str
    message: str
    details: ErrorDetails


class Error(Model):
    """Every error the API answers itself."""

    error: ErrorInfo


class RunEvent(Model):
    seq: int
    type: EventType | str
    data: dict[str, Any] = Field(default_factory=dict)
    at: datetime


class EventPage(Model):
    events: list[RunEvent]
    next: int
    done: bool
    wait: float = 0.0  # the seconds the read could wait: the `wait` asked for, capped at 25


class FollowUrl(Model):
    url: str
    expires_at: datetime


class HttpConfig(Model):
    """POST the event to `url`; its JSON reply allows, denies or modifies."""

    url: str
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_seconds: float = 5.0
    fail_closed: bool | None = None


class Rule(Model):
    """One condition on an argument (dotted path) or on the output, and what a match means."""

    field: str
    operator: Literal["CONTAINS", "STARTS_WITH", "MATCHES", "IN"]
    value: str | list[str]
    action: Literal["deny", "allow"] = "deny"
    message: str | None = None


class RuleConfig(Model):
    rules: list[Rule]


HookConfig = HttpConfig | RuleConfig | ApprovalConfig


class Hook(Model):
    event: HookEvent
    type: Literal["http", "rule", "approval"]
    matcher: str | None = None
    config: HookConfig
    enabled: bool = True
    position: int = 0
    hook_id: str
    created_at: datetime


class HookCreate(Request):
    """The body of `POST /v1/agents/{agent_id}/hooks`."""

    event: HookEvent
    type: Literal["http", "rule", "approval"]
    matcher: str | None = None
    config: HookConfig
    enabled: bool = True
    position: int = 0


class HookList(Model):
    hooks: list[Hook]


class InlineFile(Model):
    """A file sent inside the run's body, `data` in base64."""

    name: str
    content_type: str
    data: str


class UploadRef(Model):
    """A file uploaded before through `POST /v1/uploads`."""

    upload_id: str


class UploadCreate(Request):
    """The body of `POST /v1/uploads`: the file's name, claimed content type and size in bytes."""

    name: str
    content_type: str
    size: int


class UploadTicket(Model):
    """Where to PUT the file's bytes, with exactly `headers` (they are signed), before `expires_at`."""

    upload_id: str
    url: str
    method: Literal["PUT"] = "PUT"
    headers: dict[str, str]
    expires_at: datetime


class Attachment(Model):
    """A run's file as stored under the run: `content_type` is sniffed from its bytes."""

    attachment_id: str
    name: str
    content_type: str
    size: int
    sha256: str


class InteractionView(Model):
    interaction_id: str
    run_id: str
    kind: Literal["approval", "client_tool", "budget", "provider"]
    status: Literal["pending", "answered", "expired"]
    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any]
    created_at: str


class InteractionList(Model):
    interactions: list[InteractionView]


class McpOAuth(Model):
    """`auth: {type: "oauth"}`: the server is behind the MCP authorization flow (OAuth 2.1 with PKCE).
    Without `client_id` Stepwise registers itself; `scopes` None asks for what the server advertises."""

    type: Literal["oauth"]
    scopes: list[str] | None = None
    client_id: str | None = None
    client_secret: str | None = None


class McpOAuthView(Model):
    """A server's OAuth settings as the API shows them: never the client secret."""

    type: Literal["oauth"]
    scopes: list[str] | None
    client_id: str | None


class McpToolFilter(Model):
    """Which of a server's tools the agent declares: only `allow` (when given), minus `deny`."""

    allow: list[str] | None = None
    deny: list[str] = Field(default_factory=list)


class McpServerCreate(Request):
    """A remote MCP server speaking streamable HTTP at `url`, or (`transport: "stdio"`, when the operator
    allows it) a process spawned from `command` and `args` with `env`."""

    name: str
    transport: Literal["streamable_http", "sse", "stdio"] = "streamable_http"
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    enabled: bool = True
    permission: Permission = "inherit"
    permissions: dict[str, Literal["allow", "ask", "deny"]] = Field(default_factory=dict)
    tools: McpToolFilter | None = None
    trusted: bool = False
    auth: McpOAuth | None = None


class McpToolView(Model):
    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=dict)
    annotations: dict[str, Any] = Field(default_factory=dict)
    exposed_name: str
    declared: bool = True


class McpServerView(Model):
    """A server as the API shows it: header and environment names with their values masked."""

    name: str
    transport: Literal["streamable_http", "sse", "stdio"]
    url: str | None
    headers: dict[str, str]
    command: str | None
    args: list[str]
    env: dict[str, str]
    enabled: bool
    permission: Permission
    permissions: dict[str, Literal["allow", "ask", "deny"]] = Field(default_factory=dict)
    trusted: bool
    created_at: datetime
    tools: list[McpToolView]
    tool_filter: McpToolFilter | None = None
    missing_tools: list[str] = Field(default_factory=list)  # allowlisted names the server no longer offers
    discovered_at: datetime | None
    last_error: str | None
    auth: McpOAuthView | None = None
    status: McpServerStatus
    authorization_url: str | None = None  # only in the answer that starts an authorization


class McpServerList(Model):
    mcp_servers: list[McpServerView]


class RespondBody(Request):
    answer: ApprovalAnswer | ClientToolAnswer


class RunAccepted(Model):
    run_id: str
    session_id: str
    status: RunStatus
    replay_of: str | None = None
    attachments: list[Attachment] = Field(default_factory=list)


class RunCreate(Request):
    message: str
    session_id: str | None = None
    max_steps: int | None = None
    max_tokens_budget: int | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    script: list[ScriptTurn] | None = None
    multitask_strategy: Literal["enqueue", "reject", "interrupt"] = "enqueue"
    webhook: WebhookConfig | None = None
    user_id: str | None = None
    attachments: list[UploadRef | InlineFile] = Field(default_factory=list)


class RunError(Model):
    code: str
    message: str


class Usage(Model):
    """`cost_usd` is null when any call was of a model without a known price."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = 0.0


class RunView(Model):
    """A run as `GET /v1/runs/{run_id}` shows it."""

    run_id: str
    agent_id: str
    session_id: str
    user_id: str | None
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
    webhook: WebhookConfig | None = None
    attachments: list[Attachment]
    attachments_erased_at: datetime | None
    created_at: datetime
    finished_at: datetime | None
    trigger: Literal[
        "api",
        "schedule",
        "event",
        "delegation",
        "what_if",
        "workflow",
        "webhook",
        "gmail",
        "outlook",
        "ses",
    ]
    kind: Literal["agent", "workflow"] = "agent"
    workflow_id: str | None = None  # a workflow run's workflow and the version it ran
    workflow_version: int | None = None
    trigger_id: str | None = None  # the trigger (`trg_…`) that started it, for a run a trigger started
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


class RunList(Model):
    runs: list[RunView]
    next_token: str | None


class Schedule(Model):
    schedule_id: str
    agent_id: str
    expression: str
    timezone: str
    message: str
    enabled: bool
    created_at: datetime
    next_run: datetime | None = None


class ScheduleCreate(Request):
    expression: str
    timezone: str = "UTC"
    message: str
    enabled: bool = True


class ScheduleList(Model):
    schedules: list[Schedule]


class WorkflowScheduleCreate(Request):
    expression: str
    timezone: str = "UTC"
    input: dict[str, Any] = Field(default_factory=dict)
    enabled: bool = True


class WorkflowSchedule(Model):
    schedule_id: str
    workflow_id: str
    expression: str
    timezone: str
    input: dict[str, Any]
    enabled: bool
    created_at: datetime
    next_run: datetime | None = None


class WorkflowScheduleList(Model):
    schedules: list[WorkflowSchedule]


class SessionView(Model):
    session_id: str
    agent_id: str
    user_id: str | None = None
    created_at: datetime
    completed_runs: list[str] = Field(default_factory=list)
    active_run_id: str | None = None
    queue: list[str] = Field(default_factory=list)
    usage: Usage
    runs: list[RunView]
    messages: list[dict[str, Any]]
    next_token: str | None = None


class SettingInfo(Model):
    """A setting's name and when it last changed; never its value. `agent_id` names the agent whose own
    setting it is (only a provider's key may be an agent's), else it is the tenant's."""

    key: str
    updated_at: datetime
    agent_id: str | None = None


class SettingList(Model):
    settings: list[SettingInfo]


class SettingPut(Request):
    value: str


class SyncRunCreate(Request):
    message: str
    session_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    script: list[ScriptTurn] | None = None
    user_id: str | None = None


class SyncRunResult(Model):
    run_id: str
    session_id: str
    output: str | None


class ToolList(Model):
    tools: list[Tool]


class ToolWeight(Model):
    name: str
    tokens: int


class AgentWeight(Model):
    model: str
    system_tokens: int
    tools_tokens: int
    first_call_tokens: int
    tools: list[ToolWeight]


class ToolUse(Model):
    name: str
    declared: bool
    calls: int


class ToolUsage(Model):
    runs: int
    tools: list[ToolUse]


class Memory(Model):
    memory_id: str
    content: str
    tags: list[str] = Field(default_factory=list)
    created_at: datetime
    source_run_id: str | None = None  # the run whose memory_save wrote it


class MemoryList(Model):
    """A page of what an agent remembers about one user, newest first."""

    memories: list[Memory]
    next_token: str | None


class Attempt(Model):
    """One try at a webhook delivery: a status code, or why none came back."""

    at: datetime
    duration_ms: int
    status_code: int | None = None
    error: str | None = None


class Delivery(Model):
    """A webhook delivery of a run's event (or, `a2a_task`, an A2A task's new state to one of its push
    notification configs); `history` lists its most recent attempts."""

    webhook_id: str
    event: WebhookEvent | Literal["a2a_task", "eval_run.completed"]
    url: str
    status: Literal["pending", "retrying", "delivered", "failed"]
    attempts: int
    last_status_code: int | None = None
    last_error: str | None = None
    created_at: datetime
    next_attempt_at: datetime | None = None
    delivered_at: datetime | None = None
    gives_up_at: datetime
    history: list[Attempt] = Field(default_factory=list)


class DeliveryList(Model):
    deliveries: list[Delivery]


class WebhookSecret(Model):
    """The tenant's new signing secret, shown this once; the one it replaces still signs deliveries
    beside it until `previous_valid_until`."""

    secret: str
    created_at: datetime
    previous_valid_until: datetime | None = None


# --- The OpenAI Responses door (`/v1/responses`): its own client is the official `openai` package; these
# let an app that already uses this SDK reach it without one (JSON answers only: stream with openai's).

ResponseStatus = Literal["completed", "failed", "in_progress", "cancelled", "queued", "incomplete"]


class ResponseCreate(Request):
    """`model` is `"agent:<agent_id>"`; `input` a string or OpenAI input items (the last user message)."""

    model: str
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    previous_response_id: str | None = None
    metadata: dict[str, str] | None = None
    stream: bool | None = False
    background: bool | None = False


class OpenAIResponse(Model):
    """A run as OpenAI's Response object (its id is the run id)."""

    id: str
    object: Literal["response"]
    created_at: float
    completed_at: float | None
    status: ResponseStatus
    model: str
    instructions: str | None
    metadata: dict[str, str]
    output: list[dict[str, Any]]
    error: dict[str, Any] | None
    incomplete_details: dict[str, Any] | None
    parallel_tool_calls: bool
    tool_choice: str
    tools: list[dict[str, Any]]
    usage: dict[str, Any] | None

    @property
    def output_text(self) -> str:
        """The text of every message item, as the openai client's `Response.output_text`."""
        return "".join(
            part.get("text", "")
            for item in self.output
            if item.get("type") == "message"
            for part in item.get("content") or []
            if part.get("type") == "output_text"
        )


class OpenAIErrorInfo(Model):
    message: str
    type: Literal["invalid_request_error", "server_error"]
    param: str | None
    code: str


class OpenAIError(Model):
    """An error of `/v1/responses`, in OpenAI's shape (this SDK raises it as a StepwiseError by status)."""

    error: OpenAIErrorInfo


class WhatIf(Request):
    """`POST /v1/runs/{run_id}/what-if`: what changes, how calls are matched, what may happen live."""

    model: str | None = None
    system_prompt: str | None = None
    tools: list[Tool] | None = None
    temperature: float | None = None
    max_steps: int | None = None
    agent_id: str | None = None
    match: Literal["arguments", "name"] = "arguments"
    live_reads: bool = False
    webhooks: bool = False
    script: list[ScriptTurn] | None = None


CallStatus = Literal["matched", "served", "live", "diverged", "executed"]


class TrajectoryCall(Model):
    index: int
    call_id: str
    tool: str
    arguments: Any
    status: CallStatus
    served_from: str | None = None
    error: str | None = None


class Side(Model):
    run_id: str
    agent_id: str
    status: str
    output: str | None
    steps: int
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    cost_usd: float | None
    wall_seconds: float | None
    trajectory: list[TrajectoryCall]


class Deltas(Model):
    """b minus a; null where either side is unknown."""

    steps: int
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    cost_usd: float | None
    wall_seconds: float | None


class Divergence(Model):
    index: int
    reason: Literal["tool", "arguments", "only_in_a", "only_in_b", "diverged"]
    a: TrajectoryCall | None
    b: TrajectoryCall | None


class Summary(Model):
    same_answer: bool
    same_trajectory: bool
    calls_a: int
    calls_b: int
    served: int
    live_reads: int
    divergences: int
    first_divergence_index: int | None
    deltas: Deltas


class Comparison(Model):
    a: Side
    b: Side
    deltas: Deltas
    first_divergence: Divergence | None
    summary: Summary


# --- Eval suites (/v1/evals) ------------------------------------------------------------------------


class AssertContains(Model):
    type: Literal["contains"]
    value: str
    case_sensitive: bool = True


class AssertNotContains(Model):
    type: Literal["not_contains"]
    value: str
    case_sensitive: bool = True


class AssertRegex(Model):
    """An RE2 pattern searched for in the answer."""

    type: Literal["regex"]
    value: str


class AssertJsonSchema(Model):
    type: Literal["json_schema"]
    value: dict[str, Any]


class AssertToolTrajectory(Model):
    """The run's tool calls against the expected ones, as Google ADK's TrajectoryEvaluator compares them."""

    type: Literal["tool_trajectory"]
    match: Literal["EXACT", "IN_ORDER", "ANY_ORDER"] = "EXACT"


class AssertMaxSteps(Model):
    type: Literal["max_steps"]
    value: int


class AssertMaxCost(Model):
    type: Literal["max_cost_usd"]
    value: float


class AssertMaxInputTokens(Model):
    type: Literal["max_input_tokens"]
    value: int


class AssertNoDivergence(Model):
    type: Literal["no_divergence"]


class AssertJudge(Model):
    """A model scores the answer against `rubric` and answers `{pass, score, reason}`."""

    type: Literal["judge"]
    rubric: str
    model: str | None = None
    script: list[ScriptTurn] | None = None


EvalAssertion = Annotated[
    AssertContains
    | AssertNotContains
    | AssertRegex
    | AssertJsonSchema
    | AssertToolTrajectory
    | AssertMaxSteps
    | AssertMaxCost
    | AssertMaxInputTokens
    | AssertNoDivergence
    | AssertJudge,
    Field(discriminator="type"),
]


class ExpectedToolCall(Model):
    name: str
    arguments: dict[str, Any] | None = None


class EvalExpected(Model):
    tool_calls: list[ExpectedToolCall] | None = None


class RecordedEvalCase(Model):
    """One of the tenant's ended runs, replayed what-if."""

    run_id: str
    name: str | None = None
    expected: EvalExpected | None = None
    assertions: list[EvalAssertion] = Field(default_factory=list)


class FreshEvalCase(Model):
    """A new run on `message` (its tools live, or its `script` drives the scripted model)."""

    message: str
    name: str | None = None
    session_id: str | None = None
    attachments: list[UploadRef | InlineFile] = Field(default_factory=list)
    expected: EvalExpected | None = None
    script: list[ScriptTurn] | None = None
    assertions: list[EvalAssertion] = Field(default_factory=list)


class EvalSuiteCreate(Request):
    name: str
    agent_id: str
    cases: list[RecordedEvalCase | FreshEvalCase] = Field(default_factory=list)
    assertions: list[EvalAssertion] = Field(default_factory=list)
    webhook: WebhookConfig | None = None


class EvalSuite(Model):
    eval_id: str
    name: str
    agent_id: str
    cases: list[RecordedEvalCase | FreshEvalCase]
    assertions: list[EvalAssertion]
    webhook: WebhookConfig | None = None
    created_at: datetime


class EvalSuiteSummary(Model):
    eval_id: str
    name: str
    agent_id: str
    cases: int
    created_at: datetime


class EvalSuiteList(Model):
    evals: list[EvalSuiteSummary]


class EvalCasesFromRuns(Request):
    """This tenant's ended runs that match, newest first, at most `last`; or the runs in `run_ids`."""

    agent_id: str | None = None
    status: Literal["succeeded", "failed", "cancelled"] | None = None
    last: int = 20
    created_after: datetime | None = None
    created_before: datetime | None = None
    metadata_key: str | None = None
    run_ids: list[str] | None = None


class EvalCasesAdded(Model):
    eval_id: str
    added: list[str]
    cases: int


class EvalOverrides(Model):
    model: str | None = None
    system_prompt: str | None = None
    tools: list[dict[str, Any]] | None = None
    temperature: float | None = None
    max_steps: int | None = None
    agent_id: str | None = None
    match: Literal["arguments", "name"] | None = None
    live_reads: bool | None = None


class EvalRunCreate(Request):
    overrides: EvalOverrides | None = None
    concurrency: int | None = None


class EvalRunAccepted(Model):
    eval_run_id: str
    eval_id: str
    status: str
    cases: int
    concurrency: int


class EvalAssertionResult(Model):
    type: str
    passed: bool
    reason: str
    score: float | None = None


class EvalCaseResult(Model):
    index: int
    name: str | None = None
    run_id: str | None
    baseline_run_id: str | None = None
    status: str
    passed: bool
    assertions: list[EvalAssertionResult]
    error: dict[str, Any] | None = None
    cost_usd: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    steps: int = 0
    compare: dict[str, Any] | None = None


class EvalStat(Model):
    mean: float | None = None
    p95: float | None = None
    baseline_mean: float | None = None
    delta: float | None = None


class EvalRunView(Model):
    eval_run_id: str
    eval_id: str
    status: str
    total: int
    done: int
    concurrency: int
    overrides: dict[str, Any]
    created_at: datetime
    finished_at: datetime | None = None
    pass_rate: float | None = None
    passed: int | None = None
    cases: list[EvalCaseResult] = Field(default_factory=list)
    cost_usd: EvalStat | None = None
    input_tokens: EvalStat | None = None
    steps: EvalStat | None = None
    cost_delta_usd: float | None = None
    input_tokens_delta: float | None = None
    steps_delta: float | None = None
    flipped: list[int] = Field(default_factory=list)
    previous_eval_run_id: str | None = None
    judge_usage: dict[str, Any] | None = None
    judge_calls: int = 0
    error: dict[str, Any] | None = None


class EvalRunList(Model):
    runs: list[EvalRunView]


class UsageRow(Model):
    """One group of `GET /v1/usage`: the keys it was grouped by, then its sums."""

    day: str | None = None
    hour: str | None = None
    agent_id: str | None = None
    model: str | None = None
    user_id: str | None = None
    tool: str | None = None
    input_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    billable_tokens: int = 0
    cost_usd: float | None = 0.0
    runs: int = 0
    model_calls: int = 0
    tool_calls: int = 0


class UsageRows(Model):
    rows: list[UsageRow]


class BudgetSet(Request):
    period: Literal["day", "month"]
    max_cost_usd: float | None = None
    max_billable_tokens: int | None = None
    soft_limit_pct: int | None = None
    on_exceed: Literal["pause", "fail"] = "pause"
    count_keys: Literal["all", "deployment"] = "all"


class Spend(Model):
    cost_usd: float = 0.0
    billable_tokens: int = 0


class Budget(Model):
    scope: str
    period: Literal["day", "month"]
    max_cost_usd: float | None = None
    max_billable_tokens: int | None = None
    soft_limit_pct: int | None = None
    on_exceed: Literal["pause", "fail"] = "pause"
    count_keys: Literal["all", "deployment"] = "all"
    period_key: str
    spend: Spend = Field(default_factory=Spend)
    warned: bool = False
    updated_at: datetime | None = None


class BudgetList(Model):
    budgets: list[Budget]


# --- Workflows ---------------------------------------------------------------------------------------


class WorkflowCreate(Request):
    """A workflow's definition: `root` is a node `{id, type, ...}` of type agent, sequential, parallel,
    map, loop, branch or approval (see the README's "Workflows")."""

    name: str
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    root: dict[str, Any]


class WorkflowView(Model):
    workflow_id: str
    name: str
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    root: dict[str, Any]
    version: int
    versions: int
    state_machine_arn: str | None = None
    created_at: datetime
    updated_at: datetime


class WorkflowList(Model):
    workflows: list[WorkflowView]


class WorkflowVersion(Model):
    version: int
    state_machine_arn: str | None = None
    created_at: datetime


class WorkflowVersions(Model):
    workflow_id: str
    versions: list[WorkflowVersion]


class WorkflowRunCreate(Request):
    input: dict[str, Any] = Field(default_factory=dict)
    version: int | None = None
    user_id: str | None = None
    webhook: WebhookConfig | None = None


class WorkflowAsl(Model):
    workflow_id: str
    version: int
    definition: dict[str, Any]


class WorkflowRunAccepted(Model):
    run_id: str
    workflow_id: str
    version: int
    status: str


EffectStatus = Literal["claimed", "done", "unknown", "undone", "released"]
EffectOutcome = Literal["done", "undone"]


class Resolution(Model):
    """A person's word on an effect: who (the API key's name), when, and from which status."""

    outcome: Literal["done", "undone"]
    by: str
    at: datetime
    note: str | None = None
    was: str


class EffectView(Model):
    """An entry of the effects ledger; `key` is what `effects.resolve` takes."""

    key: str
    kind: Literal["effect", "call"]
    status: EffectStatus
    tool: str
    arguments: dict[str, Any] | None
    run_id: str
    tool_call_id: str
    generation: int
    claimed_at: datetime
    settled_at: datetime | None
    error: dict[str, Any] | None
    resolution: Resolution | None


class EffectList(Model):
    effects: list[EffectView]
    next_token: str | None


class EffectResolve(Request):
    outcome: Literal["done", "undone"]
    note: str | None = None


# --- Triggers ---------------------------------------------------------------------------------------

TriggerType = Literal["webhook", "gmail", "outlook", "ses"]
Verification = Literal["standard-webhooks", "github", "stripe", "hmac-sha256"]


class TriggerTarget(Model):
    """What a trigger starts: `agent_id` (a `workflow_id` once workflows are available)."""

    agent_id: str | None = None
    workflow_id: str | None = None


class SessionByKey(Model):
    """One session per rendered key, e.g. `{"by_key": "{{thread_id}}"}`."""

    by_key: str


class TriggerCreate(Request):
    type: TriggerType
    name: str | None = None
    target: TriggerTarget
    message: str
    session: Literal["new"] | SessionByKey = "new"
    user_id: str | None = None
    enabled: bool = True
    verification: Verification | None = None
    signature_header: str | None = None
    dedupe_path: str | None = None
    secret: str | None = None
    address: str | None = None
    allow_automated: bool = False


class TriggerPatch(Request):
    name: str | None = None
    target: TriggerTarget | None = None
    message: str | None = None
    session: Literal["new"] | SessionByKey | None = None
    user_id: str | None = None
    enabled: bool | None = None
    dedupe_path: str | None = None
    allow_automated: bool | None = None


class TriggerRefusals(Model):
    bad_signature: int = 0
    stale: int = 0
    too_large: int = 0


class Trigger(Model):
    trigger_id: str
    type: TriggerType
    name: str | None = None
    target: TriggerTarget
    message: str
    session: Literal["new"] | SessionByKey = "new"
    user_id: str | None = None
    enabled: bool = True
    verification: Verification | None = None
    signature_header: str | None = None
    dedupe_path: str | None = None
    url: str | None = None
    address: str | None = None
    allow_automated: bool = False
    created_at: datetime
    updated_at: datetime
    secret_created_at: datetime | None = None
    previous_secret_valid_until: datetime | None = None
    refused: TriggerRefusals = Field(default_factory=TriggerRefusals)


class TriggerCreated(Trigger):
    """The new trigger with its signing `secret`, shown only here."""

    secret: str | None = None


class TriggerList(Model):
    triggers: list[Trigger]


class TriggerSecretRotate(Request):
    secret: str | None = None
    previous_valid_seconds: int = 86_400


class TriggerSecret(Model):
    secret: str
    created_at: datetime
    previous_valid_until: datetime | None = None


class TriggerDelivery(Model):
    delivery_id: str
    status: Literal["received", "retrying", "started", "deduplicated", "refused", "failed"]
    received_at: datetime
    dedupe_key: str | None = None
    run_id: str | None = None
    duplicate_of: str | None = None
    reason: str | None = None
    attempts: int = 0
    updated_at: datetime | None = None


class TriggerDeliveryList(Model):
    deliveries: list[TriggerDelivery]
    next_token: str | None = None


class MailAccepted(Model):
    """What a mail route answers SNS or Pub/Sub (the SDK never calls it; the spec's component, modelled)."""

    type: str
    deliveries: list[str] = Field(default_factory=list)
    deduplicated: list[str] = Field(default_factory=list)
    ignored: int = 0


class TriggerDeliveryAccepted(Model):
    delivery_id: str
    status: Literal["received", "deduplicated"]
    deduplicated: bool = False
    duplicate_of: str | None = None
