"""An AG-UI response's events (stepwise.protocols.agui's output): the run tree's event logs followed
and translated into AG-UI events, written as dicts with camelCase fields and no null optionals, and
the response closed with RUN_FINISHED (its outcome) or RUN_ERROR.

A response that stops mid-run closes what it opened (steps, text messages, subagent brackets) and
ends with an interrupt: the run's waits, or a `stepwise:continue` cursor (Frame.token per followed
log) that the next response takes over from.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic.alias_generators import to_camel

from stepwise.core.schema import rfc3339
from stepwise.interactions.models import Interaction
from stepwise.llm.models import Usage
from stepwise.runs import eventlog, progress
from stepwise.runs.models import Run, RunEvent
from stepwise.runs.ports import stores

CONTINUE = "stepwise:continue"  # the reason of the interrupt that only says "still working"


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


def read_run(tenant_id: str, run_id: str) -> Run:
    return stores().runs.get(tenant_id, run_id)


def head_seq(tenant_id: str, run_id: str) -> int:
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
                child = read_run(tenant_id, str(event.data["child_run_id"]))
                stream.open_subagent(
                    child, str(event.data.get("tool_name")), event.data.get("tool_call_id"), event.at
                )
                stream.frames.append(Frame(child.run_id, 0, sub=child.run_id))
                moved = True
                break
            elif said == "pop":
                stream.end_child(frame, read_run(tenant_id, frame.run_id))
                stream.frames.pop()
                moved = True
                break
        else:
            frame.after = max(frame.after, page.next)
            if page.done and not page.events:  # ended before this response's cursor
                run = read_run(tenant_id, frame.run_id)
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
        expires_at=rfc3339(waiting.deadline),
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
        run = read_run(tenant_id, stream.root_id)
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
