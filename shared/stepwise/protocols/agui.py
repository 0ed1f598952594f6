"""AG-UI 1.0: `POST /v1/agents/{agent_id}/ag-ui` takes a RunAgentInput and answers with AG-UI events as
Server-Sent Events (`data: <json>` frames, camelCase fields, as ag_ui's EventEncoder writes them).

An AG-UI run is a Stepwise run; this module only translates. The thread is the session (a `ses_…`
threadId is that session; any other threadId names a session derived from the tenant, the agent and
the threadId, so another tenant's thread can never be reached). A new user message starts a run, with
the request's runId as its idempotency key; `resume` answers the interrupts of a waiting run (each
interrupt id is an interaction id) through runs.answers.respond, and a `role: "tool"` message answers
the front end's own tool call. Either continues the SAME run's stream.

The events come from the run's event log (a delegated child's from the child's own log, between
SUBAGENT_STARTED and SUBAGENT_FINISHED), translated by stepwise.protocols.agui_stream; this module
takes the input, starts or resumes the run, and hands the stream its starting point. A response ends
within STREAM_BOUND seconds (API Gateway buffers it and gives up at 30 s): a run still working then
ends its stream with an interrupt of the Stepwise-specific reason `stepwise:continue` whose id is the
cursor; resuming it streams on from there.

ag_ui itself is not imported here: it is not in the Lambda layers, and the light events function serves
this route. These models accept what ag_ui's 1.0 models accept (tests/integration/test_door_agui.py
validates every emitted event against them).
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from stepwise.core import ids
from stepwise.core.errors import Conflict, NotFound, Unprocessable
from stepwise.interactions.models import Interaction
from stepwise.llm.models import Usage
from stepwise.protocols.agui_stream import CONTINUE, Frame, Stream, finish, follow, head_seq, read_run, sse
from stepwise.runs import answers, progress
from stepwise.runs.models import Run, RunCreate
from stepwise.runs.ports import stores
from stepwise.tools.models import ClientTool

STREAM_BOUND = 20.0  # seconds a response may take (API Gateway's limit is 30)
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
    from stepwise.runs import start  # on the first start: a follower's cold start does not pay for it

    # The run's id is held under the thread and run ids, so a retry after a failed attempt carries on
    # the run that attempt recorded (stepwise.runs.start._keyed); every try below shares it.
    key = start.start_key("ag-ui", agent_id, body.thread_id, body.run_id)
    try:
        run = start.start_keyed(tenant_id, agent_id, create, key=key, client_tools=tools)
    except NotFound as exc:
        if exc.code != "session_not_found" or session_id == body.thread_id:
            raise
        # The thread's first run: its session is created under the id the thread maps to. Asking first
        # would cost every later run a read; this costs the first one the read that found nothing.
        try:
            fresh = create.model_copy(update={"session_id": None})
            run = start.start_keyed(
                tenant_id, agent_id, fresh, key=key, client_tools=tools, new_session_id=session_id
            )
        except Conflict as raced:
            if raced.code != "session_exists":
                raise
            run = start.start_keyed(
                tenant_id, agent_id, create, key=key, client_tools=tools
            )  # another made it
    return {"run_id": run.run_id, "session_id": run.session_id}


def _begin_from(request: dict[str, Any]) -> dict[str, Any]:
    return _begin(request["tenant_id"], request["agent_id"], RunAgentInput.model_validate(request["input"]))


@cache
def _idempotent_begin() -> tuple[Any, Any]:
    """_begin keyed by tenant, agent, threadId and runId: a retried request streams the run the first
    one started; another input under the same ids is a 422."""
    from stepwise.runs import start

    return start.guarded("[tenant_id, agent_id, thread_id, run_id]", "input", _begin_from)


def begin_once(
    tenant_id: str, agent_id: str, body: RunAgentInput, lambda_context: Any = None
) -> dict[str, Any]:
    """The Stepwise run this input starts (or started, when it is a retry)."""
    request = {
        "tenant_id": tenant_id,
        "agent_id": agent_id,
        "thread_id": body.thread_id,
        "run_id": body.run_id,
        "input": body.model_dump(mode="json", by_alias=True, exclude={"resume"}),
    }
    from stepwise.runs import start

    return start.once(
        _idempotent_begin(),
        request,
        lambda_context=lambda_context,
        reused=Unprocessable(
            "this threadId and runId already started a run with another input", code="run_id_reused"
        ),
        what="this threadId and runId",
    )


def _root_in_thread(tenant_id: str, run_id: str, session_id: str) -> Run:
    """The root of `run_id`'s tree, when that tree is this thread's (else the same 404 as no run)."""
    run = read_run(tenant_id, run_id)
    root = read_run(tenant_id, run.root_run_id) if run.root_run_id else run
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
    frames = [Frame(root.run_id, head_seq(tenant_id, root.run_id))]

    def below(run: Run) -> None:
        for child_id in run.children:
            child = read_run(tenant_id, child_id)
            if not child.done:
                frames.append(Frame(child.run_id, head_seq(tenant_id, child.run_id), sub=child.run_id))
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
        active = read_run(tenant_id, session.active_run_id) if session and session.active_run_id else None
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
        child = read_run(tenant_id, frame.run_id)
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
