"""The tenant's agents as one MCP server: `POST /v1/mcp`, streamable HTTP, stateless, JSON answers.

Each agent with `mcp: {enabled: true}` is a tool `{message, session_id?}`; a call IS a Stepwise run
(stepwise.runs.start), waited on through stepwise.runs.progress. A task of MCP's tasks utility (protocol
2025-11-25) is a run too: its task id is the run id, so tasks/get, tasks/result, tasks/cancel and
tasks/list read and cancel runs, and a run waiting on a human is `input_required`, answered through the
API's own routes (the status message says which and how).

Why not the SDK's server: its streamable HTTP transport is an ASGI app whose session manager runs a
task group for the life of the process, and answers through memory streams between tasks; a Lambda
invocation is one request in, one response out. What fits is the SDK's own wire types (`mcp_types`,
pydantic only, none of the transport): every request's params and every result go through them here,
and a stateless dispatch does the rest. No session id is issued, so nothing is kept between requests
and any execution environment can answer any request.

A blocking call waits at most CALL_WAIT (API Gateway ends a request at 30 s). When the request carries a
progress token the answer is a Server-Sent Events body: a progress notification per event the run wrote,
then the result (API Gateway buffers it, so they arrive together, but in order). A run still going, or
waiting on a person, is then a JSON-RPC error carrying its run id: follow it as a task.

How a run reads in MCP (a task, a tool result, a line of progress) is stepwise.protocols.mcp_runs.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import mcp_types as types
from aws_lambda_powertools import Logger
from pydantic import BaseModel, Field, ValidationError

from stepwise.agents import store as agents
from stepwise.agents.models import Agent
from stepwise.core import safejson
from stepwise.core.errors import ApiError, Conflict, Malformed, NotFound, Unprocessable
from stepwise.core.ids import AGENT_ID, RUN_ID, SESSION_ID
from stepwise.core.schema import Strict
from stepwise.interactions.models import Interaction
from stepwise.protocols import mcp_runs
from stepwise.runs import cancel, progress, start
from stepwise.runs.models import MESSAGE_LIMIT, Run, RunCreate, RunEvent
from stepwise.runs.ports import stores

# Newest first: what `initialize` may settle on. Tasks exist from 2025-11-25 on.
PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
LATEST = PROTOCOL_VERSIONS[0]
TASKS_SINCE = "2025-11-25"
DEFAULT_VERSION = "2025-03-26"  # what a request without MCP-Protocol-Version speaks (the spec says so)
SERVER_VERSION = "0.1.0"

CALL_WAIT = 24.0  # seconds a blocking tools/call or a tasks/result waits, within API Gateway's 30 s
PAGE = 50  # tools and tasks per page
SLUG_LENGTH = 64  # of a tool name's readable part; the agent id after it makes the name unique

# JSON-RPC codes. The MCP spec leaves -32000..-32019 to implementations; the SDK keeps -32000/-32001.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
UNSUPPORTED_PROTOCOL_VERSION = -32022
STILL_RUNNING = -32010  # the run goes on (or waits on a person) after the wait: follow it as a task
RUN_REFUSED = -32011  # the run could not start (session busy, agent paused, quota): `data.code` says

logger = Logger(service="stepwise")

RELATED_TASK = "io.modelcontextprotocol/related-task"
IMMEDIATE_RESPONSE = "io.modelcontextprotocol/model-immediate-response"
_AGENT_SUFFIX = re.compile(r"(agt_[0-9A-HJKMNP-TV-Z]{26})$")

INSTRUCTIONS = (
    "Each tool is a Stepwise agent. Call it with a `message`; its answer is the agent's final reply, "
    "with `run_id` and `session_id` in the structured content. Pass that `session_id` to continue the "
    "conversation. Long runs: call as a task (tasks/get, tasks/result), or follow the run id an error "
    "carries."
)
MESSAGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "minLength": 1, "description": "What to ask the agent"},
        "session_id": {
            "type": "string",
            "pattern": SESSION_ID,
            "description": "Continue this conversation (the session_id of an earlier answer)",
        },
    },
    "required": ["message"],
    "additionalProperties": False,
}


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


class ToolInput(Strict):
    """A tool call's arguments: MESSAGE_SCHEMA, enforced."""

    message: str = Field(min_length=1, max_length=MESSAGE_LIMIT)
    session_id: str | None = Field(default=None, pattern=SESSION_ID)


@dataclass(frozen=True)
class Reply:
    """What the route answers: a status, and a JSON or SSE body (none for 202)."""

    status: int
    body: str | None = None
    content_type: str | None = None


@dataclass
class Call:
    tenant_id: str
    version: str
    params: dict[str, Any]
    progress_token: str | int | None
    notes: list[dict[str, Any]] = field(default_factory=list)  # notifications to send before the answer


def handle(tenant_id: str, body: str | None, headers: Mapping[str, str]) -> Reply:
    """One HTTP request of the streamable HTTP transport: one JSON-RPC message in, its answer out."""
    header_version = headers.get("mcp-protocol-version")
    if header_version and header_version not in PROTOCOL_VERSIONS:
        # The transport's rule (400); the supported list lets a newer client fall back to initialize.
        supported = {"supported": list(PROTOCOL_VERSIONS), "requested": header_version}
        return _http_error(400, UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version", supported)
    try:
        message = safejson.loads(body or "")
    except (ValueError, safejson.TooDeep):
        return _http_error(400, PARSE_ERROR, "Parse error: the body is not JSON")
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        # A list is a batch, which the protocol dropped in 2025-06-18.
        return _http_error(400, INVALID_REQUEST, "Invalid Request: send one JSON-RPC 2.0 message")
    if "method" not in message or "id" not in message:
        # A notification (initialized, cancelled, progress) or a response: a stateless server keeps
        # nothing, so each is accepted and done.
        return Reply(202)
    request_id, method, params = message["id"], message["method"], message.get("params")
    if isinstance(request_id, bool) or not isinstance(request_id, int | str) or not isinstance(method, str):
        return _http_error(400, INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
    if params is not None and not isinstance(params, dict):
        return _answer([], _error(request_id, INVALID_PARAMS, "Invalid params: params must be an object"))
    params = params or {}
    call = Call(tenant_id, header_version or DEFAULT_VERSION, params, _progress_token(params))
    accepts_sse = "text/event-stream" in headers.get("accept", "")
    try:
        handler = METHODS.get(method)
        if handler is None:
            raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")
        answer = {"jsonrpc": "2.0", "id": request_id, "result": handler(call)}
    except RpcError as exc:
        answer = _error(request_id, exc.code, exc.message, exc.data)
    except ApiError as exc:  # what no handler translated: still the protocol's shape, never a bare 4xx
        code = INVALID_PARAMS if exc.status in (400, 404, 422) else INTERNAL_ERROR
        answer = _error(request_id, code, exc.message, {"code": exc.code, "details": exc.details})
    except Exception:  # a bug of ours: logged, and an MCP error rather than an HTTP 500
        logger.exception("MCP request failed", extra={"method": method})
        answer = _error(request_id, INTERNAL_ERROR, "Internal error; it was logged")
    return _answer(call.notes if accepts_sse else [], answer)


# --- Lifecycle and tools ---------------------------------------------------------------------------


def _initialize(call: Call) -> dict[str, Any]:
    asked = _params(types.InitializeRequestParams, call.params)
    version = asked.protocol_version if asked.protocol_version in PROTOCOL_VERSIONS else LATEST
    capabilities = types.ServerCapabilities(tools=types.ToolsCapability(list_changed=False))
    if version >= TASKS_SINCE:
        capabilities.tasks = types.ServerTasksCapability(
            list=types.TasksListCapability(),
            cancel=types.TasksCancelCapability(),
            requests=types.ServerTasksRequestsCapability(
                tools=types.TasksToolsCapability(call=types.TasksCallCapability())
            ),
        )
    result = types.InitializeResult(
        protocol_version=version,
        capabilities=capabilities,
        server_info=types.Implementation(name="stepwise", title="Stepwise agents", version=SERVER_VERSION),
        instructions=INSTRUCTIONS,
    )
    return mcp_runs.dump(result)


def _ping(call: Call) -> dict[str, Any]:
    return {}


def tool_name(name: str, agent_id: str) -> str:
    """A valid MCP tool name (`[A-Za-z0-9_.-]`, at most 128) that people and models can read, unique
    because it ends with the agent id; the id alone decides which agent a call reaches."""
    slug = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")[:SLUG_LENGTH].strip("_")
    return f"{slug or 'agent'}__{agent_id}"


def _tool(agent: Agent, version: str) -> types.Tool:
    return types.Tool(
        name=tool_name(agent.name, agent.agent_id),
        title=agent.name,
        description=(
            f"Ask the Stepwise agent “{agent.name}”. It works on the message (possibly over several "
            "steps and tools) and answers with its final reply."
        ),
        input_schema=MESSAGE_SCHEMA,
        output_schema=mcp_runs.ANSWER_SCHEMA,
        execution=types.ToolExecution(task_support="optional") if version >= TASKS_SINCE else None,
    )


def _tools_list(call: Call) -> dict[str, Any]:
    asked = _params(types.PaginatedRequestParams, call.params)
    after = _decode_cursor(asked.cursor, AGENT_ID) if asked.cursor else ""
    enabled = sorted(
        (a for a in agents.list_all(call.tenant_id) if a.mcp.enabled and a.agent_id > after),
        key=lambda a: a.agent_id,
    )
    page = enabled[:PAGE]
    more = len(enabled) > PAGE
    result = types.ListToolsResult(
        tools=[_tool(a, call.version) for a in page],
        next_cursor=_encode_cursor(page[-1].agent_id) if more else None,
    )
    return mcp_runs.dump(result)


def _agent_for(tenant_id: str, name: str) -> Agent:
    """The enabled agent a tool name names; an unknown, closed or other tenant's agent is the
    protocol's unknown tool."""
    unknown = RpcError(INVALID_PARAMS, f"Unknown tool: {name}")
    found = _AGENT_SUFFIX.search(name)
    if found is None:
        raise unknown
    try:
        agent = agents.get(tenant_id, found.group(1))
    except NotFound:
        raise unknown from None
    if not agent.mcp.enabled:
        raise unknown
    return agent


def _tools_call(call: Call) -> dict[str, Any]:
    began = time.monotonic()
    asked = _params(types.CallToolRequestParams, call.params)
    agent = _agent_for(call.tenant_id, asked.name)
    try:
        arguments = ToolInput.model_validate(asked.arguments or {})
        # RunCreate's own rules too (a message's bytes, not only its characters, must fit an item).
        body = RunCreate(message=arguments.message, session_id=arguments.session_id)
    except ValidationError as exc:
        raise RpcError(INVALID_PARAMS, f"Invalid arguments for tool {asked.name}", _errors(exc)) from None
    # Before 2025-11-25 there are no tasks: the spec has a `task` field ignored where undeclared.
    as_task = asked.task is not None and call.version >= TASKS_SINCE
    try:
        run = start.start_run(call.tenant_id, agent.agent_id, body)
    except (NotFound, Unprocessable, Malformed) as exc:
        raise RpcError(INVALID_PARAMS, exc.message, {"code": exc.code, "details": exc.details}) from None
    except ApiError as exc:
        if as_task:
            raise RpcError(RUN_REFUSED, exc.message, {"code": exc.code, "details": exc.details}) from None
        text = f"The run could not start: {exc.code}: {exc.message}"
        return mcp_runs.dump(types.CallToolResult(content=[mcp_runs.text(text)], is_error=True))
    if as_task:
        # Answered at once: the task is the run, which goes on without this request.
        created = types.CreateTaskResult(
            task=mcp_runs.task(run, []),
            _meta={IMMEDIATE_RESPONSE: f"Started run {run.run_id} of {agent.name}; it is task {run.run_id}."},
        )
        return mcp_runs.with_ttl(mcp_runs.dump(created), "task")
    return _wait_for_answer(call, run, CALL_WAIT - (time.monotonic() - began))


def _wait_for_answer(call: Call, run: Run, wait: float) -> dict[str, Any]:
    report: Callable[[list[RunEvent]], None] | None = None
    if call.progress_token is not None:
        token = call.progress_token
        call.notes.append(_progress(token, 0, f"run {run.run_id} started (session {run.session_id})"))

        def report(events: list[RunEvent]) -> None:
            for event in events:
                if event.type not in mcp_runs.QUIET_EVENTS:
                    call.notes.append(_progress(token, event.seq, mcp_runs.describe(event)))

    found = progress.settle(call.tenant_id, run.run_id, wait, seen=report)
    if found.run.done:
        return mcp_runs.dump(mcp_runs.tool_result(found.run))
    task = mcp_runs.task_dump(found.run, found.pending)
    if found.pending:
        what = f"run {run.run_id} waits on someone: {task['statusMessage']}"
    else:
        what = f"run {run.run_id} is still {found.run.status} after {wait:.0f} s"
    raise RpcError(
        STILL_RUNNING,
        f"{what}. Follow it as task {run.run_id} (tasks/get, tasks/result) or at GET /v1/runs/{run.run_id}",
        {"run_id": run.run_id, "session_id": run.session_id, "task": task},
    )


# --- Tasks: a task is a run ------------------------------------------------------------------------


def _task_id(params: dict[str, Any]) -> str:
    task_id = _params(types.GetTaskRequestParams, params).task_id
    if not re.match(RUN_ID, task_id):
        raise _task_not_found()
    return task_id


def _task_not_found() -> RpcError:
    return RpcError(INVALID_PARAMS, "Failed to retrieve task: Task not found")


def _now(tenant_id: str, task_id: str) -> progress.Progress:
    try:
        return progress.now(tenant_id, task_id)
    except NotFound:
        raise _task_not_found() from None


def _tasks_get(call: Call) -> dict[str, Any]:
    found = _now(call.tenant_id, _task_id(call.params))
    return mcp_runs.task_dump(found.run, found.pending)  # GetTaskResult: the task's own fields


def _tasks_result(call: Call) -> dict[str, Any]:
    task_id = _task_id(call.params)
    try:
        found = progress.settle(call.tenant_id, task_id, CALL_WAIT, ended=True)
    except NotFound:
        raise _task_not_found() from None
    if not found.run.done:
        task = mcp_runs.task_dump(found.run, found.pending)
        raise RpcError(
            STILL_RUNNING,
            f"task {task_id} is still {task['status']} after {CALL_WAIT:.0f} s: {task['statusMessage']}. "
            "Call tasks/result again, or poll tasks/get",
            {"task": task},
        )
    result = mcp_runs.tool_result(found.run)
    result.meta = {RELATED_TASK: {"taskId": task_id}}
    return mcp_runs.dump(result)


def _tasks_cancel(call: Call) -> dict[str, Any]:
    task_id = _task_id(call.params)
    try:
        run = cancel.cancel(call.tenant_id, task_id, reason="cancelled through MCP tasks/cancel")
    except NotFound:
        raise _task_not_found() from None
    except Conflict as exc:
        raise RpcError(INVALID_PARAMS, f"Cannot cancel task: {exc.message}") from None
    return mcp_runs.task_dump(run, [])  # CancelTaskResult: the task's own fields


def _open_waits(tenant_id: str, run: Run) -> list[Interaction]:
    return progress.pending(tenant_id, run) if run.status == "waiting" else []


def _tasks_list(call: Call) -> dict[str, Any]:
    asked = _params(types.PaginatedRequestParams, call.params)
    try:
        page, token = stores().runs.list_runs(call.tenant_id, limit=PAGE, next_token=asked.cursor)
    except Malformed:
        raise RpcError(INVALID_PARAMS, "Invalid cursor") from None
    # Only a waiting run can be input_required: only its waits are read.
    tasks = [mcp_runs.task(r, _open_waits(call.tenant_id, r)) for r in page]
    listed = mcp_runs.dump(types.ListTasksResult(tasks=tasks, next_cursor=token))
    for task in listed["tasks"]:
        task.setdefault("ttl", None)
    return listed


# --- Wire helpers ----------------------------------------------------------------------------------

M = TypeVar("M", bound=BaseModel)

METHODS: dict[str, Callable[[Call], dict[str, Any]]] = {
    "initialize": _initialize,
    "ping": _ping,
    "tools/list": _tools_list,
    "tools/call": _tools_call,
    "tasks/get": _tasks_get,
    "tasks/result": _tasks_result,
    "tasks/cancel": _tasks_cancel,
    "tasks/list": _tasks_list,
}


def _params(model: type[M], params: dict[str, Any]) -> M:
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        raise RpcError(INVALID_PARAMS, "Invalid params", _errors(exc)) from None


def _errors(exc: ValidationError) -> list[dict[str, Any]]:
    return [
        {"loc": [str(p) for p in e["loc"]], "msg": e["msg"], "type": e["type"]}
        for e in exc.errors(include_url=False, include_context=False, include_input=False)
    ]


def _progress_token(params: dict[str, Any]) -> str | int | None:
    meta = params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return token if isinstance(token, str | int) and not isinstance(token, bool) else None


def _progress(token: str | int, progress_value: int, message: str) -> dict[str, Any]:
    params = types.ProgressNotificationParams(progress_token=token, progress=progress_value, message=message)
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": mcp_runs.dump(params)}


def _encode_cursor(value: str) -> str:
    return base64.urlsafe_b64encode(value.encode()).decode()


def _decode_cursor(cursor: str, pattern: str) -> str:
    try:
        value = base64.urlsafe_b64decode(cursor.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        value = ""
    if not re.match(pattern, value):
        raise RpcError(INVALID_PARAMS, "Invalid cursor")
    return value


def _error(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def _http_error(status: int, code: int, message: str, data: Any = None) -> Reply:
    return Reply(status, json.dumps(_error(None, code, message, data)), "application/json")


def _answer(notes: list[dict[str, Any]], answer: dict[str, Any]) -> Reply:
    if not notes:
        return Reply(200, json.dumps(answer, ensure_ascii=False), "application/json")
    frames = [*notes, answer]
    body = "".join(f"event: message\ndata: {json.dumps(f, ensure_ascii=False)}\n\n" for f in frames)
    return Reply(200, body, "text/event-stream")
