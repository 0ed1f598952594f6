"""The OpenAI Responses API over Stepwise runs: a response IS a run (its id is the run id), created
through runs/start, read from the run's record and event log, cancelled through runs/cancel.

What the official `openai` client sends and parses is the spec: `model: "agent:<agent_id>"` names the
agent, `input` brings the user's message, `previous_response_id` continues that run's session,
`instructions` are appended to the agent's system prompt for this run only, `metadata` is kept on the run.

A stream is a pure function of the run's event log (plus its record at the end), so it can be cut at
any point and replayed: `GET /v1/responses/{id}?stream=true&starting_after=N` translates the log again
and sends what follows N. Sequence numbers are therefore tied to the log, not counted per response:
the events translated from run event `seq` are numbered `seq * BLOCK + k`. They only ever grow, which
is all a client compares (`sequence_number > starting_after`); they are not contiguous.

The agent runs its own tools. Each call shows as a `function_call` output item (added when the call is
made, done with status `completed` when its result is in): information about what the agent did, not
a request for the caller to run anything. A run that waits on a person or on the calling app answers
`incomplete` with a message item naming each pending interaction and the route that answers it.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stepwise.core.errors import Malformed, NotFound, Unprocessable
from stepwise.core.ids import AGENT_ID, RUN_ID
from stepwise.interactions.models import Interaction
from stepwise.runs import eventlog, progress, start
from stepwise.runs.models import MESSAGE_LIMIT, Run, RunCreate, RunEvent
from stepwise.runs.ports import stores

MODEL_PREFIX = "agent:"
BLOCK = 1000  # sequence numbers per run event (see the module's docstring)
STREAM_WAIT = 20.0  # API Gateway buffers a response and gives up at 30 s: a stream ends before
SETTLE_WAIT = 25.0  # a blocking create answers within API Gateway's 30 s too
INSTRUCTIONS_LIMIT = 32_000  # characters; they ride on the run item with its input

ResponseStatus = Literal["completed", "failed", "in_progress", "cancelled", "queued", "incomplete"]


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
    if param is None and isinstance(details, list) and details:  # the resolver's validation errors
        loc = [part for part in details[0].get("loc", []) if part not in ("body", "query", "path")]
        param = ".".join(str(part) for part in loc) or None
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


# --- From the event log to Responses events and output items -------------------------------------------


def _status(run: Run, pending: list[Interaction]) -> ResponseStatus:
    if run.status == "succeeded":
        return "completed"
    if run.status in ("failed", "timed_out"):
        return "failed"
    if run.status == "cancelled":
        return "cancelled"
    if pending:
        return "incomplete"
    return "queued" if run.status == "queued" else "in_progress"


def _usage(run: Run) -> dict[str, Any]:
    usage = run.total_usage  # a response spends what its run's whole tree spent
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cached_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        },
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},  # Stepwise does not count them apart
        "total_tokens": usage.total,
    }


def _error(run: Run) -> dict[str, Any] | None:
    """ResponseError's `code` is a closed list: a rate limit is its own, anything else a server error;
    Stepwise's code is kept in `type` ("the original error type")."""
    if run.status not in ("failed", "timed_out") or run.error is None:
        return None
    code = "rate_limit_exceeded" if run.error.code == "rate_limited" else "server_error"
    return {"code": code, "message": run.error.message, "type": run.error.code}


def response_object(
    run: Run, output: list[dict[str, Any]], status: ResponseStatus, *, usage: bool = True
) -> dict[str, Any]:
    """The Response as the openai client's `Response` model reads it."""
    finished = run.finished_at.timestamp() if run.finished_at and status == "completed" else None
    return {
        "id": run.run_id,
        "object": "response",
        "created_at": run.created_at.timestamp(),
        "completed_at": finished,
        "status": status,
        "model": MODEL_PREFIX + run.agent_id,
        "instructions": run.instructions,
        # OpenAI's metadata is strings only; a run started elsewhere may carry other values.
        "metadata": {k: v if isinstance(v, str) else json.dumps(v) for k, v in run.metadata.items()},
        "output": output,
        "error": _error(run),
        # None of the closed list of reasons (max_output_tokens, max_messages, content_filter, steered)
        # is "waits on someone": naming one would send a client to the wrong remedy, so it is null.
        "incomplete_details": {"reason": None} if status == "incomplete" else None,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": _usage(run) if usage else None,
    }


def _answering(interaction: Interaction) -> str:
    route = f"POST /v1/sessions/interactions/{interaction.interaction_id}/respond"
    arguments = json.dumps(interaction.arguments, sort_keys=True)
    if interaction.kind == "approval":
        what = f"approval of {interaction.tool_name}({arguments})"
        answer = '{"answer": {"approved": true|false, "reason"?: "..."}}'
    else:
        what = f"the calling app's result for client tool {interaction.tool_name}({arguments})"
        answer = (
            f'{{"answer": {{"tool_call_id": "{interaction.tool_call_id}", "outcome": "completed"|"error", '
            '"output": ...}}'
        )
    return (
        f"- {interaction.interaction_id}: {what}. Answer with {route} {answer} and an Idempotency-Key header."
    )


def waiting_text(pending: list[Interaction]) -> str:
    lines = [_answering(i) for i in pending]
    return (
        "This response waits on "
        + ("an interaction" if len(lines) == 1 else f"{len(lines)} interactions")
        + ":\n"
        + "\n".join(lines)
        + "\nOnce answered, the same response goes on: retrieve it, or stream it again with starting_after."
    )


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": []}


def _message(item_id: str, text: str | None) -> dict[str, Any]:
    """An assistant message item: being written (no text yet), or whole."""
    content = [] if text is None else [_text_part(text)]
    status = "in_progress" if text is None else "completed"
    return {"id": item_id, "type": "message", "role": "assistant", "status": status, "content": content}


class Translator:
    """Feeds on a run's events in order; keeps the output items as they stand and the stream events
    that describe them (each with its sequence number)."""

    def __init__(self, run_id: str) -> None:
        self.tag = run_id.removeprefix("run_")
        self.items: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self._open: list[int] = []  # items added and not yet done, in order
        self._message: int | None = None  # the message item receiving text
        self._step: int | None = None  # the step whose text it holds
        self._calls: dict[str, int] = {}  # tool_call_id → its function_call item
        self._final = False  # a final answer's text was streamed
        self._block = self._k = 0  # the run event being translated, and how many events it gave

    def _emit(self, kind: str, **fields: Any) -> None:
        # A copy: the items go on changing after the event that showed them.
        shown = json.loads(json.dumps(fields))
        self.events.append({"type": kind, "sequence_number": self._block * BLOCK + self._k, **shown})
        self._k += 1

    def begin(self, run: Run) -> None:
        """`response.created` and `response.in_progress`, numbered 0 and 1 (before any run event)."""
        status: ResponseStatus = "queued" if run.status == "queued" else "in_progress"
        snapshot = response_object(run, [], status, usage=False)
        self._emit("response.created", response=snapshot)
        self._emit("response.in_progress", response=snapshot)

    def feed(self, event: RunEvent) -> None:
        self._block, self._k = event.seq, 0
        data = event.data
        if event.type == "chunk":
            self._chunk(int(data.get("step", 0)), int(data.get("offset", 0)), str(data.get("text", "")))
        elif event.type == "step_completed" and self._message is not None and self._step == data.get("step"):
            final = data.get("action") == "final"
            self._final = self._final or final
            self._close_message("final_answer" if final else "commentary")
        elif event.type == "tool_call":
            self._close_message("commentary")
            self._call(data)
        elif event.type == "tool_result":
            index = self._calls.get(str(data.get("tool_call_id")))
            if index is not None and index in self._open:
                self._done(index, status="completed")

    def _add(self, item: dict[str, Any]) -> int:
        index = len(self.items)
        self.items.append(item)
        self._open.append(index)
        self._emit("response.output_item.added", output_index=index, item=item)
        return index

    def _done(self, index: int, **update: Any) -> None:
        self.items[index].update(update)
        self._open.remove(index)
        self._emit("response.output_item.done", output_index=index, item=self.items[index])

    def _chunk(self, step: int, offset: int, text: str) -> None:
        if self._message is not None and self._step != step:
            self._close_message("commentary")
        if self._message is None:
            index = self._add(_message(f"msg_{self.tag}_{len(self.items)}", None))
            self._message, self._step = index, step
            part = _text_part("")
            self.items[index]["content"].append(part)
            where = {"item_id": self.items[index]["id"], "output_index": index, "content_index": 0}
            self._emit("response.content_part.added", **where, part=part)
        item = self.items[self._message]
        held = item["content"][0]["text"]
        # A retried step sends its text again from offset 0: only what goes past what we hold is new.
        delta = text[max(len(held) - offset, 0) :] if offset <= len(held) else text
        if delta:
            item["content"][0]["text"] = held + delta
            where = {"item_id": item["id"], "output_index": self._message, "content_index": 0}
            self._emit("response.output_text.delta", **where, delta=delta, logprobs=[])

    def _close_message(self, phase: str) -> None:
        if self._message is None:
            return
        index, item = self._message, self.items[self._message]
        part = item["content"][0]
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        self._emit("response.output_text.done", **where, text=part["text"], logprobs=[])
        self._emit("response.content_part.done", **where, part=part)
        self._done(index, status="completed", phase=phase)
        self._message = self._step = None

    def _call(self, data: dict[str, Any]) -> None:
        call_id = str(data.get("tool_call_id"))
        arguments = data.get("arguments")
        index = self._add(
            {
                "id": f"fc_{self.tag}_{len(self.items)}",
                "type": "function_call",
                "call_id": call_id,
                "name": str(data.get("tool_name")),
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                "status": "in_progress",
            }
        )
        self._calls[call_id] = index

    def finish(self, run: Run) -> None:
        """The run has ended (its terminal event was the last fed): close what is open, make sure the
        answer is there (a provider that did not stream leaves no chunks), and say how it ended."""
        self._close_message("final_answer" if run.status == "succeeded" else "commentary")
        for index in list(self._open):
            self._done(index, status="incomplete")  # a call that never got its result
        if run.status == "succeeded" and run.output and not self._final:
            self._chunk(-1, 0, run.output)
            self._close_message("final_answer")
        status = _status(run, [])
        kind = "response.completed" if status == "completed" else "response.failed"
        self._emit(kind, response=response_object(run, self.items, status))

    def wait(self, run: Run, pending: list[Interaction]) -> None:
        """The run waits on someone: a message item names each wait and how to answer it, and the
        response ends `incomplete`. Numbered at the end of the last event's block, so that what the run
        does once answered comes after it."""
        self._k = max(self._k, BLOCK - 3)
        item = _message(
            f"msg_{self.tag}_wait_{pending[0].interaction_id.removeprefix('int_')}", waiting_text(pending)
        )
        index = len(self.items)
        self.items.append(item)
        self._emit("response.output_item.added", output_index=index, item=item)
        self._emit("response.output_item.done", output_index=index, item=item)
        self._emit("response.incomplete", response=response_object(run, self.items, "incomplete"))

    def cut(self, run: Run) -> None:
        """The stream's time is up while the run goes on: a last `response.in_progress` tells the client
        to retrieve it, or to stream it again after this event's sequence number."""
        self._k = max(self._k, BLOCK - 1)
        self._emit("response.in_progress", response=response_object(run, self.items, _status(run, [])))


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
    state = progress.settle(tenant_id, run_id, wait)
    events = (_before(tenant_id, run_id, state.since) if state.since else []) + state.events
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
    return response_object(state.run, translator.items, _status(state.run, state.pending))


def create(tenant_id: str, body: ResponseCreate, *, key: str | None, lambda_context: Any = None) -> Any:
    """Start the agent's run and answer: at once (`background`), as a stream, or once it has settled."""
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
    accepted = start.start_run_once(
        tenant_id, agent_id, run_body, key=key, lambda_context=lambda_context, instructions=body.instructions
    )
    run_id = str(accepted["run_id"])
    if body.stream:
        return stream(tenant_id, run_id)
    if body.background:
        # As the start recorded it (queued), not as it may already have moved on: the answer is "taken".
        run = stores().runs.get(tenant_id, run_id).model_copy(update={"status": accepted["status"]})
        return response_object(run, [], _status(run, []), usage=False)
    return _as_response(*_settled(tenant_id, run_id, SETTLE_WAIT))


def retrieve(tenant_id: str, run_id: str) -> dict[str, Any]:
    state = progress.now(tenant_id, response_id(run_id))
    return _as_response(state, _before(tenant_id, run_id, state.since))


def stream(tenant_id: str, run_id: str, starting_after: int | None = None, wait: float | None = None) -> str:
    """The response's events as Server-Sent Events, from the start of its log, sent after
    `starting_after`. Ends with the run's end, its wait on someone, or after `wait` seconds (default
    STREAM_WAIT). API Gateway buffers a Lambda's response whole, so the stream is written once the run
    has settled (or the time is up) rather than event by event: nothing would reach the client sooner."""
    state, events = _settled(tenant_id, response_id(run_id), STREAM_WAIT if wait is None else wait)
    return sse(_translated(state, events, cut=True).events, starting_after)


def sse(events: list[dict[str, Any]], starting_after: int | None = None) -> str:
    lines: list[str] = []
    for event in events:
        if starting_after is None or event["sequence_number"] > starting_after:
            lines += [f"event: {event['type']}", f"data: {json.dumps(event, ensure_ascii=False)}", ""]
    return "\n".join(lines) + ("\n" if lines else "")


def cancel(tenant_id: str, run_id: str) -> dict[str, Any]:
    """Cancel the run (runs/cancel: 409 when it has ended already) and answer the cancelled response."""
    from stepwise.runs import cancel as cancelling  # the API function's: ending a run reaches far

    cancelling.cancel(tenant_id, response_id(run_id), reason="cancelled through the Responses API")
    return retrieve(tenant_id, run_id)
