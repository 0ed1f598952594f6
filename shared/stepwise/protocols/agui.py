"""AG-UI 1.0: `POST /v1/agents/{agent_id}/ag-ui` takes a RunAgentInput and answers with AG-UI events as
Server-Sent Events (`data: <json>` frames, camelCase fields, as ag_ui's EventEncoder writes them).

An AG-UI run is a Stepwise run; this module only translates. The thread is the session (a `ses_…`
threadId is that session; any other threadId names a session derived from the tenant, the agent and
the threadId, so another tenant's thread can never be reached). A new user message starts a run, with
the request's runId as its idempotency key; `resume` answers the interrupts of a waiting run (each
interrupt id is an interaction id) through runs.answers.respond, and a `role: "tool"` message answers
the front end's own tool call. Either continues the SAME run's stream.

The events come from the run's event log (a delegated child's from the child's own log, between
SUBAGENT_STARTED and SUBAGENT_FINISHED). A response ends within STREAM_BOUND seconds (API Gateway
buffers it and gives up at 30 s): a run still working then ends its stream with an interrupt of the
Stepwise-specific reason `stepwise:continue` whose id is the cursor; resuming it streams on from there.

ag_ui itself is not imported here: it is not in the Lambda layers, and the light events function serves
this route. These models accept what ag_ui's 1.0 models accept (tests/integration/test_door_agui.py
validates every emitted event against them).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from stepwise.core import config, ids
from stepwise.core.errors import Conflict, NotFound, Unprocessable
from stepwise.interactions.models import Interaction
from stepwise.llm.models import Usage
from stepwise.runs import answers, eventlog, progress, start
from stepwise.runs.models import Run, RunCreate, RunEvent
from stepwise.runs.ports import stores
from stepwise.tools.models import ClientTool

STREAM_BOUND = 20.0  # seconds a response may take (API Gateway's limit is 30)
CONTINUE = "stepwise:continue"  # the reason of the interrupt that only says "still working"
PROTOCOL_VERSION = "1.0"
# Derived thread sessions sort as if made at this instant: their ids must not depend on when they are
# first used, or a retried first request would name another session.
THREADS_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
_FRAME = re.compile(r"(run_[0-9A-HJKMNP-TV-Z]{26})\.([0-9]+)\.([0-9]+)")
_TOKEN = re.compile(rf"{re.escape(CONTINUE)}~({_FRAME.pattern}(?:~{_FRAME.pattern})*)")


# --- Input: RunAgentInput as ag_ui 1.0 accepts it -------------------------------------------------------


class _Wire(BaseModel):
    """camelCase on the wire, either spelling accepted, unknown fields kept: ag_ui's own base."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")


class ToolIn(_Wire):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    description: str
    parameters: Any = None


class MessageIn(_Wire):
    id: str
    role: Literal["developer", "system", "assistant", "user", "tool", "activity", "reasoning"]
    content: Any = None
    tool_call_id: str | None = None
    error: str | None = None


class ResumeIn(_Wire):
    interrupt_id: str = Field(min_length=1, max_length=2048)
    status: Literal["resolved", "cancelled"]
    payload: Any = None


class RunAgentInput(_Wire):
    thread_id: str = Field(min_length=1, max_length=256)
    run_id: str = Field(min_length=1, max_length=256)
    messages: list[MessageIn]
    state: Any = None
    tools: list[ToolIn] | None = None
    context: list[Any] | None = None
    forwarded_props: Any = None
    resume: list[ResumeIn] | None = None
    parent_run_id: str | None = None
    protocol_version: str | None = None


# --- Output: events as dicts, camelCase, optional fields left out --------------------------------------


def _fields(**fields: Any) -> dict[str, Any]:
    """camelCase keys; an optional field without a value is left out (never `null`: the official
    client's verifier refuses a null where a field is optional)."""
    return {to_camel(k): v for k, v in fields.items() if v is not None}


def _event(etype: str, at: datetime | None = None, **fields: Any) -> dict[str, Any]:
    stamp = int(at.timestamp() * 1000) if at is not None else None
    return {"type": etype, **_fields(timestamp=stamp, **fields)}


def sse(events: list[dict[str, Any]]) -> str:
    return "".join(f"data: {json.dumps(e, ensure_ascii=False, separators=(',', ':'))}\n\n" for e in events)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


# --- Following a run's tree -----------------------------------------------------------------------------


@dataclass
class Frame:
    """One event log being read: the root run's, or a delegated child's (its subagent run id)."""

    run_id: str
    after: int
    sub: str | None = None  # the subagentRunId its events carry (None: the root run)
    step: int = 0  # the step open in the AG-UI stream (0: none)
    message: str | None = None  # the text message open in the stream
    chunked: bool = False  # the open step streamed text (else a final answer is sent whole)
    began: bool = False  # this response saw its last step begin (a step begun earlier was sent there)

    def token(self) -> str:
        return f"{self.run_id}.{self.after}.{self.step}"


@dataclass
class Stream:
    tenant_id: str
    thread_id: str
    agui_run_id: str
    root_id: str
    session_id: str
    front: frozenset[str]  # the run's own client tools: the front end's, answered by tool messages
    before: Usage  # what the tree had spent when this response began (it reports only its own part)
    frames: list[Frame]
    out: list[dict[str, Any]] = field(default_factory=list)
    delegated: bool = False  # this response followed a child run
    ended: RunEvent | None = None  # the root's terminal event, when this response read it

    def emit(self, etype: str, at: datetime | None = None, **fields: Any) -> None:
        self.out.append(_event(etype, at, **fields))

    # Brackets that must be closed before RUN_FINISHED, and opened again by the next response.
    def close_text(self, frame: Frame, at: datetime | None = None) -> None:
        if frame.message is not None:
            self.emit("TEXT_MESSAGE_END", at, message_id=frame.message, subagent_run_id=frame.sub)
            frame.message = None

    def close_step(self, frame: Frame, at: datetime | None = None) -> None:
        self.close_text(frame, at)
        if frame.step:
            self.emit("STEP_FINISHED", at, step_name=f"step {frame.step}", subagent_run_id=frame.sub)

    def open_subagent(self, child: Run, name: str, tool_call_id: str | None, at: datetime | None) -> None:
        parent = child.parent_run_id if child.parent_run_id != self.root_id else None
        self.emit(
            "SUBAGENT_STARTED",
            at,
            subagent_run_id=child.run_id,
            name=name,
            parent_subagent_run_id=parent,
            parent_tool_call_id=tool_call_id,
        )

    def translate(self, frame: Frame, event: RunEvent) -> str | None:
        """Emit what `event` means in AG-UI; say when the stream must change frames ("push", "pop",
        "end") or look at the tree's waits ("signal")."""
        data, at, sub = event.data, event.at, frame.sub
        if data.get("run_id") not in (None, frame.run_id):
            return None  # a descendant's wait mirrored into this log: its own log is followed
        match event.type:
            case "step_started":
                self.close_step(frame, at)
                frame.step, frame.chunked, frame.began = int(data.get("step") or 0), False, True
                self.emit("STEP_STARTED", at, step_name=f"step {frame.step}", subagent_run_id=sub)
            case "chunk":
                if frame.message is None:
                    frame.message = f"{frame.run_id}.s{data.get('step')}.{data.get('offset', 0)}"
                    self.emit(
                        "TEXT_MESSAGE_START",
                        at,
                        message_id=frame.message,
                        role="assistant",
                        subagent_run_id=sub,
                    )
                frame.chunked = True
                self.emit(
                    "TEXT_MESSAGE_CONTENT",
                    at,
                    message_id=frame.message,
                    delta=str(data.get("text", "")),
                    subagent_run_id=sub,
                )
            case "step_completed":
                self.close_step(frame, at)
                frame.step = 0
            case "tool_call":
                self.close_text(frame, at)
                call = str(data["tool_call_id"])
                self.emit(
                    "TOOL_CALL_START",
                    at,
                    tool_call_id=call,
                    tool_call_name=str(data["tool_name"]),
                    subagent_run_id=sub,
                )
                self.emit(
                    "TOOL_CALL_ARGS",
                    at,
                    tool_call_id=call,
                    delta=_text(data.get("arguments") or {}),
                    subagent_run_id=sub,
                )
                self.emit("TOOL_CALL_END", at, tool_call_id=call, subagent_run_id=sub)
            case "tool_result":
                call = str(data["tool_call_id"])
                content = _text({"error": data["error"]}) if data.get("error") else _text(data.get("output"))
                self.emit(
                    "TOOL_CALL_RESULT",
                    at,
                    message_id=f"{call}.result",
                    tool_call_id=call,
                    content=content,
                    role="tool",
                    subagent_run_id=sub,
                )
            case "approval_requested" | "client_tool_requested":
                return "signal"
            case "delegation_started":
                return "push"
            case "run_completed" | "run_failed" | "run_cancelled":
                return "end" if sub is None else "pop"
            case "hook_blocked" | "compaction" | "approval_decided" | "client_tool_answered":
                self.emit("CUSTOM", at, name=f"stepwise.{event.type}", value=data)
        return None

    def end_child(self, frame: Frame, child: Run) -> None:
        self.close_step(frame, None)
        if child.status == "succeeded":
            self.emit(
                "SUBAGENT_FINISHED",
                None,
                subagent_run_id=frame.sub,
                result=child.output,
                outcome={"type": "success"},
            )
        else:
            error = child.error.message if child.error else child.status
            code = child.error.code if child.error else child.status
            self.emit("SUBAGENT_ERROR", None, subagent_run_id=frame.sub, message=error, code=code)


def _read(tenant_id: str, run_id: str) -> Run:
    return stores().runs.get(tenant_id, run_id)


def _head(tenant_id: str, run_id: str) -> int:
    head = stores().events.head(tenant_id, run_id)
    return head.last_seq if head else 0


def follow(stream: Stream, deadline: float, check: bool) -> tuple[str, list[Interaction]]:
    """Translate the tree's events until the root run ends, the tree waits on someone, or `deadline`.
    `check` asks for the tree's waits as soon as the logs are drained (a resumed run may still wait)."""
    tenant_id = stream.tenant_id
    while True:
        frame = stream.frames[-1]
        remaining = deadline - time.monotonic()
        wait = 0.0 if check or remaining <= 0 else min(remaining, eventlog.MAX_WAIT)
        page = eventlog.read(tenant_id, frame.run_id, frame.after, wait)
        moved = False
        for event in page.events:
            frame.after = event.seq
            said = stream.translate(frame, event)
            if said == "signal":
                check = True
            elif said == "end":
                stream.ended = event
                return event.type, []
            elif said == "push":
                stream.delegated = True
                child = _read(tenant_id, str(event.data["child_run_id"]))
                stream.open_subagent(
                    child, str(event.data.get("tool_name")), event.data.get("tool_call_id"), event.at
                )
                stream.frames.append(Frame(child.run_id, 0, sub=child.run_id))
                moved = True
                break
            elif said == "pop":
                stream.end_child(frame, _read(tenant_id, frame.run_id))
                stream.frames.pop()
                moved = True
                break
        else:
            frame.after = max(frame.after, page.next)
            if page.done and not page.events:  # ended before this response's cursor
                run = _read(tenant_id, frame.run_id)
                if frame.sub is None:
                    return {"succeeded": "run_completed", "cancelled": "run_cancelled"}.get(
                        run.status, "run_failed"
                    ), []
                stream.end_child(frame, run)
                stream.frames.pop()
                moved = True
        if time.monotonic() >= deadline and not check:
            return "continue", []  # a run that keeps talking still ends its response in time
        if moved or page.events:
            continue
        if check:
            waits = progress.now(tenant_id, stream.root_id).pending
            if waits:
                return "interrupt", waits
            check = False


def _usage(then: Usage, now: Usage) -> list[dict[str, Any]]:
    """What this response's part of the run spent (AG-UI counts a resumed run's own calls only)."""
    entry = {
        "inputTokens": now.input_tokens - then.input_tokens,
        "outputTokens": now.output_tokens - then.output_tokens,
        "cachedInputTokens": now.cached_tokens - then.cached_tokens,
        "cacheWriteInputTokens": now.cache_write_tokens - then.cache_write_tokens,
    }
    entry["totalTokens"] = entry["inputTokens"] + entry["outputTokens"]
    return [{k: max(v, 0) for k, v in entry.items()}]


def _interrupt(stream: Stream, waiting: Interaction) -> dict[str, Any]:
    kind = "approval" if waiting.kind == "approval" else "client_tool"
    prompt = f"Approve {waiting.tool_name}?" if kind == "approval" else f"Run {waiting.tool_name} and answer"
    schema = (
        {"type": "object", "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}}}
        if kind == "approval"
        else {"description": "the tool's result"}
    )
    return _fields(
        id=waiting.interaction_id,
        reason=kind,
        message=prompt,
        tool_call_id=waiting.tool_call_id,
        response_schema=schema,
        expires_at=waiting.deadline.isoformat(),
        subagent_run_id=waiting.run_id if waiting.run_id != stream.root_id else None,
        metadata={
            "stepwise": {
                "kind": kind,
                "tool": waiting.tool_name,
                "arguments": waiting.arguments,
                "runId": waiting.run_id,
            }
        },
    )


def finish(stream: Stream, ending: str, waits: list[Interaction]) -> None:
    """Close what is open and end the response: RUN_FINISHED (with its outcome) or RUN_ERROR."""
    tenant_id = stream.tenant_id
    for frame in reversed(stream.frames):
        stream.close_step(frame)
        if frame.sub is not None:
            here = [w.interaction_id for w in waits if w.run_id == frame.run_id]
            outcome = _fields(type="suspended", interrupt_ids=here or None)
            stream.emit("SUBAGENT_FINISHED", subagent_run_id=frame.sub, outcome=outcome)
    base: dict[str, Any] = {"thread_id": stream.thread_id, "run_id": stream.agui_run_id}
    fresh = stream.before == Usage() and not stream.delegated
    if ending == "run_completed" and stream.ended is not None and fresh:
        # A run streamed from its start without a delegation: its terminal event carries its output and
        # the whole tree's usage, so the run item need not be read again.
        output = stream.ended.data.get("output")
        usage = _usage(stream.before, Usage.model_validate(stream.ended.data.get("usage") or {}))
    else:
        run = _read(tenant_id, stream.root_id)
        output, usage = run.output, _usage(stream.before, run.total_usage)
    if ending == "run_completed":
        top = stream.frames[0]
        if top.began and not top.chunked and output:  # the model answered without streaming: whole
            message = f"{stream.root_id}.output"
            stream.emit("TEXT_MESSAGE_START", message_id=message, role="assistant")
            stream.emit("TEXT_MESSAGE_CONTENT", message_id=message, delta=output)
            stream.emit("TEXT_MESSAGE_END", message_id=message)
        stream.emit("RUN_FINISHED", **base, result=output, outcome={"type": "success"}, usage=usage)
    elif ending == "run_cancelled":
        stream.emit("RUN_FINISHED", **base, outcome={"type": "cancelled"}, usage=usage)
    elif ending == "run_failed":
        error = run.error.message if run.error else f"the run {run.status}"
        stream.emit("RUN_ERROR", message=error, code=run.error.code if run.error else run.status, usage=usage)
    elif ending == "interrupt":
        front, root_id = stream.front, stream.root_id
        if all(w.kind == "client_tool" and w.run_id == root_id and w.tool_name in front for w in waits):
            # Only the front end's own tools are awaited: AG-UI's convention is a finished run that
            # names them; the app answers with tool messages in its next input.
            pending_ids = [w.tool_call_id for w in waits]
            stream.emit(
                "RUN_FINISHED",
                **base,
                outcome={"type": "success", "pendingToolCallIds": pending_ids},
                usage=usage,
            )
        else:
            interrupts = [_interrupt(stream, w) for w in waits]
            stream.emit(
                "RUN_FINISHED", **base, outcome={"type": "interrupt", "interrupts": interrupts}, usage=usage
            )
    else:  # still working at the bound: an interrupt whose id is where to go on from
        token = "~".join([CONTINUE, *(f.token() for f in stream.frames)])
        cont = {
            "id": token,
            "reason": CONTINUE,
            "message": "The run is still working: resume this interrupt to stream what follows.",
            "metadata": {"stepwise": {"runId": stream.root_id}},
        }
        stream.emit("RUN_FINISHED", **base, outcome={"type": "interrupt", "interrupts": [cont]}, usage=usage)


# --- Requests --------------------------------------------------------------------------------------------


def thread_session(tenant_id: str, agent_id: str, thread_id: str) -> str:
    """The session a threadId names: a `ses_…` id is that session; any other id is mapped, per tenant
    and agent, onto a session id of its own."""
    if re.fullmatch(ids.SESSION_ID, thread_id):
        return thread_id
    return ids.derived_id("ses", THREADS_EPOCH, tenant_id, agent_id, "ag-ui", thread_id)


def _user_text(body: RunAgentInput) -> str:
    last = body.messages[-1] if body.messages else None
    if last is None or last.role != "user":
        raise Unprocessable(
            "the input brings no new user message (the last message must be the user's), nor answers "
            "to this thread's pending interrupts or tool calls",
            code="no_user_message",
        )
    if isinstance(last.content, str):
        return last.content
    parts = last.content if isinstance(last.content, list) else []
    texts = [p.get("text") for p in parts if isinstance(p, dict) and p.get("type") == "text"]
    if len(texts) != len(parts) or not texts:
        raise Unprocessable("only text parts are accepted in a user message", code="unsupported_content")
    return "\n".join(str(t) for t in texts)


def _client_tools(body: RunAgentInput) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    for tool in body.tools or []:
        schema = (
            tool.parameters if isinstance(tool.parameters, dict) else {"type": "object", "properties": {}}
        )
        try:
            tools.append(
                ClientTool(
                    type="client",
                    name=tool.name,
                    description=tool.description or tool.name,
                    input_schema=schema,
                ).model_dump(mode="json")
            )
        except ValidationError as exc:
            raise Unprocessable(
                f"tool {tool.name} is not usable: {exc.errors()[0]['msg']}", code="invalid_tool"
            ) from None
    return tools


def _begin(tenant_id: str, agent_id: str, body: RunAgentInput) -> dict[str, Any]:
    """Start the run a new user message asks for (on the thread's session, created on first use)."""
    session_id = thread_session(tenant_id, agent_id, body.thread_id)
    agui = {
        "thread_id": body.thread_id,
        "run_id": body.run_id,
        "state": body.state,
        "forwarded_props": body.forwarded_props,
    }
    try:
        create = RunCreate(message=_user_text(body), session_id=session_id, metadata={"ag_ui": agui})
    except ValidationError as exc:
        raise Unprocessable(
            "the input cannot start a run",
            code="validation_error",
            details=[{"msg": e["msg"]} for e in exc.errors()],
        ) from None
    tools = _client_tools(body)
    try:
        run = start.start_run(tenant_id, agent_id, create, client_tools=tools)
    except NotFound as exc:
        if exc.code != "session_not_found" or session_id == body.thread_id:
            raise
        # The thread's first run: its session is created under the id the thread maps to. Asking first
        # would cost every later run a read; this costs the first one the read that found nothing.
        try:
            fresh = create.model_copy(update={"session_id": None})
            run = start.start_run(tenant_id, agent_id, fresh, client_tools=tools, new_session_id=session_id)
        except Conflict as raced:
            if raced.code != "session_exists":
                raise
            run = start.start_run(tenant_id, agent_id, create, client_tools=tools)  # another start made it
    return {"run_id": run.run_id, "session_id": run.session_id}


@cache
def _idempotent_begin() -> Any:
    """_begin behind Powertools idempotency keyed by tenant, agent, threadId and runId: a retried
    request streams the run the first one started; another input under the same ids is a 422."""
    from aws_lambda_powertools.utilities.idempotency import (
        DynamoDBPersistenceLayer,
        IdempotencyConfig,
        idempotent_function,
    )

    settings = IdempotencyConfig(
        event_key_jmespath="[tenant_id, agent_id, thread_id, run_id]",
        payload_validation_jmespath="input",
        expires_after_seconds=start.IDEMPOTENCY_HOURS * 3600,
    )
    persistence = DynamoDBPersistenceLayer(table_name=config.tables().idempotency)

    @idempotent_function(data_keyword_argument="request", persistence_store=persistence, config=settings)
    def begin_once(request: dict[str, Any]) -> dict[str, Any]:
        body = RunAgentInput.model_validate(request["input"])
        return _begin(request["tenant_id"], request["agent_id"], body)

    return settings, begin_once


def begin_once(
    tenant_id: str, agent_id: str, body: RunAgentInput, lambda_context: Any = None
) -> dict[str, Any]:
    """The Stepwise run this input starts (or started, when it is a retry). `lambda_context` lets an
    in-progress idempotency record expire with the invocation that made it."""
    from aws_lambda_powertools.utilities.idempotency.exceptions import (
        IdempotencyAlreadyInProgressError,
        IdempotencyValidationError,
    )

    request = {
        "tenant_id": tenant_id,
        "agent_id": agent_id,
        "thread_id": body.thread_id,
        "run_id": body.run_id,
        "input": body.model_dump(mode="json", by_alias=True, exclude={"resume"}),
    }
    try:
        settings, begin = _idempotent_begin()
        settings.register_lambda_context(lambda_context)
        started: dict[str, Any] = begin(request=request)
    except IdempotencyValidationError:
        raise Unprocessable(
            "this threadId and runId already started a run with another input", code="run_id_reused"
        ) from None
    except IdempotencyAlreadyInProgressError:
        raise Conflict(
            "a request with this threadId and runId is in progress; retry shortly", code="request_in_progress"
        ) from None
    return started


def _root_in_thread(tenant_id: str, run_id: str, session_id: str) -> Run:
    """The root of `run_id`'s tree, when that tree is this thread's (else the same 404 as no run)."""
    run = _read(tenant_id, run_id)
    root = _read(tenant_id, run.root_run_id) if run.root_run_id else run
    if root.session_id != session_id:
        raise NotFound("no such interrupt in this thread", code="interrupt_not_found")
    return root


def _unusable_payload(waiting: Interaction) -> Unprocessable:
    return Unprocessable(
        f"interrupt {waiting.interaction_id} is an approval: resume it with a payload of "
        '{"approved": true|false, "reason"?} (or {"decision": "approve"|"deny"}, or none to approve)',
        code="invalid_resume_payload",
    )


def _answer(waiting: Interaction, status: str, payload: Any) -> dict[str, Any]:
    if waiting.kind == "approval":
        if status == "cancelled":
            return {"approved": False, "reason": "cancelled by the client"}
        # "resolved" with no decision is a confirm button's yes; a decision that is not a boolean (or
        # approve/deny) is refused, never read as consent (`{"approved": "false"}`, `"deny"`).
        approved, reason = True, None
        if isinstance(payload, bool):
            approved = payload
        elif isinstance(payload, dict):
            if "approved" in payload:
                if not isinstance(payload["approved"], bool):
                    raise _unusable_payload(waiting)
                approved = payload["approved"]
            elif "decision" in payload:
                if payload["decision"] not in ("approve", "deny"):
                    raise _unusable_payload(waiting)
                approved = payload["decision"] == "approve"
            reason = payload.get("reason")
        elif payload is not None:
            raise _unusable_payload(waiting)
        return {"approved": approved, **({"reason": str(reason)[:2000]} if reason else {})}
    if status == "cancelled":
        return {"tool_call_id": waiting.tool_call_id, "outcome": "error", "output": "cancelled by the client"}
    return {"tool_call_id": waiting.tool_call_id, "outcome": "completed", "output": payload}


def _frames_now(tenant_id: str, root: Run) -> list[Frame]:
    """Where each log of the tree stands now: a resumed run streams on from there."""
    frames = [Frame(root.run_id, _head(tenant_id, root.run_id))]

    def below(run: Run) -> None:
        for child_id in run.children:
            child = _read(tenant_id, child_id)
            if not child.done:
                frames.append(Frame(child.run_id, _head(tenant_id, child.run_id), sub=child.run_id))
                below(child)

    below(root)
    return frames


def _frames_from(tenant_id: str, token: str, session_id: str) -> tuple[Run, list[Frame]]:
    found = _TOKEN.fullmatch(token)
    if found is None:
        raise NotFound("no such interrupt in this thread", code="interrupt_not_found")
    frames = [Frame(m[0], int(m[1]), step=int(m[2])) for m in _FRAME.findall(token.removeprefix(CONTINUE))]
    root = _root_in_thread(tenant_id, frames[0].run_id, session_id)
    if root.run_id != frames[0].run_id:
        raise NotFound("no such interrupt in this thread", code="interrupt_not_found")
    for frame in frames[1:]:
        if _root_in_thread(tenant_id, frame.run_id, session_id).run_id != root.run_id:
            raise NotFound("no such interrupt in this thread", code="interrupt_not_found")
        frame.sub = frame.run_id
    return root, frames


def _continue(
    tenant_id: str, agent_id: str, body: RunAgentInput, session_id: str
) -> tuple[Run, list[Frame]] | None:
    """Answer what the input answers (resume entries, tool messages) and say where the run goes on.
    Everything is checked (the thread's, this agent's) before the first answer is given."""
    key = f"ag-ui:{body.thread_id}:{body.run_id}"
    root: Run | None = None
    frames: list[Frame] = []
    answered: list[tuple[Interaction, dict[str, Any]]] = []
    for entry in body.resume or []:
        if entry.interrupt_id.startswith(CONTINUE):
            cont_root, frames = _frames_from(tenant_id, entry.interrupt_id, session_id)
            if root is not None and root.run_id != cont_root.run_id:
                raise Unprocessable("the resume entries answer more than one run", code="resume_mismatch")
            root = cont_root
            continue
        if not re.fullmatch(ids.INTERACTION_ID, entry.interrupt_id):
            raise NotFound("no such interrupt in this thread", code="interrupt_not_found")
        waiting = stores().interactions.get(tenant_id, entry.interrupt_id)
        if waiting.kind not in progress.HUMAN_KINDS:  # a delegation is answered by its child's ending alone
            raise NotFound("no such interrupt in this thread", code="interrupt_not_found")
        tree = _root_in_thread(tenant_id, waiting.run_id, session_id)
        if root is not None and root.run_id != tree.run_id:
            raise Unprocessable("the resume entries answer more than one run", code="resume_mismatch")
        root = tree
        answered.append((waiting, _answer(waiting, entry.status, entry.payload)))
    if not body.resume:
        results = {m.tool_call_id: m for m in body.messages if m.role == "tool" and m.tool_call_id}
        if not results or (body.messages and body.messages[-1].role == "user"):
            return None  # nothing answered, or a new turn (the history's tool messages are old)
        session = _session_or_none(tenant_id, session_id)
        active = _read(tenant_id, session.active_run_id) if session and session.active_run_id else None
        if active is None:
            return None
        for waiting in progress.pending(tenant_id, active):
            result = results.get(waiting.tool_call_id)
            if waiting.kind == "client_tool" and result is not None:
                output = (
                    result.content
                    if result.error is None
                    else {"error": result.error, "content": result.content}
                )
                outcome = "completed" if result.error is None else "error"
                answered.append(
                    (waiting, {"tool_call_id": waiting.tool_call_id, "outcome": outcome, "output": output})
                )
        if not answered:
            return None
        root = active
    if root is None:
        return None
    if root.agent_id != agent_id:  # the thread's session belongs to this agent: another's run is not here
        raise NotFound("no such interrupt in this thread", code="interrupt_not_found")
    if not answered:
        return root, frames
    for _, answer in answered:
        answers.check_size(answer)  # none is given when one could not be
    frames = _frames_now(tenant_id, root)  # read before the answers: their effects are events after it
    for waiting, answer in answered:
        answers.respond(
            tenant_id, waiting.interaction_id, answer, key=f"{key}:{waiting.interaction_id}", by="ag-ui"
        )
    return root, frames


def _session_or_none(tenant_id: str, session_id: str) -> Any:
    try:
        return stores().sessions.get(tenant_id, session_id)
    except NotFound:
        return None


def run(
    tenant_id: str,
    agent_id: str,
    body: RunAgentInput,
    bound: float = STREAM_BOUND,
    lambda_context: Any = None,
) -> str:
    """The SSE body answering `body`. Every refusal (unknown agent or thread, bad input, a conflicting
    answer) is raised before the first event, so it is an HTTP error in the API's shape."""
    deadline = time.monotonic() + bound
    session_id = thread_session(tenant_id, agent_id, body.thread_id)
    continued = _continue(tenant_id, agent_id, body, session_id)
    if continued is not None:
        root, frames = continued
        root_id, session_id, front = (
            root.run_id,
            root.session_id,
            {str(t.get("name")) for t in root.client_tools},
        )
        before, check = root.total_usage, True
    else:  # start_run refuses an unknown agent (or another tenant's) with the same 404
        started = begin_once(tenant_id, agent_id, body, lambda_context)
        root_id, session_id = str(started["run_id"]), str(started["session_id"])
        front = {tool.name for tool in body.tools or []}
        frames, before, check = [Frame(root_id, 0)], Usage(), False
    stream = Stream(
        tenant_id, body.thread_id, body.run_id, root_id, session_id, frozenset(front), before, frames
    )
    stream.emit(
        "RUN_STARTED",
        thread_id=body.thread_id,
        run_id=body.run_id,
        protocol_version=PROTOCOL_VERSION,
        metadata={"stepwise": {"runId": root_id, "sessionId": session_id}},
    )
    for frame in frames[1:]:  # the delegations still open where this response takes over
        child = _read(tenant_id, frame.run_id)
        call = (
            stores().interactions.get(tenant_id, child.parent_interaction_id)
            if child.parent_interaction_id
            else None
        )
        name = call.tool_name if call else child.agent_id  # as the bracket was first opened: the tool's name
        stream.open_subagent(child, name, call.tool_call_id if call else None, None)
    for frame in frames:
        if frame.step:
            stream.emit("STEP_STARTED", step_name=f"step {frame.step}", subagent_run_id=frame.sub)
    ending, waits = follow(stream, deadline, check)
    finish(stream, ending, waits)
    return sse(stream.out)
