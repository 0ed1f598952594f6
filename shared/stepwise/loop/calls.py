"""A step's tool calls: gated in the model's order, executed through the effects ledger, their
results stored where the model will read them.

Arguments come from the stored assistant message, never from the state machine. Each call is
isolated: whatever one raises becomes its own error result, never its siblings' failure.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from aws_lambda_powertools import Logger

from stepwise import ledger
from stepwise.agents.models import Agent
from stepwise.attachments import render
from stepwise.core import ids, observability, safejson, tracing
from stepwise.core.errors import Conflict, NotFound, QuotaExceeded
from stepwise.interactions.models import Interaction, digest
from stepwise.llm.models import Usage
from stepwise.mcp.models import McpToolRef
from stepwise.runs import delegation, events
from stepwise.runs.models import Run
from stepwise.runs.ports import stores
from stepwise.runs.state import CallRef, Wait
from stepwise.sessions.models import tool_slot
from stepwise.tools import registry, tables
from stepwise.tools.base import TOOL_RESULT_LIMIT, ToolResult
from stepwise.tools.builtin import ToolScope
from stepwise.tools.models import AgentTool, BuiltinTool, ClientTool, CodeTool, HttpTool

logger = Logger(service="stepwise")

DEFAULT_APPROVAL_TIMEOUT = 300
DEFAULT_CLIENT_TIMEOUT = 3600
PARALLEL_TOOL_CALLS = 10
EVENT_OUTPUT_LIMIT = 50_000  # characters of an output copied into a tool_result event

Executable = HttpTool | CodeTool | BuiltinTool | McpToolRef | AgentTool  # an agent tool delegates


@dataclass
class StepScope:
    """What every call of one step shares."""

    tenant_id: str
    run: Run
    agent: Agent
    step: int
    assistant: dict[str, Any]  # the step's stored assistant message


@dataclass
class Ready:
    """A call allowed to run, with the arguments it runs with (a PreToolUse hook may have changed them)."""

    ref: CallRef
    tool: Executable
    arguments: dict[str, Any]


@dataclass
class Gated:
    """Exactly one is set: the stored result (refused), the call ready to run, or its pause."""

    ready: Ready | None = None
    wait: Wait | None = None
    message: dict[str, Any] | None = None  # the stored result, for "done"
    child_run_id: str | None = None  # the child run a delegation's wait is for
    error: str | None = None  # the stored result's error code, for "done" with an error


def _arguments(raw: str) -> dict[str, Any] | str:
    """The call's arguments, or why they cannot be used (the model reads it as the call's error)."""
    try:
        value = safejson.loads(raw or "{}")
    except safejson.TooDeep as exc:
        return f"arguments must be a JSON object nested at most {exc.max_depth} levels deep"
    except ValueError:
        return "arguments must be a JSON object"
    return value if isinstance(value, dict) else "arguments must be a JSON object"


def store_result(
    scope: StepScope,
    ref: CallRef,
    result: ToolResult,
    flags: dict[str, Any] | None = None,
    limit: int | None = TOOL_RESULT_LIMIT,
) -> dict[str, Any]:
    """The result as the model will read it (its message), and as clients see it (its event)."""
    run = scope.run
    whole = result.for_model(None)
    stored = stores().results.offload(scope.tenant_id, run.run_id, ref.id, whole)  # beyond what an item holds
    description = _description(scope, ref, result, whole, in_s3=stored is not None)
    content = description if description is not None else result.for_model(limit)
    message: dict[str, Any] = {"role": "tool", "tool_call_id": ref.id, "content": content}
    if result.files:  # images it returned: stored under the run, shown by stepwise.attachments.render
        files = [f.model_dump() for f in result.files]
        message[render.EXTENSION] = {"run_id": run.run_id, "attachments": files}
    stores().sessions.put_message(
        scope.tenant_id, run.session_id, run.run_id, scope.step, tool_slot(ref.index), message
    )
    payload: dict[str, Any] = {"tool_call_id": ref.id, "tool_name": ref.name}
    if result.error is not None:
        payload["error"] = result.error.model_dump()
    elif len(whole) > EVENT_OUTPUT_LIMIT:  # events are items too: 400 KB each
        payload["output"] = result.for_model(EVENT_OUTPUT_LIMIT)
    else:
        payload["output"] = result.output
    if stored is not None:
        payload["output_ref"] = stored
    if description is not None:
        payload["described"] = True  # the model read a description and can page with result_read
    payload.update(flags or {})
    events.emit(scope.tenant_id, run.run_id, "tool_result", payload)
    return message


def _description(
    scope: StepScope, ref: CallRef, result: ToolResult, whole: str, *, in_s3: bool
) -> str | None:
    """What the model reads instead of a large table (the whole kept for result_read), or None to
    send the result itself. result_read's own pages are never described again."""
    if not result.ok or ref.name == registry.RESULT_READ:
        return None
    text = tables.describe(whole, ref.id)
    if text is None:
        return None
    run = scope.run
    kept = stores().described.save(scope.tenant_id, run.session_id, run.run_id, ref.id, whole, in_s3=in_s3)
    return text if kept else None


def _done(scope: StepScope, ref: CallRef, result: ToolResult) -> Gated:
    return Gated(message=store_result(scope, ref, result), error=result.error.code if result.error else None)


def _pause(
    scope: StepScope,
    ref: CallRef,
    kind: Literal["approval", "client_tool", "delegation"],
    arguments: dict[str, Any],
    timeout: int,
    channels: Any = None,
) -> Gated:
    run = scope.run
    interaction = stores().interactions.create(
        scope.tenant_id,
        interaction_id=_interaction_id(scope, ref, kind),
        run_id=run.run_id,
        session_id=run.session_id,
        listed_session_id=run.root_session_id,  # a descendant's waits are listed in the root's session
        agent_id=run.agent_id,
        kind=kind,
        step=scope.step,
        tool_call_id=ref.id,
        tool_call_index=ref.index,
        tool_name=ref.name,
        arguments=arguments,
        timeout_seconds=timeout,
        channels=channels,
    )
    wait = Wait(
        interaction_id=interaction.interaction_id,
        tool_call_id=ref.id,
        kind=kind,
        timeout_seconds=interaction.timeout_seconds,
    )
    child = None
    if kind == "delegation":  # recorded now, so the parent's `children` always name a run; Await starts it
        try:
            child = delegation.record_child(scope.tenant_id, run, interaction).run_id
        except QuotaExceeded as exc:  # the tenant's active runs are at their limit: the model reads it
            stores().interactions.close(scope.tenant_id, interaction.interaction_id, "expired")
            return _done(scope, ref, ToolResult.failure(exc.code, f"{exc}; no child run was started"))
    return Gated(wait=wait, child_run_id=child)


def _interaction_id(scope: StepScope, ref: CallRef, kind: str) -> str:
    """Derived from the call, so a retried Step finds the interaction it created before. A delegation
    may follow an approval of the same call, so its id differs in the ULID part."""
    run = scope.run
    base = run.run_id.removeprefix("run_")
    if kind == "delegation":
        base = ids.derived_id("int", run.created_at, run.run_id, str(scope.step), str(ref.index), kind)[4:]
    return f"int_{base}_{scope.step}_{ref.index}"


def delegate(scope: StepScope, ready: Ready) -> Gated:
    """An allowed agent-tool call: the pause its child run fills (Await records and starts the child),
    or the error result that stops it here. Its span is the parent of the child run's (by the
    interaction's id, which both derive)."""
    ref = ready.ref
    interaction_id = _interaction_id(scope, ref, "delegation")
    with tracing.tool_span(
        scope.tenant_id, scope.run, scope.step, ref.name, ref.id, delegation=interaction_id
    ) as span:
        gated = _delegate(scope, ready)
        if gated.error is not None:  # refused here: no child
            tracing.tool_failed(span, gated.error)
        return gated


def _delegate(scope: StepScope, ready: Ready) -> Gated:
    tool, ref = ready.tool, ready.ref
    assert isinstance(tool, AgentTool)
    if scope.run.depth >= delegation.MAX_DEPTH:
        return _done(
            scope,
            ref,
            ToolResult.failure(
                "delegation_depth_exceeded",
                f"this run is {scope.run.depth} delegations below its root, the most there may be: "
                "answer without delegating",
            ),
        )
    try:
        stores().agents.get(scope.tenant_id, tool.agent_id)
    except NotFound:
        gone = ToolResult.failure("agent_gone", f"the agent behind {tool.name} no longer exists")
        return _done(scope, ref, gone)
    arguments = {"agent_id": tool.agent_id, "message": tool.child_message(ready.arguments)}
    return _pause(scope, ref, "delegation", arguments, delegation.DELEGATION_TIMEOUT)


def gate(scope: StepScope, ref: CallRef) -> Gated:
    """PreToolUse hooks and permission: a refusal is stored as the call's result, a call that needs a
    human or the calling app becomes a pause, an allowed one is ready to run."""
    call = next((c for c in scope.assistant.get("tool_calls") or [] if c["id"] == ref.id), None)
    raw_arguments = call["function"].get("arguments", "{}") if call else "{}"
    arguments = _arguments(raw_arguments)
    data = {
        "tool_call_id": ref.id,
        "tool_name": ref.name,
        "arguments": arguments if isinstance(arguments, dict) else raw_arguments,
    }
    events.emit(scope.tenant_id, scope.run.run_id, "tool_call", data)
    tool = registry.resolve(scope.agent, ref.name)
    if tool is None:
        return _done(
            scope, ref, ToolResult.failure("unknown_tool", f"this agent has no tool named {ref.name!r}")
        )
    if isinstance(arguments, str):
        return _done(scope, ref, ToolResult.failure("invalid_arguments", arguments))
    verdict = registry.before_tool_use(scope.tenant_id, scope.run, scope.agent, tool, arguments)
    if verdict.action == "deny":
        refusal = ToolResult.failure(verdict.code or "blocked", verdict.message or f"{tool.name} was blocked")
        return _done(scope, ref, refusal)
    arguments = verdict.arguments
    if verdict.action == "ask":
        timeout = verdict.timeout or DEFAULT_APPROVAL_TIMEOUT
        return _pause(scope, ref, "approval", arguments, timeout, verdict.channels)
    if isinstance(tool, ClientTool):
        return _pause(scope, ref, "client_tool", arguments, DEFAULT_CLIENT_TIMEOUT)
    return Gated(ready=Ready(ref=ref, tool=tool, arguments=arguments))


def execute(scope: StepScope, ready: Ready) -> dict[str, Any]:
    """Run an allowed call through the effects ledger and store its result. Whatever the tool itself
    raises becomes its own error result."""
    with tracing.tool_span(scope.tenant_id, scope.run, scope.step, ready.tool.name, ready.ref.id) as span:
        result, flags = _execute(scope, ready)
        if result.error is not None:
            tracing.tool_failed(span, result.error.code)
    return store_result(scope, ready.ref, result, flags, registry.result_limit(ready.tool))


def _execute(scope: StepScope, ready: Ready) -> tuple[ToolResult, dict[str, Any]]:
    run, tool, ref = scope.run, ready.tool, ready.ref
    assert not isinstance(tool, AgentTool), "an agent tool delegates (see delegate), it never executes"
    observability.tool_called(tool.name)
    call_scope = ledger.CallScope(
        tenant_id=scope.tenant_id,
        agent_id=run.agent_id,
        run_id=run.run_id,
        trigger_id=run.trigger_id or run.run_id,
        step=scope.step,
        tool_call_id=ref.id,
    )
    tool_scope = ToolScope(
        tenant_id=scope.tenant_id,
        agent_id=run.agent_id,
        run_id=run.run_id,
        session_id=run.session_id,
        user_id=run.user_id,
    )

    def call(key: str) -> ToolResult:
        try:
            return registry.execute(tool, ready.arguments, scope=tool_scope, idempotency_key=key)
        except Exception as exc:  # a tool's own crash is its result, not its siblings' failure
            logger.exception("tool crashed", extra={"tool_name": tool.name, "tool_call_id": ref.id})
            return ToolResult.failure(
                "tool_crashed", f"{tool.name} failed unexpectedly ({type(exc).__name__})"
            )

    # At most once per effect key; a deduplicated call answers with the stored result. What the
    # ledger or the store raise is the step's failure (the state machine retries or fails the run):
    # a claim left open then answers effect_unknown, never a second effect.
    guarded = ledger.guard(call_scope, tool, ready.arguments, call, store=stores().effects)
    result = registry.after_tool_use(
        scope.tenant_id, run, scope.agent, tool.name, ready.arguments, guarded.result
    )
    return result, guarded.flags()


def execute_all(scope: StepScope, batch: list[Ready], *, concurrently: bool) -> list[dict[str, Any]]:
    """Results in the model's order; parallel-safe calls run together, a pool of PARALLEL_TOOL_CALLS."""
    events.flush()  # the calls are in the log before they act
    if not concurrently or len(batch) < 2:
        return [execute(scope, ready) for ready in batch]
    # Each worker runs in a copy of this context, so its events join the step's outbox.
    contexts = [contextvars.copy_context() for _ in batch]
    with ThreadPoolExecutor(max_workers=min(PARALLEL_TOOL_CALLS, len(batch))) as pool:
        return list(pool.map(lambda ctx, ready: ctx.run(execute, scope, ready), contexts, batch))


# --- Waited calls ----------------------------------------------------------------------------------


@dataclass
class Settled:
    """How a waited call came out: a result to store, or an approved call to run."""

    ref: CallRef
    result: ToolResult | None = None
    ready: Ready | None = None
    spent: Usage | None = None  # a delegation's: what its child's subtree spent
    limit: int | None = TOOL_RESULT_LIMIT  # a child's answer reaches the model whole


def settle(scope: StepScope, ref: CallRef, wait: Wait) -> Settled:
    """The wait is over: an answer decides; without one, the deadline passed (a late answer that wins
    the race against the expiry still counts)."""
    interaction = stores().interactions.get(scope.tenant_id, wait.interaction_id)
    if interaction.status == "pending" and not stores().interactions.close(
        scope.tenant_id, wait.interaction_id, "expired"
    ):
        interaction = stores().interactions.get(scope.tenant_id, wait.interaction_id)  # answered meanwhile
    if interaction.kind == "delegation":
        return _delegated(scope, ref, interaction)
    if interaction.status != "answered":
        waited = "an approval" if interaction.kind == "approval" else "an answer"
        return Settled(
            ref, ToolResult.failure("timeout", f"no one gave {waited} in time; the call did not run")
        )
    return _answered(scope, ref, interaction)


def _delegated(scope: StepScope, ref: CallRef, interaction: Interaction) -> Settled:
    """The child's outcome as the call's result: its answer whole, or its error code. A child the
    parent stopped waiting for is cancelled (its subtree with it)."""
    child_id = delegation.child_run_id(interaction)
    if interaction.status != "answered":
        from stepwise.runs.cancel import cancel

        with contextlib.suppress(NotFound, Conflict):  # never started, or ended as we gave up
            cancel(scope.tenant_id, child_id, reason="its parent stopped waiting for it")
        outcome: dict[str, Any] = {"status": "timed_out", "error": {"code": "timeout"}}
        result = ToolResult.failure("timeout", "the delegated run did not answer in time; it was cancelled")
    else:
        outcome = interaction.answer or {}
        if outcome.get("status") == "succeeded":
            result = ToolResult(output=outcome.get("output"))
        else:
            error = delegation.child_error(outcome)
            result = ToolResult.failure(error.code, error.message)
    data = {"tool_call_id": ref.id, "child_run_id": child_id, "status": outcome.get("status")}
    events.emit(scope.tenant_id, scope.run.run_id, "delegation_completed", data)
    return Settled(ref, result, spent=delegation.outcome_usage(outcome), limit=None)


def _answered(scope: StepScope, ref: CallRef, interaction: Interaction) -> Settled:
    answer = interaction.answer or {}
    if interaction.kind == "client_tool":
        if answer.get("outcome") == "error":
            return Settled(ref, ToolResult.failure("client_error", json.dumps(answer.get("output"))))
        return Settled(ref, ToolResult(output=answer.get("output")))
    if not answer.get("approved"):
        reason = answer.get("reason") or "no reason given"
        return Settled(ref, ToolResult.failure("denied", f"a human denied this call: {reason}"))
    tool = registry.resolve(scope.agent, interaction.tool_name)
    bound = digest(scope.tenant_id, interaction.tool_name, interaction.arguments)
    if tool is None or isinstance(tool, ClientTool) or bound != interaction.digest:
        # the approval is bound to tool, arguments and tenant: anything else is not what was approved
        return Settled(ref, ToolResult.failure("approval_mismatch", "the approved call no longer matches"))
    return Settled(ref, ready=Ready(ref=ref, tool=tool, arguments=interaction.arguments))
