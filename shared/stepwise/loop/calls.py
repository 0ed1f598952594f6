"""A step's tool calls: gated in the model's order, executed through the effects ledger, their
results stored where the model will read them.

Arguments come from the stored assistant message, never from the state machine. Each call is
isolated: whatever one raises becomes its own error result, never its siblings' failure.
"""

from __future__ import annotations

import contextvars
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from aws_lambda_powertools import Logger

from stepwise import ledger, observability, safejson
from stepwise.agents.models import Agent
from stepwise.attachments import render
from stepwise.loop.models import Wait
from stepwise.mcp.models import McpToolRef
from stepwise.runs import events
from stepwise.runs.models import Run
from stepwise.store import effects, interactions, sessions
from stepwise.store.interactions import Interaction
from stepwise.store.run_context import CallRef
from stepwise.store.sessions import tool_slot
from stepwise.tools import registry, results
from stepwise.tools.base import TOOL_RESULT_LIMIT, ToolResult
from stepwise.tools.builtin import ToolScope
from stepwise.tools.models import BuiltinTool, ClientTool, HttpTool

logger = Logger(service="stepwise")

DEFAULT_APPROVAL_TIMEOUT = 300
DEFAULT_CLIENT_TIMEOUT = 3600
PARALLEL_TOOL_CALLS = 10
EVENT_OUTPUT_LIMIT = 50_000  # characters of an output copied into a tool_result event

Executable = HttpTool | BuiltinTool | McpToolRef


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
    stored = results.offload(scope.tenant_id, run.run_id, ref.id, whole)  # beyond what an item holds
    message: dict[str, Any] = {"role": "tool", "tool_call_id": ref.id, "content": result.for_model(limit)}
    if result.files:  # images it returned: stored under the run, shown by stepwise.attachments.render
        files = [f.model_dump() for f in result.files]
        message[render.EXTENSION] = {"run_id": run.run_id, "attachments": files}
    sessions.put_message(
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
    payload.update(flags or {})
    events.emit(scope.tenant_id, run.run_id, "tool_result", payload)
    return message


def _done(scope: StepScope, ref: CallRef, result: ToolResult) -> Gated:
    return Gated(message=store_result(scope, ref, result))


def _pause(
    scope: StepScope,
    ref: CallRef,
    kind: Literal["approval", "client_tool"],
    arguments: dict[str, Any],
    timeout: int,
    channels: Any = None,
) -> Gated:
    run = scope.run
    interaction = interactions.create(
        scope.tenant_id,
        # derived from the call, so a retried Step finds the interaction it created before
        interaction_id=f"int_{run.run_id.removeprefix('run_')}_{scope.step}_{ref.index}",
        run_id=run.run_id,
        session_id=run.session_id,
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
    return Gated(wait=wait)


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
    run, tool, ref = scope.run, ready.tool, ready.ref
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
        tenant_id=scope.tenant_id, agent_id=run.agent_id, run_id=run.run_id, session_id=run.session_id
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
    guarded = ledger.guard(call_scope, tool, ready.arguments, call, store=effects)
    result = registry.after_tool_use(
        scope.tenant_id, run, scope.agent, tool.name, ready.arguments, guarded.result
    )
    flags = guarded.flags()
    return store_result(scope, ref, result, flags, registry.result_limit(tool))


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


def settle(scope: StepScope, ref: CallRef, wait: Wait) -> Settled:
    """The wait is over: an answer decides; without one, the deadline passed (a late answer that wins
    the race against the expiry still counts)."""
    interaction = interactions.get(scope.tenant_id, wait.interaction_id)
    if interaction.status == "pending" and not interactions.close(
        scope.tenant_id, wait.interaction_id, "expired"
    ):
        interaction = interactions.get(scope.tenant_id, wait.interaction_id)  # answered meanwhile
    if interaction.status != "answered":
        waited = "an approval" if interaction.kind == "approval" else "an answer"
        return Settled(
            ref, ToolResult.failure("timeout", f"no one gave {waited} in time; the call did not run")
        )
    return _answered(scope, ref, interaction)


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
    bound = interactions.digest(scope.tenant_id, interaction.tool_name, interaction.arguments)
    if tool is None or isinstance(tool, ClientTool) or bound != interaction.digest:
        # the approval is bound to tool, arguments and tenant: anything else is not what was approved
        return Settled(ref, ToolResult.failure("approval_mismatch", "the approved call no longer matches"))
    return Settled(ref, ready=Ready(ref=ref, tool=tool, arguments=interaction.arguments))
