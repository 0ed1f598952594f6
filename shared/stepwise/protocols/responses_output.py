"""From a run to what the openai client reads: the Response object, its output items and the Responses
stream events, translated from the run's record and event log (stepwise.protocols.responses serves them).

A stream is a pure function of the run's event log (plus its record at the end), so it can be cut at
any point and replayed: the events translated from run event `seq` are numbered `seq * BLOCK + k`. They
only ever grow, which is all a client compares (`sequence_number > starting_after`); they are not
contiguous. What ends a stream early (a wait, the time limit) is numbered at the end of the last
event's block, so whatever the run does next comes after it.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from stepwise.interactions.models import Interaction
from stepwise.runs import progress
from stepwise.runs.models import Run, RunEvent

MODEL_PREFIX = "agent:"
BLOCK = 1000  # sequence numbers per run event (see the module's docstring)

ResponseStatus = Literal["completed", "failed", "in_progress", "cancelled", "queued", "incomplete"]


def status_of(run: Run, pending: list[Interaction]) -> ResponseStatus:
    """The Response status of a run, and of the human waits of its tree."""
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
    arguments = json.dumps(interaction.arguments, sort_keys=True)
    if interaction.kind == "approval":
        what = f"approval of {interaction.tool_name}({arguments})"
    else:
        what = f"the calling app's result for client tool {interaction.tool_name}({arguments})"
    return f"- {interaction.interaction_id}: {what}. Answer with {progress.respond_call(interaction)}."


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
        status = status_of(run, [])
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
        self._emit("response.in_progress", response=response_object(run, self.items, status_of(run, [])))


def sse(events: list[dict[str, Any]], starting_after: int | None = None) -> str:
    lines: list[str] = []
    for event in events:
        if starting_after is None or event["sequence_number"] > starting_after:
            lines += [f"event: {event['type']}", f"data: {json.dumps(event, ensure_ascii=False)}", ""]
    return "\n".join(lines) + ("\n" if lines else "")
