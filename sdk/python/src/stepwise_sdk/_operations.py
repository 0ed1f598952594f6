"""The API's routes this SDK calls, one `Operation` each, with the models of their bodies.

tests/contract/test_sdk_models.py checks every entry against `/v1/openapi.json` (the route exists, its
request and success bodies are these models) and that every route of the spec is here or is left out on
purpose (the HTML approval pages and MCP OAuth callback, Slack's callback, the SSE stream that
`runs.events` long-polls instead).
"""

from __future__ import annotations

from stepwise_sdk._core import Operation
from stepwise_sdk.models import (
    Agent,
    AgentCreate,
    AgentList,
    AgentPatch,
    AgentWeight,
    ApproveBody,
    Budget,
    BudgetList,
    BudgetSet,
    BulkCancelled,
    CancelFilter,
    Comparison,
    DeliveryList,
    EffectList,
    EffectResolve,
    EffectView,
    EvalCasesAdded,
    EvalCasesFromRuns,
    EvalRunAccepted,
    EvalRunCreate,
    EvalRunList,
    EvalRunView,
    EvalSuite,
    EvalSuiteCreate,
    EvalSuiteList,
    EventPage,
    FollowUrl,
    Health,
    Hook,
    HookCreate,
    HookList,
    InteractionList,
    InteractionView,
    McpServerCreate,
    McpServerList,
    McpServerView,
    MemoryList,
    OpenAIResponse,
    RespondBody,
    ResponseCreate,
    RunAccepted,
    RunCreate,
    RunList,
    RunView,
    Schedule,
    ScheduleCreate,
    ScheduleList,
    SessionView,
    SettingInfo,
    SettingList,
    SettingPut,
    SyncRunCreate,
    SyncRunResult,
    Tool,
    ToolList,
    ToolUsage,
    Trigger,
    TriggerCreate,
    TriggerCreated,
    TriggerDeliveryList,
    TriggerList,
    TriggerPatch,
    TriggerSecret,
    TriggerSecretRotate,
    UploadCreate,
    UploadTicket,
    UsageRows,
    WebhookSecret,
    WhatIf,
    WorkflowAsl,
    WorkflowCreate,
    WorkflowList,
    WorkflowRunAccepted,
    WorkflowRunCreate,
    WorkflowSchedule,
    WorkflowScheduleCreate,
    WorkflowScheduleList,
    WorkflowVersions,
    WorkflowView,
)

CREATE_AGENT = Operation[Agent]("POST", "/v1/agents", Agent, AgentCreate)
LIST_AGENTS = Operation[AgentList]("GET", "/v1/agents", AgentList)
GET_AGENT = Operation[Agent]("GET", "/v1/agents/{agent_id}", Agent)
UPDATE_AGENT = Operation[Agent]("PATCH", "/v1/agents/{agent_id}", Agent, AgentPatch)
DELETE_AGENT = Operation[None]("DELETE", "/v1/agents/{agent_id}", None)
AGENT_WEIGHT = Operation[AgentWeight]("GET", "/v1/agents/{agent_id}/weight", AgentWeight)
TOOL_USAGE = Operation[ToolUsage]("GET", "/v1/agents/{agent_id}/tool-usage", ToolUsage)

ADD_TOOL = Operation[Tool]("POST", "/v1/agents/{agent_id}/tools", Tool, Tool)
LIST_TOOLS = Operation[ToolList]("GET", "/v1/agents/{agent_id}/tools", ToolList)
DELETE_TOOL = Operation[None]("DELETE", "/v1/agents/{agent_id}/tools/{name}", None)

CREATE_HOOK = Operation[Hook]("POST", "/v1/agents/{agent_id}/hooks", Hook, HookCreate)
LIST_HOOKS = Operation[HookList]("GET", "/v1/agents/{agent_id}/hooks", HookList)
DELETE_HOOK = Operation[None]("DELETE", "/v1/agents/{agent_id}/hooks/{hook_id}", None)

ADD_MCP_SERVER = Operation[McpServerView](
    "POST", "/v1/agents/{agent_id}/mcp-servers", McpServerView, McpServerCreate
)
LIST_MCP_SERVERS = Operation[McpServerList]("GET", "/v1/agents/{agent_id}/mcp-servers", McpServerList)
GET_MCP_SERVER = Operation[McpServerView]("GET", "/v1/agents/{agent_id}/mcp-servers/{name}", McpServerView)
DELETE_MCP_SERVER = Operation[None]("DELETE", "/v1/agents/{agent_id}/mcp-servers/{name}", None)
REFRESH_MCP_SERVER = Operation[McpServerView](
    "POST", "/v1/agents/{agent_id}/mcp-servers/{name}/refresh", McpServerView
)
AUTHORIZE_MCP_SERVER = Operation[McpServerView](
    "POST", "/v1/agents/{agent_id}/mcp-servers/{name}/authorize", McpServerView
)

LIST_MEMORIES = Operation[MemoryList]("GET", "/v1/agents/{agent_id}/memories", MemoryList)
FORGET_USER = Operation[None]("DELETE", "/v1/agents/{agent_id}/memories", None)
DELETE_MEMORY = Operation[None]("DELETE", "/v1/agents/{agent_id}/memories/{memory_id}", None)

CREATE_SCHEDULE = Operation[Schedule]("POST", "/v1/agents/{agent_id}/schedules", Schedule, ScheduleCreate)
LIST_SCHEDULES = Operation[ScheduleList]("GET", "/v1/agents/{agent_id}/schedules", ScheduleList)
DELETE_SCHEDULE = Operation[None]("DELETE", "/v1/agents/{agent_id}/schedules/{schedule_id}", None)

CREATE_RUN = Operation[RunAccepted]("POST", "/v1/agents/{agent_id}/runs", RunAccepted, RunCreate)
RUN_SYNC = Operation[SyncRunResult]("POST", "/v1/agents/{agent_id}/run", SyncRunResult, SyncRunCreate)
LIST_RUNS = Operation[RunList]("GET", "/v1/runs", RunList)
GET_RUN = Operation[RunView]("GET", "/v1/runs/{run_id}", RunView)
RUN_EVENTS = Operation[EventPage]("GET", "/v1/runs/{run_id}/events", EventPage)
FOLLOW_RUN = Operation[FollowUrl]("POST", "/v1/runs/{run_id}/follow", FollowUrl)
CANCEL_RUN = Operation[RunView]("POST", "/v1/runs/{run_id}/cancel", RunView)
CANCEL_RUNS = Operation[BulkCancelled]("POST", "/v1/runs:cancel", BulkCancelled, CancelFilter)
REPLAY_RUN = Operation[RunAccepted]("POST", "/v1/runs/{run_id}/replay", RunAccepted)
WHAT_IF = Operation[RunView]("POST", "/v1/runs/{run_id}/what-if", RunView, WhatIf)
COMPARE_RUNS = Operation[Comparison]("GET", "/v1/runs/{run_id}/compare/{other_run_id}", Comparison)
APPROVE = Operation[InteractionView]("POST", "/v1/runs/{run_id}/approve", InteractionView, ApproveBody)
RUN_WEBHOOKS = Operation[DeliveryList]("GET", "/v1/runs/{run_id}/webhooks", DeliveryList)
DELETE_ATTACHMENTS = Operation[None]("DELETE", "/v1/runs/{run_id}/attachments", None)

CREATE_UPLOAD = Operation[UploadTicket]("POST", "/v1/uploads", UploadTicket, UploadCreate)
ROTATE_WEBHOOK_SECRET = Operation[WebhookSecret]("POST", "/v1/webhooks/secret", WebhookSecret)

GET_SESSION = Operation[SessionView]("GET", "/v1/sessions/{session_id}", SessionView)
DELETE_SESSION = Operation[None]("DELETE", "/v1/sessions/{session_id}", None)
LIST_INTERACTIONS = Operation[InteractionList](
    "GET", "/v1/sessions/{session_id}/interactions", InteractionList
)
RESPOND = Operation[InteractionView](
    "POST", "/v1/sessions/interactions/{interaction_id}/respond", InteractionView, RespondBody
)

PUT_SETTING = Operation[SettingInfo]("PUT", "/v1/settings/{key}", SettingInfo, SettingPut)
LIST_SETTINGS = Operation[SettingList]("GET", "/v1/settings", SettingList)
DELETE_SETTING = Operation[None]("DELETE", "/v1/settings/{key}", None)

HEALTH = Operation[Health]("GET", "/v1/health", Health)

CREATE_RESPONSE = Operation[OpenAIResponse]("POST", "/v1/responses", OpenAIResponse, ResponseCreate)
GET_RESPONSE = Operation[OpenAIResponse]("GET", "/v1/responses/{response_id}", OpenAIResponse)
CANCEL_RESPONSE = Operation[OpenAIResponse]("POST", "/v1/responses/{response_id}/cancel", OpenAIResponse)

CREATE_EVAL = Operation[EvalSuite]("POST", "/v1/evals", EvalSuite, EvalSuiteCreate)
LIST_EVALS = Operation[EvalSuiteList]("GET", "/v1/evals", EvalSuiteList)
GET_EVAL = Operation[EvalSuite]("GET", "/v1/evals/{eval_id}", EvalSuite)
ADD_EVAL_CASES_FROM_RUNS = Operation[EvalCasesAdded](
    "POST", "/v1/evals/{eval_id}/cases:from-runs", EvalCasesAdded, EvalCasesFromRuns
)
START_EVAL_RUN = Operation[EvalRunAccepted](
    "POST", "/v1/evals/{eval_id}/runs", EvalRunAccepted, EvalRunCreate
)
LIST_EVAL_RUNS = Operation[EvalRunList]("GET", "/v1/evals/{eval_id}/runs", EvalRunList)
GET_EVAL_RUN = Operation[EvalRunView]("GET", "/v1/evals/{eval_id}/runs/{eval_run_id}", EvalRunView)
EVAL_RUN_EVENTS = Operation[EventPage]("GET", "/v1/evals/{eval_id}/runs/{eval_run_id}/events", EventPage)
READ_USAGE = Operation[UsageRows]("GET", "/v1/usage", UsageRows)
LIST_BUDGETS = Operation[BudgetList]("GET", "/v1/budgets", BudgetList)
PUT_BUDGET = Operation[Budget]("PUT", "/v1/budgets/{scope}", Budget, BudgetSet)
GET_BUDGET = Operation[Budget]("GET", "/v1/budgets/{scope}", Budget)
DELETE_BUDGET = Operation[None]("DELETE", "/v1/budgets/{scope}", None)
RESUME_RUN = Operation[RunView]("POST", "/v1/runs/{run_id}/resume", RunView)
LIST_EFFECTS = Operation[EffectList]("GET", "/v1/effects", EffectList)
RESOLVE_EFFECT = Operation[EffectView]("POST", "/v1/effects/{key}/resolve", EffectView, EffectResolve)

CREATE_WORKFLOW = Operation[WorkflowView]("POST", "/v1/workflows", WorkflowView, WorkflowCreate)
LIST_WORKFLOWS = Operation[WorkflowList]("GET", "/v1/workflows", WorkflowList)
GET_WORKFLOW = Operation[WorkflowView]("GET", "/v1/workflows/{workflow_id}", WorkflowView)
PUBLISH_WORKFLOW = Operation[WorkflowView]("PUT", "/v1/workflows/{workflow_id}", WorkflowView, WorkflowCreate)
DELETE_WORKFLOW = Operation[None]("DELETE", "/v1/workflows/{workflow_id}", None)
LIST_WORKFLOW_VERSIONS = Operation[WorkflowVersions](
    "GET", "/v1/workflows/{workflow_id}/versions", WorkflowVersions
)
GET_WORKFLOW_ASL = Operation[WorkflowAsl]("GET", "/v1/workflows/{workflow_id}/asl", WorkflowAsl)
RUN_WORKFLOW = Operation[WorkflowRunAccepted](
    "POST", "/v1/workflows/{workflow_id}/runs", WorkflowRunAccepted, WorkflowRunCreate
)
CREATE_WORKFLOW_SCHEDULE = Operation[WorkflowSchedule](
    "POST", "/v1/workflows/{workflow_id}/schedules", WorkflowSchedule, WorkflowScheduleCreate
)
LIST_WORKFLOW_SCHEDULES = Operation[WorkflowScheduleList](
    "GET", "/v1/workflows/{workflow_id}/schedules", WorkflowScheduleList
)
DELETE_WORKFLOW_SCHEDULE = Operation[None](
    "DELETE", "/v1/workflows/{workflow_id}/schedules/{schedule_id}", None
)
CREATE_TRIGGER = Operation[TriggerCreated]("POST", "/v1/triggers", TriggerCreated, TriggerCreate)
LIST_TRIGGERS = Operation[TriggerList]("GET", "/v1/triggers", TriggerList)
GET_TRIGGER = Operation[Trigger]("GET", "/v1/triggers/{trigger_id}", Trigger)
UPDATE_TRIGGER = Operation[Trigger]("PATCH", "/v1/triggers/{trigger_id}", Trigger, TriggerPatch)
DELETE_TRIGGER = Operation[None]("DELETE", "/v1/triggers/{trigger_id}", None)
ROTATE_TRIGGER_SECRET = Operation[TriggerSecret](
    "POST", "/v1/triggers/{trigger_id}/secret", TriggerSecret, TriggerSecretRotate
)
LIST_TRIGGER_DELIVERIES = Operation[TriggerDeliveryList](
    "GET", "/v1/triggers/{trigger_id}/deliveries", TriggerDeliveryList
)

ALL: tuple[Operation[object], ...] = tuple(
    value for value in list(globals().values()) if isinstance(value, Operation)
)
