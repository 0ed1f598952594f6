"""What-if runs in the loop: each tool call is served from the original run's record, run live (an
unmatched read, when the request allows it), or refused as a divergence. Nothing else ever executes,
and nothing ever waits on a human.

The record is the original's own messages in its session (its assistant turns' calls, their arguments
as the model wrote them, and the tool messages the model read): the same durable store a rebuild of its
conversation reads, not its events (they expire sooner) nor the effects ledger (it holds only the
effects, not the reads, approvals or client answers). It is read once per what-if run and function,
in one Query, and kept here like the working conversation (stepwise.loop.working).

Only a what-if run (`run.what_if_of`) comes here: an ordinary run's step makes no extra request.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from stepwise.attachments import render
from stepwise.loop.calls import Executable, Message, Ready, Refused, StepScope
from stepwise.loop.results import store_result
from stepwise.mcp.models import McpToolRef
from stepwise.runs import events
from stepwise.runs.models import Run
from stepwise.runs.ports import stores
from stepwise.runs.record import Recorded, canonical, parsed, recorded_calls
from stepwise.runs.state import CallRef, RunContext
from stepwise.sessions.models import Earlier, tool_slot
from stepwise.tools.base import ToolResult
from stepwise.tools.models import DELEGATES, BuiltinTool, ClientTool, DeclaredTool

NOT_RECORDED = "this call has no recorded result in a what-if run"
HUMAN_DENIED = (
    "a human or the app would answer this call, but the original run answered no such call; "
    "a what-if run never waits, so it is denied (reason: what_if)"
)
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CACHED_RECORDS = 32


@dataclass
class Replay:
    """A what-if run's record and what became of each of its own calls so far (`calls`, saved in the
    run's context with every step, so a retried or rebuilt step sees what was used)."""

    match: str
    live_reads: bool
    record: tuple[Recorded, ...]
    calls: dict[str, str] = field(default_factory=dict)

    def used(self) -> set[str]:
        return {o.partition(":")[2] for o in self.calls.values() if o.startswith("served:")}

    def find(self, name: str, arguments: Any) -> Recorded | None:
        """The recorded call this one matches: the first unused one of the same tool with the same
        canonical arguments (a used one when every such call was served already: asking the same
        thing again reads the same answer); under `match: "name"`, the next unused call of the tool."""
        used = self.used()
        same_tool = [r for r in self.record if r.name == name]
        if self.match == "name":
            return next((r for r in same_tool if r.call_id not in used), None)
        wanted = canonical(arguments)
        same = [r for r in same_tool if r.arguments == wanted]
        return next((r for r in same if r.call_id not in used), same[0] if same else None)


_records: OrderedDict[tuple[str, str], tuple[Recorded, ...]] = OrderedDict()
_lock = threading.Lock()


def record_of(tenant_id: str, run: Run) -> tuple[Recorded, ...]:
    """The original's answered calls, read once per what-if run and kept (the record never changes)."""
    key = (tenant_id, run.run_id)
    with _lock:
        if key in _records:
            _records.move_to_end(key)
            return _records[key]
    request = run.what_if or {}
    session_id, original = str(request.get("session_id")), str(run.what_if_of)
    record = tuple(recorded_calls(stores().sessions.run_messages(tenant_id, session_id, original)))
    with _lock:
        _records[key] = record
        while len(_records) > CACHED_RECORDS:
            _records.popitem(last=False)
    return record


def replay_for(tenant_id: str, run: Run, context: RunContext) -> Replay:
    request = run.what_if or {}
    return Replay(
        match=str(request.get("match") or "arguments"),
        live_reads=bool(request.get("live_reads")),
        record=record_of(tenant_id, run),
        calls=dict(context.what_if_calls),
    )


def history(tenant_id: str, run: Run) -> Earlier:
    """The session history the original began with (its checkpoint), for the what-if run's first step:
    the what-if run lives in a session of its own and never extends the original's."""
    request = run.what_if or {}
    found = stores().sessions.checkpoint(tenant_id, str(request.get("session_id")), str(run.what_if_of))
    return found if found is not None else Earlier()


def overridden(agent: Any, request: dict[str, Any]) -> Any:
    """The agent as the what-if run sees it: the request's model, system prompt, tools and
    temperature in place of its own (validated when the run was asked for, like an agent edit)."""
    changes = {k: request[k] for k in ("model", "system_prompt", "tools", "temperature") if k in request}
    if not changes:
        return agent
    return type(agent).model_validate({**agent.model_dump(mode="json"), **changes})


def reads(tool: DeclaredTool | McpToolRef, arguments: dict[str, Any]) -> bool:
    """Whether a call only reads: a read-only tool (the registry's, or an MCP tool whose trusted server
    hints it), or http_request with a reading method."""
    if isinstance(tool, BuiltinTool) and tool.name == "http_request":
        return str(arguments.get("method", "")).upper() in READ_METHODS
    return bool(tool.read_only)


def _served(scope: StepScope, ref: CallRef, recorded: Recorded) -> Refused:
    """The recorded result, stored as this call's: the model reads what the original's model read."""
    message: Message = {"role": "tool", "tool_call_id": ref.id, "content": recorded.message.get("content")}
    if render.EXTENSION in recorded.message:  # images it returned stay the original run's files
        message[render.EXTENSION] = recorded.message[render.EXTENSION]
    run = scope.run
    stores().sessions.put_message(
        scope.tenant_id, run.session_id, run.run_id, scope.step, tool_slot(ref.index), message
    )
    payload: dict[str, Any] = {"tool_call_id": ref.id, "tool_name": ref.name, "served_from": recorded.call_id}
    content = parsed(message["content"])
    error = content.get("error") if isinstance(content, dict) and len(content) == 1 else None
    if isinstance(error, dict):
        payload["error"] = error
    else:
        payload["output"] = content
    events.emit(scope.tenant_id, run.run_id, "tool_result", payload)
    return Refused(ref, message, str(error.get("code")) if isinstance(error, dict) else None)


def _diverged(scope: StepScope, ref: CallRef, result: ToolResult, flags: dict[str, Any]) -> Refused:
    message = store_result(scope, ref, result, {"diverged": True, **flags})
    return Refused(ref, message, result.error.code if result.error else None)


def decide(
    scope: StepScope,
    ref: CallRef,
    tool: DeclaredTool | McpToolRef,
    asked: Any,
    arguments: dict[str, Any],
    *,
    human: bool,
) -> Refused | Ready:
    """A what-if run's call that its own agent's permission and hooks let through: served from the
    record when it matches (`asked` is what the model wrote; an approval or a client tool the original
    answered is answered the same way), an unmatched read run live when allowed, and any other call
    refused (`not_recorded`, or `denied` for a human's). Never Paused."""
    replay = scope.replay
    assert replay is not None
    recorded = replay.find(ref.name, asked)
    if recorded is not None:
        replay.calls[ref.id] = f"served:{recorded.call_id}"
        return _served(scope, ref, recorded)
    if human or isinstance(tool, ClientTool):
        replay.calls[ref.id] = "diverged:denied"
        return _diverged(scope, ref, ToolResult.failure("denied", HUMAN_DENIED), {"reason": "what_if"})
    if replay.live_reads and not isinstance(tool, DELEGATES) and reads(tool, arguments):
        replay.calls[ref.id] = "live"
        assert not isinstance(tool, ClientTool)
        executable: Executable = tool
        return Ready(ref=ref, tool=executable, arguments=arguments)
    replay.calls[ref.id] = "diverged:not_recorded"
    return _diverged(scope, ref, ToolResult.failure("not_recorded", NOT_RECORDED), {})


def refused(scope: StepScope, ref: CallRef, outcome: Refused) -> None:
    """A call the what-if run's own configuration refused (unknown tool, bad arguments, denied by its
    permission or a hook) did not get the original's result: a divergence too."""
    if scope.replay is not None and ref.id not in scope.replay.calls:
        scope.replay.calls[ref.id] = f"diverged:{outcome.error or 'refused'}"
