"""The OpenAI Responses API over Stepwise runs: a response IS a run (its id is the run id), created
through runs/start, read from the run's record and event log, cancelled through runs/cancel.

What the official `openai` client sends and parses is the spec: `model: "agent:<agent_id>"` names the
agent, `input` brings the user's message, `previous_response_id` continues that run's session,
`instructions` are appended to the agent's system prompt for this run only, `metadata` is kept on the run.

A stream is a pure function of the run's event log, so it can be cut and replayed:
`GET /v1/responses/{id}?stream=true&starting_after=N` translates the log again and sends what follows N
(stepwise.protocols.responses_output numbers the events by the log, not per response).

The agent runs its own tools. Each call shows as a `function_call` output item (added when the call is
made, done with status `completed` when its result is in): information about what the agent did, not
a request for the caller to run anything. A run that waits on a person or on the calling app answers
`incomplete` with a message item naming each pending interaction and the route that answers it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stepwise.core.errors import Malformed, NotFound, Unprocessable
from stepwise.core.ids import AGENT_ID, RUN_ID
from stepwise.protocols.responses_output import MODEL_PREFIX, Translator, response_object, sse, status_of
from stepwise.runs import eventlog, progress
from stepwise.runs.models import MESSAGE_LIMIT, RunCreate, RunEvent
from stepwise.runs.ports import stores

STREAM_WAIT = 20.0  # API Gateway buffers a response and gives up at 30 s: a stream ends before
SETTLE_WAIT = 25.0  # a blocking create answers within API Gateway's 30 s too
INSTRUCTIONS_LIMIT = 32_000  # characters; they ride on the run item with its input


# --- Requests ----------------------------------------------------------------------------------------


class ResponseCreate(BaseModel):
    """The body of `POST /v1/responses`. Fields the Responses API has and an agent decides for itself
    (tools, temperature, reasoning, text format...) are accepted and ignored: the agent's own apply."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(description='`"agent:<agent_id>"`: the agent that answers')
    input: str | list[dict[str, Any]] = Field(
        description="The user's message: a string, or input items whose last user message is used"
    )
    instructions: str | None = Field(
        default=None,
        max_length=INSTRUCTIONS_LIMIT,
        description="Appended to the agent's system prompt for this run only",
    )
    previous_response_id: str | None = Field(
        default=None, description="Continue that response's session (its run's conversation)"
    )
    metadata: dict[str, str] | None = Field(
        default=None, max_length=16, description="Kept on the run (up to 16 string pairs, as OpenAI's)"
    )
    stream: bool | None = Field(default=False, description="Answer with Server-Sent Events")
    background: bool | None = Field(default=False, description="Answer at once, with status `queued`")


def agent_of(model: str) -> str:
    """The agent a `model` names; any other model is the API's 404, like an unknown agent."""
    agent_id = model.removeprefix(MODEL_PREFIX)
    if not model.startswith(MODEL_PREFIX) or not re.fullmatch(AGENT_ID, agent_id):
        raise NotFound(
            f"model {model!r} is not an agent of this API; name one as 'agent:<agent_id>'",
            code="agent_not_found",
            details={"param": "model"},
        )
    return agent_id


def _part_text(part: Any) -> str | None:
    if isinstance(part, dict) and part.get("type") in ("input_text", "output_text", "text"):
        text = part.get("text")
        return text if isinstance(text, str) else None
    return None


def text_of(value: str | list[dict[str, Any]]) -> str:
    """The message for the run: the string, or the text of the last user message among the items.
    Images, files and tool outputs have no place in a run's message: such input is refused, not
    silently dropped."""
    if isinstance(value, str):
        text = value
    else:
        users = [i for i in value if i.get("role") == "user" and i.get("type", "message") == "message"]
        if not users:
            raise Malformed(
                "input has no user message; send a string or items with a {role: 'user'} message",
                code="input_without_user_message",
                details={"param": "input"},
            )
        content = users[-1].get("content")
        if isinstance(content, str):
            text = content
        else:
            parts = content if isinstance(content, list) else []
            texts = [_part_text(p) for p in parts]
            if not parts or None in texts:
                raise Malformed(
                    "the last user message must be text: a string or input_text parts (images, files "
                    "and audio are not taken through this door)",
                    code="unsupported_input_content",
                    details={"param": "input"},
                )
            text = "\n".join(t for t in texts if t)
    if not text.strip():
        raise Malformed("input has no text", code="empty_input", details={"param": "input"})
    if len(text) > MESSAGE_LIMIT:
        raise Unprocessable(
            f"input is over {MESSAGE_LIMIT} characters", code="input_too_long", details={"param": "input"}
        )
    return text


def response_id(value: str) -> str:
    """A response id is a run id; one that cannot be ours names nothing (404, like an unknown one)."""
    if not re.fullmatch(RUN_ID, value):
        raise NotFound(f"response {value} not found", code="response_not_found")
    return value


# --- Errors, in OpenAI's shape -------------------------------------------------------------------------


def error_body(status: int, code: str, message: str, details: Any = None) -> dict[str, Any]:
    """`{"error": {message, type, param, code}}`: what the openai client reads into its APIError."""
    param = details.get("param") if isinstance(details, dict) else None
    errors = details.get("errors") if isinstance(details, dict) else None
    if param is None and isinstance(errors, list) and errors:  # the resolver's validation errors
        loc = [part for part in errors[0].get("loc", []) if part not in ("body", "query", "path")]
        param = ".".join(str(part) for part in loc) or None
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


# --- The door's operations ------------------------------------------------------------------------------


def _before(tenant_id: str, run_id: str, upto: int) -> list[RunEvent]:
    """The run's events up to seq `upto`, in order (a page at a time)."""
    found: list[RunEvent] = []
    after = 0
    while after < upto:
        page = eventlog.read(tenant_id, run_id, after, 0, known=True)  # its run was read (settle, now)
        found += [event for event in page.events if event.seq <= upto]
        if not page.events or page.next <= after:
            break
        after = page.next
    return found


def _settled(tenant_id: str, run_id: str, wait: float) -> tuple[progress.Progress, list[RunEvent]]:
    """The run once it has ended or waits on someone, or after `wait`, and its whole log by then: what
    settle read while it waited, after what the log held before (nothing, for a run just started)."""
    read: list[RunEvent] = []
    state = progress.settle(tenant_id, run_id, wait, seen=read.extend)
    since = read[0].seq - 1 if read else state.next
    events = (_before(tenant_id, run_id, since) if since else []) + read
    if not state.settled:
        # Time is up: the run as it is now, and the waits of its tree (a child's approval is not an
        # event of this run's log, so settle did not wake for it).
        run = stores().runs.get(tenant_id, run_id)
        state = state.model_copy(update={"run": run, "pending": progress.pending(tenant_id, run)})
    return state, events


def _translated(state: progress.Progress, events: list[RunEvent], *, cut: bool) -> Translator:
    run = state.run
    translator = Translator(run.run_id)
    translator.begin(run)
    for event in events:
        translator.feed(event)
    if run.done:
        translator.finish(run)
    elif state.pending:
        translator.wait(run, state.pending)
    elif cut:
        translator.cut(run)
    return translator


def _as_response(state: progress.Progress, events: list[RunEvent]) -> dict[str, Any]:
    translator = _translated(state, events, cut=False)
    return response_object(state.run, translator.items, status_of(state.run, state.pending))


def create(tenant_id: str, body: ResponseCreate, *, key: str | None, lambda_context: Any = None) -> Any:
    """Start the agent's run and answer: at once (`background`), as a stream, or once it has settled."""
    began = time.monotonic()
    agent_id = agent_of(body.model)
    message = text_of(body.input)
    session_id = None
    if body.previous_response_id is not None:
        try:
            session_id = stores().runs.get(tenant_id, response_id(body.previous_response_id)).session_id
        except NotFound:
            raise NotFound(
                f"previous response {body.previous_response_id} not found",
                code="previous_response_not_found",
                details={"param": "previous_response_id"},
            ) from None
    try:
        run_body = RunCreate(message=message, session_id=session_id, metadata=dict(body.metadata or {}))
    except ValidationError as exc:
        raise Unprocessable(
            str(exc.errors()[0]["msg"]), code="invalid_input", details={"param": "input"}
        ) from None
    # Imported here, not with the module: the events function serves followers' polls too, and starting
    # a run reaches far (sessions, quotas, webhooks, cancelling on `interrupt`); a poll's cold start
    # should not pay for it.
    from stepwise.runs import start

    accepted = start.start_run_once(
        tenant_id, agent_id, run_body, key=key, lambda_context=lambda_context, instructions=body.instructions
    )
    run_id = str(accepted["run_id"])
    if body.stream:
        return stream(tenant_id, run_id)
    if body.background:
        # As the start recorded it (queued), not as it may already have moved on: the answer is "taken".
        run = stores().runs.get(tenant_id, run_id).model_copy(update={"status": accepted["status"]})
        return response_object(run, [], status_of(run, []), usage=False)
    # What the start took comes out of the wait: API Gateway's 30 s count from the request.
    return _as_response(*_settled(tenant_id, run_id, SETTLE_WAIT - (time.monotonic() - began)))


@contextmanager
def _found(run_id: str) -> Iterator[str]:
    """The run a response id names: an id that is not one we issued, an unknown run and another
    tenant's are the same 404 `response_not_found`."""
    try:
        yield response_id(run_id)
    except NotFound as exc:
        if exc.code != "run_not_found":
            raise
        raise NotFound(f"response {run_id} not found", code="response_not_found") from None


def retrieve(tenant_id: str, run_id: str) -> dict[str, Any]:
    with _found(run_id):
        state = progress.now(tenant_id, run_id)
        return _as_response(state, _before(tenant_id, run_id, state.next))


def stream(tenant_id: str, run_id: str, starting_after: int | None = None, wait: float | None = None) -> str:
    """The response's events as Server-Sent Events, from the start of its log, sent after
    `starting_after`. Ends with the run's end, its wait on someone, or after `wait` seconds (default
    STREAM_WAIT). API Gateway buffers a Lambda's response whole, so the stream is written once the run
    has settled (or the time is up) rather than event by event: nothing would reach the client sooner."""
    with _found(run_id):
        state, events = _settled(tenant_id, run_id, STREAM_WAIT if wait is None else wait)
    return sse(_translated(state, events, cut=True).events, starting_after)


def cancel(tenant_id: str, run_id: str) -> dict[str, Any]:
    """Cancel the run (runs/cancel: 409 when it has ended already) and answer the cancelled response."""
    from stepwise.runs import cancel as cancelling  # the API function's: ending a run reaches far

    with _found(run_id):
        cancelling.cancel(tenant_id, run_id, reason="cancelled through the Responses API")
    return retrieve(tenant_id, run_id)
