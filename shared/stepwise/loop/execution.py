"""Execution: a Ready call runs through the effects ledger, PostToolUse hooks see its result, and the
result is stored where the model reads it. Each call is isolated: whatever one raises becomes its
own error result, never its siblings' failure."""

from __future__ import annotations

import contextvars
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aws_lambda_powertools import Logger

from stepwise import ledger
from stepwise.agents.models import Agent
from stepwise.attachments.models import Attachment
from stepwise.core import observability, tracing
from stepwise.loop import metering
from stepwise.loop.calls import Message, Ready, StepScope
from stepwise.loop.results import store_result
from stepwise.mcp.models import McpToolRef
from stepwise.runs import events
from stepwise.runs.hooks import fire
from stepwise.runs.models import Run
from stepwise.runs.ports import stores
from stepwise.tools import registry
from stepwise.tools.base import ToolResult
from stepwise.tools.builtin import ToolScope
from stepwise.tools.models import DELEGATES

logger = Logger(service="stepwise")

PARALLEL_TOOL_CALLS = 10


def execute(scope: StepScope, ready: Ready) -> Message:
    """Run an allowed call through the effects ledger and store its result. Whatever the tool itself
    raises becomes its own error result."""
    with tracing.tool_span(scope.tenant_id, scope.run, scope.step, ready.tool.name, ready.ref.id) as span:
        result, flags = _execute(scope, ready)
        if scope.replay is not None:  # a what-if run's unmatched read, run live as it allowed
            flags = {**flags, "live": True}
        if result.error is not None:
            tracing.tool_failed(span, result.error.code)
    return store_result(scope, ready.ref, result, flags, registry.result_limit(ready.tool))


def _execute(scope: StepScope, ready: Ready) -> tuple[ToolResult, dict[str, Any]]:
    tool, ref = ready.tool, ready.ref
    assert not isinstance(tool, DELEGATES), "an agent or workflow tool delegates (gating.delegate)"
    observability.tool_called(tool.name)
    tool_scope = scope.tool_scope()

    def call(key: str) -> ToolResult:
        try:
            if isinstance(tool, McpToolRef):
                return _call_mcp(tool, ready.arguments, tool_scope)
            return registry.run(tool, ready.arguments, scope=tool_scope, idempotency_key=key)
        except Exception as exc:  # a tool's own crash is its result, not its siblings' failure
            logger.exception("tool crashed", extra={"tool_name": tool.name, "tool_call_id": ref.id})
            return ToolResult.failure(
                "tool_crashed", f"{tool.name} failed unexpectedly ({type(exc).__name__})"
            )

    # At most once per effect key; a deduplicated call answers with the stored result. What the
    # ledger or the store raise is the step's failure (the state machine retries or fails the run):
    # a claim left open then answers effect_unknown, never a second effect.
    #
    # The calls are in the log before they act: their append was started before the context write
    # (stepwise.loop.step._act) and overlaps that write and the claim; it must have landed once the
    # claim is won and before the tool acts (`before_act`; if it failed, the claim is released).
    # The confirm stays before the result is stored, in order: a step that dies between the effect
    # and its confirm must leave no stored result, so its retry answers effect_unknown.
    guarded = ledger.guard(
        scope.call_scope(ref), tool, ready.arguments, call, store=stores().effects, before_act=events.flush
    )
    metering.bill(scope, ready, guarded.result)  # what the provider answered, before any hook
    result = after_tool_use(
        scope.tenant_id, scope.run, scope.agent, tool.name, ready.arguments, guarded.result
    )
    return result, guarded.flags()


def execute_all(scope: StepScope, batch: list[Ready], *, concurrently: bool) -> list[Message]:
    """Results in the model's order; parallel-safe calls run together, a pool of PARALLEL_TOOL_CALLS."""
    if not concurrently or len(batch) < 2:
        return [execute(scope, ready) for ready in batch]
    # Each worker runs in a copy of this context, so its events join the step's outbox.
    contexts = [contextvars.copy_context() for _ in batch]
    with ThreadPoolExecutor(max_workers=min(PARALLEL_TOOL_CALLS, len(batch))) as pool:
        return list(pool.map(lambda ctx, ready: ctx.run(execute, scope, ready), contexts, batch))


def after_tool_use(
    tenant_id: str, run: Run, agent: Agent, tool_name: str, arguments: dict[str, Any], result: ToolResult
) -> ToolResult:
    """PostToolUse hooks: `modified_output` replaces the result; a deny withholds it."""
    if not agent.hooks:
        return result
    output = result.output if result.ok else {"error": result.error.model_dump() if result.error else None}
    decision = fire(
        tenant_id, run.run_id, agent, "PostToolUse", tool_name=tool_name, arguments=arguments, output=output
    )
    if decision.action == "deny":
        return ToolResult.failure("blocked_by_hook", decision.message or "the result was withheld by a hook")
    if decision.modified_output is not None:
        return ToolResult(output=decision.modified_output)
    return result


def _call_mcp(tool: McpToolRef, arguments: dict[str, Any], scope: ToolScope) -> ToolResult:
    """An MCP call whose images are kept under the run (before the ledger stores the result, which
    holds only their references), for the model to be shown as images."""
    from stepwise import mcp
    from stepwise.attachments import intake

    kept: list[Attachment] = []

    def keep(mime: str, data: bytes) -> str | None:
        attachment = intake.keep_tool_image(scope.tenant_id, scope.run_id, tool.name, mime, data)
        if attachment is None:
            return None
        kept.append(attachment)
        return f"[image {len(kept)}: {attachment.content_type}, {attachment.size} bytes, shown to you]"

    result = mcp.call_tool(
        tool.server,
        tool.tool.name,
        arguments,
        tenant_id=scope.tenant_id,
        agent_id=scope.agent_id,
        on_image=keep,
    )
    return result.model_copy(update={"files": kept}) if kept else result
