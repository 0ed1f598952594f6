"""Ids in paths and query strings, checked against the pattern of the ids this API issues.

Every route names its ids with these types, so an id that could not be one of ours (another shape, a
"#" that would reach into a key) is refused by the resolver's validation before any store code builds
a key from it. In a path it names a resource that cannot exist: 404 with that resource's code, exactly
like an id that does not exist (NOT_FOUND, applied in stepwise.api.resolver). In a query string it is a
filter value that is not valid: 422 `validation_error`.
"""

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from stepwise.core import ids

AgentId = Annotated[str, Path(pattern=ids.AGENT_ID, description="`agt_…`, as the API issued it")]
RunId = Annotated[str, Path(pattern=ids.RUN_ID, description="`run_…`, as the API issued it")]
SessionId = Annotated[str, Path(pattern=ids.SESSION_ID, description="`ses_…`, as the API issued it")]
HookId = Annotated[str, Path(pattern=ids.HOOK_ID, description="`hook_…`, as the API issued it")]
ScheduleId = Annotated[str, Path(pattern=ids.SCHEDULE_ID, description="`sch_…`, as the API issued it")]
InteractionId = Annotated[str, Path(pattern=ids.INTERACTION_ID, description="`int_…`, as the API issued it")]
MemoryId = Annotated[str, Path(pattern=ids.MEMORY_ID, description="`mem_…`, as the API issued it")]
EvalId = Annotated[str, Path(pattern=ids.EVAL_ID, description="`eval_…`, as the API issued it")]
EvalRunId = Annotated[str, Path(pattern=ids.EVAL_RUN_ID, description="`evr_…`, as the API issued it")]
WorkflowId = Annotated[str, Path(pattern=ids.WORKFLOW_ID, description="`wfl_…`, as the API issued it")]
TriggerId = Annotated[str, Path(pattern=ids.TRIGGER_ID, description="`trg_…`, as the API issued it")]
UserIdQuery = Annotated[
    str, Query(pattern=ids.USER_ID, description="The app's id for its end user (1–128 of `[A-Za-z0-9_.@:-]`)")
]

# The code of the 404 for a path parameter that does not match its pattern: the same code an unknown
# id of that shape gets from the store. (Tool and MCP server names never reach a key: they are looked
# up inside the agent's item, and any unknown name is that 404 already.)
NOT_FOUND: dict[str, str] = {
    "agent_id": "agent_not_found",
    "run_id": "run_not_found",
    "session_id": "session_not_found",
    "hook_id": "hook_not_found",
    "schedule_id": "schedule_not_found",
    "interaction_id": "interaction_not_found",
    "memory_id": "memory_not_found",
    "eval_id": "eval_not_found",
    "eval_run_id": "eval_run_not_found",
    "workflow_id": "workflow_not_found",
    "trigger_id": "trigger_not_found",
}

# A path parameter whose name other resources may also use (`key`): its 404 code by path prefix.
NOT_FOUND_UNDER: dict[str, dict[str, str]] = {"/v1/settings/": {"key": "setting_not_found"}}

AgentIdQuery = Annotated[str | None, Query(pattern=ids.AGENT_ID, description="Only this agent's")]
SessionIdQuery = Annotated[str | None, Query(pattern=ids.SESSION_ID, description="Only this session's")]
