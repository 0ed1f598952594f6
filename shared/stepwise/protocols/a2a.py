"""A2A 1.0 (the JSON-RPC binding, SSE for streams) as the official `a2a-sdk` and `@a2a-js/sdk` 1.x
clients speak it: an A2A task IS a Stepwise run and its contextId the run's session. This module only
translates; runs start through stepwise.runs.start, are answered through stepwise.runs.answers.respond,
cancelled through stepwise.runs.cancel, followed through stepwise.runs.progress and the event log.

The wire is protobuf's JSON mapping of a2a.proto: camelCase fields, enums by name (`TASK_STATE_WORKING`,
`ROLE_USER`), a Part is one of `text` / `raw` (base64) / `url` / `data`. Errors are JSON-RPC errors with
the A2A codes (-32001 TaskNotFound, -32002 TaskNotCancelable, ...) and, in `data`, a google.rpc.ErrorInfo
whose `metadata.code` is Stepwise's stable code (`already_answered`, `answer_expected`, ...).

API Gateway buffers a response, so a stream is one bounded response (STREAM_WAIT): its SSE events carry
the run's event-log seq as `id:` and in `metadata.stepwise.seq`. SubscribeToTask answers the task as it
stands first (with the seq it was read at), then the events after it; with `Last-Event-ID` it resumes
right after that seq instead. Either way nothing is lost and nothing repeats.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from stepwise.agents.models import Agent
from stepwise.approvals.display import pretty_arguments
from stepwise.core import safejson
from stepwise.core.errors import ApiError, Conflict, Gone, NotFound
from stepwise.core.ids import derived_id
from stepwise.core.observability import logger
from stepwise.core.schema import utcnow
from stepwise.interactions.models import Interaction
from stepwise.runs import answers, eventlog, progress
from stepwise.runs.models import Run, RunEvent
from stepwise.runs.ports import stores

M = TypeVar("M", bound=BaseModel)

PROTOCOL_VERSION = "1.0"
BLOCK_WAIT = 25.0  # a blocking SendMessage answers within API Gateway's 30 s
STREAM_WAIT = 20.0  # a stream response ends by then; the client resubscribes
PAGE_SIZE = 50
MAX_PAGE_SIZE = 100
ANSWER_ARTIFACT = "answer"
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
NOTIFICATION_TOKEN_HEADER = "X-A2A-Notification-Token"
MAX_PUSH_CONFIGS = 10  # per task
URL_FILE_LIMIT = 5 * 1024 * 1024  # bytes of a file part fetched by URL, as an inline attachment's cap

STATES = {
    "queued": "TASK_STATE_SUBMITTED",
    "running": "TASK_STATE_WORKING",
    "waiting": "TASK_STATE_WORKING",  # input-required only when a human wait is open (see state_of)
    "succeeded": "TASK_STATE_COMPLETED",
    "failed": "TASK_STATE_FAILED",
    "timed_out": "TASK_STATE_FAILED",
    "cancelled": "TASK_STATE_CANCELED",
}
INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
APPROVAL_ANSWER = '{"decision": "approve" | "deny", "reason"?}'
CLIENT_TOOL_ANSWER = '{"result": ...}'
TERMINAL_STATES = frozenset({"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED"})
# Where a stream ends: the task is done, or waits on the client (A2A's "interrupted" states).
STREAM_ENDS = TERMINAL_STATES | {INPUT_REQUIRED}


# --- Errors ----------------------------------------------------------------------------------------


class Fault(Exception):
    """A JSON-RPC error as A2A defines it; `code` is Stepwise's stable code, sent in `data`."""

    def __init__(self, rpc_code: int, reason: str, message: str, code: str) -> None:
        super().__init__(message)
        self.rpc_code = rpc_code
        self.reason = reason
        self.message = message
        self.code = code

    def body(self, request_id: Any) -> dict[str, Any]:
        info = {
            "@type": ERROR_INFO,
            "reason": self.reason,
            "domain": "stepwise",
            "metadata": {"code": self.code},
        }
        error = {"code": self.rpc_code, "message": self.message, "data": [info]}
        return {"jsonrpc": "2.0", "id": request_id, "error": error}


def task_not_found(task_id: str) -> Fault:
    return Fault(-32001, "TASK_NOT_FOUND", f"task {task_id} not found", "task_not_found")


def invalid_params(message: str, code: str = "invalid_params") -> Fault:
    return Fault(-32602, "INVALID_PARAMS", message, code)


def unsupported(message: str, code: str) -> Fault:
    return Fault(-32004, "UNSUPPORTED_OPERATION", message, code)


def from_api_error(exc: ApiError) -> Fault:
    """A Stepwise error met while serving a call, in A2A's terms (by its HTTP meaning)."""
    if isinstance(exc, Conflict | Gone):
        return unsupported(exc.message, exc.code)
    if exc.status in (400, 404, 413, 422):
        return invalid_params(exc.message, exc.code)
    return Fault(-32603, "INTERNAL_ERROR", exc.message, exc.code)


# --- Requests --------------------------------------------------------------------------------------


class Wire(BaseModel):
    """A message of a2a.proto in its JSON mapping; unknown fields are ignored, as protobuf's parser does."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class PartIn(Wire):
    text: str | None = None
    raw: str | None = None
    url: str | None = None
    data: Any = None
    filename: str | None = None
    media_type: str | None = None


class MessageIn(Wire):
    message_id: str = Field(min_length=1, max_length=256)
    context_id: str | None = None
    task_id: str | None = None
    role: str | None = None
    parts: list[PartIn] = Field(min_length=1, max_length=100)
    metadata: dict[str, Any] | None = None


class AuthenticationIn(Wire):
    scheme: str = Field(min_length=1, max_length=64)
    credentials: str | None = Field(default=None, max_length=4096)


class PushConfigIn(Wire):
    task_id: str | None = None
    id: str | None = Field(default=None, max_length=128)
    url: str = Field(min_length=1, max_length=2048)
    token: str | None = Field(default=None, max_length=4096)
    authentication: AuthenticationIn | None = None


class SendConfig(Wire):
    return_immediately: bool = False
    blocking: bool | None = None  # earlier drafts: blocking false asked not to wait
    history_length: int | None = Field(default=None, ge=0)
    task_push_notification_config: PushConfigIn | None = None


class SendParams(Wire):
    message: MessageIn
    configuration: SendConfig | None = None
    metadata: dict[str, Any] | None = None


class TaskParams(Wire):
    id: str = Field(min_length=1)
    history_length: int | None = Field(default=None, ge=0)


class ListParams(Wire):
    context_id: str | None = None
    status: str | None = None
    page_size: int | None = Field(default=None, ge=0)
    page_token: str | None = None
    history_length: int | None = Field(default=None, ge=0)
    include_artifacts: bool = False


class PushRef(Wire):
    task_id: str = Field(min_length=1)
    id: str = Field(min_length=1)


class PushListParams(Wire):
    task_id: str = Field(min_length=1)


def _params(model: type[M], params: Any) -> M:
    try:
        return model.model_validate(params if params is not None else {})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise invalid_params(f"invalid params: {where}: {first.get('msg')}") from None


# --- Tasks as A2A shows them ----------------------------------------------------------------------


def _stamp(moment: datetime | None) -> str:
    return (moment or utcnow()).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def state_of(run: Run, pending: list[Interaction]) -> str:
    """A run waiting on a child run that works is working; input-required needs an open human wait."""
    if pending:
        return INPUT_REQUIRED
    return STATES[run.status]


def _agent_message(run: Run, suffix: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "messageId": f"{run.run_id}-{suffix}",
        "contextId": run.session_id,
        "taskId": run.run_id,
        "role": "ROLE_AGENT",
        "parts": parts,
    }


def expected_answer(interaction: Interaction) -> dict[str, Any]:
    if interaction.kind == "approval":
        return {
            "interactionId": interaction.interaction_id,
            "decision": "approve | deny",
            "reason": "optional",
        }
    return {"interactionId": interaction.interaction_id, "result": "the tool's result"}


def waits_message(run: Run, pending: list[Interaction]) -> dict[str, Any]:
    """The input-required status message: what is awaited, and how to answer it."""
    lines = []
    described = []
    for wait in pending:
        what = "approval to call" if wait.kind == "approval" else "the result of the client tool"
        lines.append(
            f"Waiting for {what} {wait.tool_name} (interaction {wait.interaction_id}) with arguments:\n"
            f"{pretty_arguments(wait.arguments)}"
        )
        described.append(
            {
                "interactionId": wait.interaction_id,
                "kind": wait.kind,
                "tool": wait.tool_name,
                "arguments": wait.arguments,
                "runId": wait.run_id,
                "answer": expected_answer(wait),
            }
        )
    lines.append(
        f"Answer with a message on this task carrying a data part: {APPROVAL_ANSWER} for an approval, "
        f'{CLIENT_TOOL_ANSWER} for a client tool; name "interactionId" when several wait.'
    )
    suffix = "input-" + "-".join(w.interaction_id for w in pending)
    return _agent_message(run, suffix, [{"text": "\n\n".join(lines)}, {"data": {"waitingFor": described}}])


def status_of(run: Run, pending: list[Interaction]) -> dict[str, Any]:
    state = state_of(run, pending)
    status: dict[str, Any] = {"state": state, "timestamp": _stamp(run.finished_at)}
    if state == INPUT_REQUIRED:
        status["message"] = waits_message(run, pending)
    elif state in ("TASK_STATE_FAILED", "TASK_STATE_CANCELED") and run.error is not None:
        status["message"] = _agent_message(run, "status", [{"text": run.error.message}])
    return status


def answer_artifact(output: str) -> dict[str, Any]:
    return {"artifactId": ANSWER_ARTIFACT, "name": "answer", "parts": [{"text": output}]}


def _history(run: Run, history_length: int | None) -> list[dict[str, Any]]:
    a2a_meta = run.metadata.get("a2a") if isinstance(run.metadata.get("a2a"), dict) else {}
    message_id = str((a2a_meta or {}).get("message_id") or f"{run.run_id}-input")
    history = [
        {
            "messageId": message_id,
            "contextId": run.session_id,
            "taskId": run.run_id,
            "role": "ROLE_USER",
            "parts": [{"text": run.input}],
        }
    ]
    if run.status == "succeeded" and run.output is not None:
        history.append(_agent_message(run, "output", [{"text": run.output}]))
    if history_length is not None:
        history = history[-history_length:] if history_length else []
    return history


def task(
    run: Run,
    pending: list[Interaction],
    seq: int | None = None,
    *,
    history_length: int | None = None,
    artifacts: bool = True,
) -> dict[str, Any]:
    found: dict[str, Any] = {
        "id": run.run_id,
        "contextId": run.session_id,
        "status": status_of(run, pending),
        "history": _history(run, history_length),
        "metadata": {"stepwise": {"runId": run.run_id, "agentId": run.agent_id, "runStatus": run.status}},
    }
    if seq is not None:
        found["metadata"]["stepwise"]["seq"] = seq
    if artifacts and run.status == "succeeded" and run.output is not None:
        found["artifacts"] = [answer_artifact(run.output)]
    return found


def task_of(now: progress.Progress, history_length: int | None = None) -> dict[str, Any]:
    return task(now.run, now.pending, now.next, history_length=history_length)


# --- Looking tasks up ------------------------------------------------------------------------------


def _run(tenant_id: str, agent_id: str, task_id: str) -> Run:
    """The task's run: this tenant's, of this agent. Anything else is the same TaskNotFound."""
    try:
        run = stores().runs.get(tenant_id, task_id)
    except NotFound:
        raise task_not_found(task_id) from None
    if run.agent_id != agent_id:
        raise task_not_found(task_id)
    return run


def _now(tenant_id: str, agent_id: str, task_id: str) -> progress.Progress:
    _run(tenant_id, agent_id, task_id)
    return progress.now(tenant_id, task_id)


# --- SendMessage -----------------------------------------------------------------------------------


def _data_answer(message: MessageIn) -> dict[str, Any] | None:
    for part in message.parts:
        if isinstance(part.data, dict) and ("decision" in part.data or "result" in part.data):
            return part.data
    return None


def _fetch_url(url: str) -> bytes:
    """A file part given by URL, fetched through the SSRF guard (what the run's tools may reach)."""
    from stepwise.net.outbound import OutboundRefused
    from stepwise.net.ssrf import guarded_client

    try:
        with guarded_client(
            timeout=10.0, max_response_bytes=URL_FILE_LIMIT, follow_redirects=False
        ) as client:
            response = client.get(url)
            response.raise_for_status()
            return response.content
    except OutboundRefused as exc:
        raise invalid_params(f"the file at {url} cannot be fetched: {exc}", "file_url_refused") from None
    except Exception as exc:  # noqa: BLE001 - any network failure is the caller's URL, not our error
        raise invalid_params(
            f"the file at {url} cannot be fetched: {type(exc).__name__}", "file_url_failed"
        ) from None


def run_input(message: MessageIn) -> tuple[str, list[dict[str, Any]]]:
    """The run's message and attachments: text parts as text, data parts as JSON text, files as
    attachments (bytes inline, or fetched by URL through the SSRF guard)."""
    texts: list[str] = []
    files: list[dict[str, Any]] = []
    for index, part in enumerate(message.parts):
        name = part.filename or f"file-{index + 1}"
        media = part.media_type or "application/octet-stream"
        if part.text is not None:
            texts.append(part.text)
        elif part.raw is not None:
            files.append({"name": name, "content_type": media, "data": part.raw})
        elif part.url is not None:
            data = base64.b64encode(_fetch_url(part.url)).decode()
            files.append({"name": name, "content_type": media, "data": data})
        elif "data" in part.model_fields_set:
            texts.append(json.dumps(part.data, ensure_ascii=False))
        else:
            raise invalid_params(f"message.parts[{index}] has none of text, raw, url or data", "empty_part")
    text = "\n\n".join(t for t in texts if t)
    if not text:
        text = "Attached: " + ", ".join(f["name"] for f in files) if files else ""
    if not text:
        raise invalid_params("the message has no content", "empty_message")
    return text, files


def _start(tenant_id: str, agent_id: str, params: SendParams, lambda_context: Any) -> str:
    from stepwise.runs import start
    from stepwise.runs.models import RunCreate

    message = params.message
    text, files = run_input(message)
    metadata = {**(params.metadata or {}), "a2a": {"message_id": message.message_id}}
    try:
        body = RunCreate.model_validate(
            {"message": text, "session_id": message.context_id, "metadata": metadata, "attachments": files}
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        if where == "session_id":
            raise invalid_params(
                "contextId is not one this agent issued; omit it to start a new context"
            ) from None
        raise invalid_params(f"the message cannot start a task: {where}: {first.get('msg')}") from None
    if message.context_id is not None:
        try:
            session = stores().sessions.get(tenant_id, message.context_id)
        except NotFound:
            raise invalid_params(f"context {message.context_id} not found", "context_not_found") from None
        if session.agent_id != agent_id:
            raise invalid_params(f"context {message.context_id} not found", "context_not_found")
    # The messageId is the start's idempotency key: a client retrying the same message (the A2A way
    # of retrying) gets the task it started, never a second run.
    accepted = start.start_run_once(
        tenant_id, agent_id, body, key=f"a2a:{message.message_id}", lambda_context=lambda_context
    )
    return str(accepted["run_id"])


def _choose_wait(tenant_id: str, run: Run, answer: dict[str, Any]) -> Interaction:
    named = answer.get("interactionId")
    if named is not None:
        if not isinstance(named, str):
            raise invalid_params("interactionId must be a string", "invalid_interaction_id")
        try:
            interaction = stores().interactions.get(tenant_id, named)
        except NotFound:
            raise invalid_params(
                f"interaction {named} is not one of this task's", "interaction_not_found"
            ) from None
        if run.run_id not in (interaction.run_id, _root_of(tenant_id, interaction.run_id)):
            raise invalid_params(f"interaction {named} is not one of this task's", "interaction_not_found")
        return interaction
    open_ = progress.pending(tenant_id, run)
    if len(open_) > 1:
        ids = ", ".join(i.interaction_id for i in open_)
        raise invalid_params(
            f"several interactions wait ({ids}); name one with interactionId in the data part",
            "interaction_ambiguous",
        )
    if open_:
        return open_[0]
    # Nothing waits any more: answering the task's last wait again is what the client meant, and
    # respond says why it cannot be (answered already: a conflict; expired: closed).
    own = [i for i in stores().interactions.for_run(tenant_id, run.run_id) if i.kind in progress.HUMAN_KINDS]
    if not own:
        if run.done:
            raise unsupported(
                f"task {run.run_id} is {STATES[run.status]}: it takes no input", "task_terminal"
            )
        raise unsupported(f"task {run.run_id} waits on no input", "no_pending_input")
    return max(own, key=lambda i: (i.created_at, i.interaction_id))


def _root_of(tenant_id: str, run_id: str) -> str | None:
    try:
        return stores().runs.get(tenant_id, run_id).root_run_id
    except NotFound:
        return None


def _answer(tenant_id: str, run: Run, message: MessageIn, answer: dict[str, Any]) -> None:
    wait = _choose_wait(tenant_id, run, answer)
    if wait.kind == "approval":
        decision = answer.get("decision")
        if decision not in ("approve", "deny"):
            raise invalid_params(
                f"interaction {wait.interaction_id} is an approval: answer with {APPROVAL_ANSWER}",
                "wrong_answer_kind",
            )
        reason = answer.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise invalid_params("reason must be a string", "invalid_reason")
        decided: dict[str, Any] = {"approved": decision == "approve", "reason": reason}
    else:
        if "result" not in answer:
            raise invalid_params(
                f'interaction {wait.interaction_id} is a client tool: answer with {{"result": ...}}',
                "wrong_answer_kind",
            )
        decided = {"tool_call_id": wait.tool_call_id, "outcome": "completed", "output": answer["result"]}
    try:
        # The messageId keys the answer: the same message sent again is the same answer, not a conflict.
        answers.respond(tenant_id, wait.interaction_id, decided, key=f"a2a:{message.message_id}", by="a2a")
    except (Conflict, Gone) as exc:
        code = "already_answered" if isinstance(exc, Conflict) else "interaction_closed"
        raise unsupported(exc.message, code) from None


def send(
    tenant_id: str,
    agent_id: str,
    params: SendParams,
    *,
    lambda_context: Any = None,
    blocking: bool = True,
) -> str:
    """Start a task, continue its context, or answer what it waits on. The task's id."""
    message = params.message
    if message.task_id is None:
        return _start(tenant_id, agent_id, params, lambda_context)
    run = _run(tenant_id, agent_id, message.task_id)
    if message.context_id is not None and message.context_id != run.session_id:
        raise invalid_params(f"task {run.run_id} is not in context {message.context_id}", "context_mismatch")
    answer = _data_answer(message)
    if answer is not None:
        # Even on a finished task: answering its wait again is a conflict the client is told of as
        # such (answered already, or closed when the run ended), not as a terminal task.
        _answer(tenant_id, run, message, answer)
        return run.run_id
    if run.done:
        raise unsupported(
            f"task {run.run_id} is {STATES[run.status]}; to go on, send the message with contextId "
            f"{run.session_id} and no taskId",
            "task_terminal",
        )
    if progress.pending(tenant_id, run):
        raise invalid_params(
            f"task {run.run_id} is input-required: answer with a data part {APPROVAL_ANSWER} for an "
            f'approval or {CLIENT_TOOL_ANSWER} for a client tool (with "interactionId" when several wait); '
            "text is not an answer",
            "answer_expected",
        )
    raise unsupported(f"task {run.run_id} is working; wait for it, or cancel it", "task_working")


def _blocking(config: SendConfig | None) -> bool:
    if config is None:
        return True
    if config.return_immediately:
        return False
    return config.blocking is not False


# --- Streams ---------------------------------------------------------------------------------------


@dataclass
class Translator:
    """The run's event log as A2A stream events, each carrying the seq it came from."""

    tenant_id: str
    run: Run
    state: str | None = None
    out: list[tuple[int, dict[str, Any]]] = field(default_factory=list)

    def _status(self, seq: int, status: dict[str, Any]) -> None:
        self.state = status["state"]
        event = {
            "taskId": self.run.run_id,
            "contextId": self.run.session_id,
            "status": status,
            "metadata": {"stepwise": {"seq": seq}},
        }
        self.out.append((seq, {"statusUpdate": event}))

    def _refresh(self) -> tuple[Run, list[Interaction]]:
        run = stores().runs.get(self.tenant_id, self.run.run_id)
        self.run = run
        return run, progress.pending(self.tenant_id, run)

    def feed(self, event: RunEvent) -> None:
        seq, kind = event.seq, event.type
        if kind == "run_started" and self.state != "TASK_STATE_WORKING":
            self._status(seq, {"state": "TASK_STATE_WORKING", "timestamp": _stamp(event.at)})
        elif kind in ("approval_requested", "client_tool_requested"):
            run, pending = self._refresh()
            if pending:
                self._status(seq, status_of(run, pending))
        elif kind in ("approval_decided", "client_tool_answered"):
            run, pending = self._refresh()
            self._status(
                seq,
                status_of(run, pending)
                if pending
                else {"state": "TASK_STATE_WORKING", "timestamp": _stamp(event.at)},
            )
        elif kind == "run_completed":
            output = event.data.get("output")
            if isinstance(output, str):
                artifact = {
                    "taskId": self.run.run_id,
                    "contextId": self.run.session_id,
                    "artifact": answer_artifact(output),
                    "append": False,
                    "lastChunk": True,
                    "metadata": {"stepwise": {"seq": seq}},
                }
                self.out.append((seq, {"artifactUpdate": artifact}))
            self._status(seq, {"state": "TASK_STATE_COMPLETED", "timestamp": _stamp(event.at)})
        elif kind in ("run_failed", "run_cancelled"):
            run, _ = self._refresh()
            self._status(seq, status_of(run, []))


def follow(
    tenant_id: str, run: Run, after: int, state: str | None, wait: float = STREAM_WAIT
) -> list[tuple[int, dict[str, Any]]]:
    """The stream events after seq `after`, until the task ends or waits on the client, at most `wait`
    seconds (then the response ends and the client resubscribes)."""
    deadline = time.monotonic() + wait
    translator = Translator(tenant_id, run, state)
    cursor = after
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        page = eventlog.read(tenant_id, run.run_id, cursor, remaining)
        for event in page.events:
            translator.feed(event)
        cursor = page.next
        if page.done or translator.state in STREAM_ENDS:
            break
    return translator.out


def sse(request_id: Any, events: list[tuple[int, dict[str, Any]]]) -> str:
    lines = ["retry: 1000", ""]
    for seq, result in events:
        data = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}, ensure_ascii=False)
        lines += [f"id: {seq}", f"data: {data}", ""]
    return "\n".join(lines) + "\n"


def sse_error(request_id: Any, fault: Fault) -> str:
    return f"event: error\ndata: {json.dumps(fault.body(request_id), ensure_ascii=False)}\n\n"


# --- Push notification configs ---------------------------------------------------------------------


def _push_view(run_id: str, config: dict[str, Any]) -> dict[str, Any]:
    view = {"id": config["id"], "taskId": run_id, "url": config["url"]}
    if config.get("token"):
        view["token"] = config["token"]
    if config.get("authentication"):
        # The credentials are the receiver's secret: stored to send them, never shown back.
        view["authentication"] = {"scheme": config["authentication"]["scheme"]}
    return view


def _check_push_url(url: str) -> None:
    from stepwise.net.ssrf import BlockedDestination, check_url

    try:
        check_url(url)
    except BlockedDestination as exc:
        raise invalid_params(
            f"the push notification url is refused: {exc.message}", "push_url_refused"
        ) from None


def _checked_push(tenant_id: str, run_id: str, config: PushConfigIn) -> dict[str, Any]:
    _check_push_url(config.url)
    stored: dict[str, Any] = {
        "id": config.id or derived_id("pnc", utcnow(), tenant_id, run_id, config.url),
        "url": config.url,
        "token": config.token,
    }
    if config.authentication is not None:
        stored["authentication"] = config.authentication.model_dump(exclude_none=True)
    return stored


def set_push(tenant_id: str, run_id: str, config: PushConfigIn) -> dict[str, Any]:
    stored = _checked_push(tenant_id, run_id, config)

    def adding(configs: dict[str, Any]) -> dict[str, Any]:
        if stored["id"] not in configs and len(configs) >= MAX_PUSH_CONFIGS:
            raise invalid_params(
                f"a task has at most {MAX_PUSH_CONFIGS} push notification configs", "too_many"
            )
        return {**configs, stored["id"]: stored}

    stores().events.change_push(tenant_id, run_id, adding)
    return _push_view(run_id, stored)


def push_configs(tenant_id: str, run_id: str) -> dict[str, Any]:
    return stores().events.push_configs(tenant_id, run_id)


def delete_push(tenant_id: str, run_id: str, config_id: str) -> None:
    def removing(configs: dict[str, Any]) -> dict[str, Any]:
        if config_id not in configs:
            raise invalid_params(
                f"task {run_id} has no push notification config {config_id}", "push_config_not_found"
            )
        return {k: v for k, v in configs.items() if k != config_id}

    stores().events.change_push(tenant_id, run_id, removing)


# Which events change what a push subscriber sees: the run's start, its waits and their answers, its end.
PUSHED = frozenset(
    {
        "run_started",
        "approval_requested",
        "client_tool_requested",
        "approval_decided",
        "client_tool_answered",
        "run_completed",
        "run_failed",
        "run_cancelled",
    }
)


def notify(tenant_id: str, run_id: str, events: list[RunEvent], configs: dict[str, Any]) -> None:
    """Queue the task, as it stands after `events`, to each push config (through the webhook worker:
    SQS, retries, the SSRF guard, Standard Webhooks signatures), keyed on the last event so a retried
    append queues nothing twice."""
    from stepwise.webhooks.enqueue import enqueue_raw

    changed = [e for e in events if e.type in PUSHED]
    if not changed or not configs:
        return
    try:
        now = progress.now(tenant_id, run_id)
        body = json.dumps({"task": task_of(now)}, ensure_ascii=False)
        last = changed[-1]
        for config in configs.values():
            headers = {}
            if config.get("token"):
                headers[NOTIFICATION_TOKEN_HEADER] = config["token"]
            auth = config.get("authentication") or {}
            if auth.get("scheme") and auth.get("credentials"):
                headers["Authorization"] = f"{auth['scheme']} {auth['credentials']}"
            enqueue_raw(
                tenant_id,
                run_id,
                "a2a_task",
                config["url"],
                body,
                key=f"a2a#{config['id']}#{last.seq}",
                at=last.at,
                headers=headers,
            )
    except Exception:  # noqa: BLE001 - the run's own progress must never fail because of a subscriber
        logger.exception("A2A push notification not queued", extra={"run_id": run_id})


# --- The JSON-RPC door -----------------------------------------------------------------------------


@dataclass
class Reply:
    """What the route answers: a JSON-RPC response, or an SSE stream of them."""

    json: dict[str, Any] | None = None
    stream: str | None = None


def _result(request_id: Any, result: Any) -> Reply:
    return Reply(json={"jsonrpc": "2.0", "id": request_id, "result": result})


def _list(tenant_id: str, agent_id: str, params: ListParams) -> dict[str, Any]:
    size = min(params.page_size or PAGE_SIZE, MAX_PAGE_SIZE)
    wanted = params.status if params.status not in (None, "", "TASK_STATE_UNSPECIFIED") else None
    if wanted is not None and wanted not in {
        *STATES.values(),
        INPUT_REQUIRED,
        "TASK_STATE_REJECTED",
        "TASK_STATE_AUTH_REQUIRED",
    }:
        raise invalid_params(f"status {wanted} is not a TaskState", "invalid_status")
    if params.context_id:
        try:
            session = stores().sessions.get(tenant_id, params.context_id)
        except NotFound:
            return {"tasks": [], "nextPageToken": "", "pageSize": size, "totalSize": 0}
        if session.agent_id != agent_id:
            return {"tasks": [], "nextPageToken": "", "pageSize": size, "totalSize": 0}
    # One run status per task state where they map one to one: the filter then runs in DynamoDB.
    exact = {v: k for k, v in STATES.items() if list(STATES.values()).count(v) == 1}
    try:
        found, token = stores().runs.list_runs(
            tenant_id,
            agent_id=agent_id,
            session_id=params.context_id or None,
            status=exact.get(wanted or ""),  # type: ignore[arg-type]
            limit=size,
            next_token=params.page_token or None,
        )
    except ApiError as exc:
        raise invalid_params(exc.message, exc.code) from None
    tasks = []
    for run in found:
        if run.agent_id != agent_id:
            continue
        pending = progress.pending(tenant_id, run) if run.status == "waiting" else []
        if wanted is not None and state_of(run, pending) != wanted:
            continue
        tasks.append(
            task(run, pending, history_length=params.history_length, artifacts=params.include_artifacts)
        )
    return {"tasks": tasks, "nextPageToken": token or "", "pageSize": size, "totalSize": len(tasks)}


def _cancel(tenant_id: str, agent_id: str, task_id: str) -> dict[str, Any]:
    from stepwise.runs import cancel

    run = _run(tenant_id, agent_id, task_id)
    try:
        cancel.cancel(tenant_id, run.run_id, reason="cancelled over A2A")
    except Conflict:
        raise Fault(
            -32002,
            "TASK_NOT_CANCELABLE",
            f"task {task_id} is already {STATES[run.status]}",
            "task_not_cancelable",
        ) from None
    return task_of(progress.now(tenant_id, task_id))


@dataclass
class Call:
    tenant_id: str
    agent_id: str
    request_id: Any
    params: Any
    last_event_id: int | None
    lambda_context: Any


def _send_with_push(call: Call, params: SendParams) -> str:
    """`send`, with the push config the message's configuration brings stored on its task."""
    config = params.configuration
    push = config.task_push_notification_config if config is not None else None
    if push is not None:
        _check_push_url(push.url)  # refused before anything starts
    task_id = send(call.tenant_id, call.agent_id, params, lambda_context=call.lambda_context)
    if push is not None:
        set_push(call.tenant_id, task_id, push)
    return task_id


def _send_message(call: Call) -> Reply:
    started = time.monotonic()
    params = _params(SendParams, call.params)
    config = params.configuration
    task_id = _send_with_push(call, params)
    history = config.history_length if config else None
    if _blocking(config):
        now = progress.settle(call.tenant_id, task_id, BLOCK_WAIT - (time.monotonic() - started))
    else:
        now = progress.now(call.tenant_id, task_id)
    return _result(call.request_id, {"task": task_of(now, history)})


def _stream_from(call: Call, now: progress.Progress, after: int | None) -> Reply:
    first = task_of(now)
    events: list[tuple[int, dict[str, Any]]] = [(now.next, {"task": first})]
    state = first["status"]["state"]
    if state not in STREAM_ENDS or (after is not None and after < now.next):
        events += follow(call.tenant_id, now.run, now.next if after is None else after, state)
    return Reply(stream=sse(call.request_id, events))


def _send_streaming(call: Call) -> Reply:
    task_id = _send_with_push(call, _params(SendParams, call.params))
    return _stream_from(call, progress.now(call.tenant_id, task_id), None)


def _subscribe(call: Call) -> Reply:
    params = _params(TaskParams, call.params)
    now = _now(call.tenant_id, call.agent_id, params.id)
    if call.last_event_id is not None:
        # A client that saw up to seq N resumes there: the events after N, none twice.
        first = task_of(now)
        events = follow(call.tenant_id, now.run, call.last_event_id, None, STREAM_WAIT)
        if not events:
            events = [(now.next, {"task": first})]
        return Reply(stream=sse(call.request_id, events))
    return _stream_from(call, now, None)


def _get_task(call: Call) -> Reply:
    params = _params(TaskParams, call.params)
    return _result(
        call.request_id, task_of(_now(call.tenant_id, call.agent_id, params.id), params.history_length)
    )


def _list_tasks(call: Call) -> Reply:
    return _result(call.request_id, _list(call.tenant_id, call.agent_id, _params(ListParams, call.params)))


def _cancel_task(call: Call) -> Reply:
    params = _params(TaskParams, call.params)
    return _result(call.request_id, _cancel(call.tenant_id, call.agent_id, params.id))


def _create_push(call: Call) -> Reply:
    params = _params(PushConfigIn, call.params)
    if not params.task_id:
        raise invalid_params("taskId is required", "task_id_required")
    run = _run(call.tenant_id, call.agent_id, params.task_id)
    return _result(call.request_id, set_push(call.tenant_id, run.run_id, params))


def _get_push(call: Call) -> Reply:
    params = _params(PushRef, call.params)
    run = _run(call.tenant_id, call.agent_id, params.task_id)
    config = push_configs(call.tenant_id, run.run_id).get(params.id)
    if config is None:
        raise invalid_params(
            f"task {run.run_id} has no push notification config {params.id}", "push_config_not_found"
        )
    return _result(call.request_id, _push_view(run.run_id, config))


def _list_push(call: Call) -> Reply:
    params = _params(PushListParams, call.params)
    run = _run(call.tenant_id, call.agent_id, params.task_id)
    configs = [_push_view(run.run_id, c) for c in push_configs(call.tenant_id, run.run_id).values()]
    return _result(call.request_id, {"configs": configs, "nextPageToken": ""})


def _delete_push(call: Call) -> Reply:
    params = _params(PushRef, call.params)
    run = _run(call.tenant_id, call.agent_id, params.task_id)
    delete_push(call.tenant_id, run.run_id, params.id)
    return _result(call.request_id, {})


def _extended_card(call: Call) -> Reply:
    raise Fault(
        -32007,
        "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
        "this agent has no extended card",
        "extended_card_not_configured",
    )


def methods() -> dict[str, Callable[[Call], Reply]]:
    """The A2A 1.0 methods by name (built on call: a module that only builds push bodies, the event
    writers' `notify`, reaches none of them)."""
    return {
        "SendMessage": _send_message,
        "SendStreamingMessage": _send_streaming,
        "GetTask": _get_task,
        "ListTasks": _list_tasks,
        "CancelTask": _cancel_task,
        "SubscribeToTask": _subscribe,
        "CreateTaskPushNotificationConfig": _create_push,
        "GetTaskPushNotificationConfig": _get_push,
        "ListTaskPushNotificationConfigs": _list_push,
        "DeleteTaskPushNotificationConfig": _delete_push,
        "GetExtendedAgentCard": _extended_card,
    }


STREAMING = frozenset({"SendStreamingMessage", "SubscribeToTask"})


def _last_event_id(value: str | None) -> int | None:
    if not value:
        return None
    try:
        return max(int(value), 0)
    except ValueError:
        return None


def handle(
    tenant_id: str,
    agent_id: str,
    agent: Callable[[], Agent | None],
    body: str | None,
    *,
    last_event_id: str | None = None,
    lambda_context: Any = None,
) -> Reply:
    """One JSON-RPC call to the agent's A2A door. `agent` loads the agent (None: not this tenant's, or
    its door is closed). Every failure is a JSON-RPC error; none is an HTTP 500."""
    try:
        request = safejson.loads(body or "")
    except (ValueError, safejson.TooDeep):
        return Reply(
            json=Fault(-32700, "PARSE_ERROR", "the body is not valid JSON", "malformed_json").body(None)
        )
    if (
        not isinstance(request, dict)
        or request.get("jsonrpc") != "2.0"
        or not isinstance(request.get("method"), str)
    ):
        fault = Fault(-32600, "INVALID_REQUEST", "not a JSON-RPC 2.0 request", "invalid_request")
        return Reply(json=fault.body(request.get("id") if isinstance(request, dict) else None))
    request_id = request.get("id")
    method = request["method"]
    streaming = method in STREAMING
    try:
        handler = methods().get(method)
        if handler is None:
            raise Fault(
                -32601, "METHOD_NOT_FOUND", f"method {method} is not an A2A 1.0 method", "method_not_found"
            )
        if agent() is None:
            raise Fault(
                -32600,
                "INVALID_REQUEST",
                f"agent {agent_id} has no A2A door here (unknown, or a2a is not enabled on it)",
                "agent_not_found",
            )
        return handler(
            Call(
                tenant_id,
                agent_id,
                request_id,
                request.get("params"),
                _last_event_id(last_event_id),
                lambda_context,
            )
        )
    except Fault as fault:
        reply = fault
    except ApiError as exc:
        reply = from_api_error(exc)
    except Exception:  # noqa: BLE001 - the protocol's InternalError, never a bare 500
        logger.exception("A2A call failed", extra={"method": method})
        reply = Fault(
            -32603, "INTERNAL_ERROR", "something went wrong on our side; it was logged", "internal_error"
        )
    if streaming:
        return Reply(stream=sse_error(request_id, reply))
    return Reply(json=reply.body(request_id))


# --- The agent card --------------------------------------------------------------------------------


def _description(agent: Agent) -> str:
    prompt = (agent.system_prompt or "").strip()
    if prompt:
        first = prompt.splitlines()[0]
        return first if len(first) <= 300 else first[:299] + "…"
    return f"The Stepwise agent {agent.name}."


def card(agent: Agent, base_url: str) -> dict[str, Any]:
    """The public agent card: who the agent is, where its JSON-RPC interface is, how to authenticate."""
    skills = [
        {
            "id": agent.agent_id,
            "name": agent.name,
            "description": _description(agent),
            "tags": ["stepwise", "agent"],
            "inputModes": ["text/plain", "application/json"],
            "outputModes": ["text/plain"],
        }
    ]
    for tool in agent.tools[:20]:
        skills.append(
            {
                "id": f"{agent.agent_id}.{tool.name}",
                "name": tool.name,
                "description": getattr(tool, "description", None) or f"Uses the tool {tool.name}",
                "tags": ["tool"],
            }
        )
    return {
        "name": agent.name,
        "description": _description(agent),
        "version": agent.updated_at.strftime("%Y%m%d%H%M%S") if agent.updated_at else "1",
        "supportedInterfaces": [
            {
                "url": f"{base_url}/a2a/{agent.agent_id}",
                "protocolBinding": "JSONRPC",
                "protocolVersion": PROTOCOL_VERSION,
            }
        ],
        "provider": {"organization": "Stepwise", "url": base_url},
        "capabilities": {"streaming": True, "pushNotifications": True},
        "securitySchemes": {
            "bearer": {
                "httpAuthSecurityScheme": {
                    "scheme": "Bearer",
                    "description": "A Stepwise API key: Authorization: Bearer <key>",
                }
            }
        },
        "securityRequirements": [{"schemes": {"bearer": {"list": []}}}],
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain"],
        "skills": skills,
    }
