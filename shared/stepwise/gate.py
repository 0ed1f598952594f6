"""Gate: one Lambda call per tool call, in three modes.

- `gate`: PreToolUse hooks and permission; an allowed call executes right away (one state transition),
  a call that needs a human or the calling app becomes an interaction and returns `ask` or `client`.
- `resume`: after the answer arrives: an approved call executes with exactly the arguments that were
  approved; a denial or a client tool's answer becomes the result.
- `expire`: the wait's deadline passed: the call gets a timeout error the model can read.

Arguments are read from the stored assistant message, never from the state machine's payload, and a
result already stored is never produced twice (Step Functions retries the Gate).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel

from stepwise import events, ledger, observability
from stepwise.errors import RunStateError
from stepwise.mcp.models import McpToolRef
from stepwise.models import Agent, BuiltinTool, ClientTool, HttpTool, Run, ToolCallTask
from stepwise.store import agents, effects, interactions, runs, sessions
from stepwise.store.sessions import ASSISTANT_SLOT, tool_slot
from stepwise.tools import registry
from stepwise.tools.base import TOOL_RESULT_LIMIT, ToolResult
from stepwise.tools.builtin import ToolScope

DEFAULT_APPROVAL_TIMEOUT = 300
DEFAULT_CLIENT_TIMEOUT = 3600


class GateOutcome(BaseModel):
    tool_call_id: str
    status: Literal["done", "ask", "client"]  # done: the result is stored and the model will see it
    interaction_id: str | None = None
    timeout_seconds: int | None = None


class GateTask(ToolCallTask):
    mode: Literal["gate", "resume", "expire"] = "gate"
    interaction_id: str | None = None


def _arguments(raw: str) -> dict[str, Any] | None:
    try:
        value = json.loads(raw or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


EVENT_OUTPUT_LIMIT = 50_000  # characters of an output copied into a tool_result event


def _store(
    task: GateTask,
    run: Run,
    result: ToolResult,
    flags: dict[str, Any] | None = None,
    limit: int | None = TOOL_RESULT_LIMIT,
) -> GateOutcome:
    ref = task.tool_call
    sessions.put_message(
        task.tenant_id,
        run.session_id,
        run.run_id,
        task.step,
        tool_slot(ref.index),
        {"role": "tool", "tool_call_id": ref.id, "content": result.for_model(limit)},
    )
    payload: dict[str, Any] = {"tool_call_id": ref.id, "tool_name": ref.name}
    if result.error is not None:
        payload["error"] = result.error.model_dump()
    elif len(result.for_model(None)) > EVENT_OUTPUT_LIMIT:  # events are items too: 400 KB each
        payload["output"] = result.for_model(EVENT_OUTPUT_LIMIT)
    else:
        payload["output"] = result.output
    payload.update(flags or {})
    events.emit(task.tenant_id, run.run_id, "tool_result", payload)
    return GateOutcome(tool_call_id=ref.id, status="done")


def _execute(
    task: GateTask,
    run: Run,
    agent: Agent,
    tool: HttpTool | BuiltinTool | McpToolRef,
    arguments: dict[str, Any],
) -> GateOutcome:
    runs.record_tool_executed(task.tenant_id, run.run_id, tool.name)  # before it acts: a crash still counts
    observability.tool_called(tool.name)
    scope = ledger.CallScope(
        tenant_id=task.tenant_id,
        agent_id=run.agent_id,
        run_id=run.run_id,
        trigger_id=run.trigger_id or run.run_id,
        step=task.step,
        tool_call_id=task.tool_call.id,
    )
    # Through the effects ledger: at most once per effect key, and a deduplicated call answers with the
    # stored result. PostToolUse hooks see whatever the call answered, as this run's hooks.
    tool_scope = ToolScope(
        tenant_id=task.tenant_id, agent_id=run.agent_id, run_id=run.run_id, session_id=run.session_id
    )

    def call(key: str) -> ToolResult:
        return registry.execute(tool, arguments, scope=tool_scope, idempotency_key=key)

    guarded = ledger.guard(scope, tool, arguments, call, store=effects)
    result = registry.after_tool_use(task.tenant_id, run, agent, tool.name, arguments, guarded.result)
    return _store(task, run, result, guarded.flags(), registry.result_limit(tool))


def _pause(
    task: GateTask, run: Run, kind: str, arguments: dict[str, Any], timeout: int, channels: Any = None
) -> GateOutcome:
    ref = task.tool_call
    interaction = interactions.create(
        task.tenant_id,
        # derived from the call, so a retried Gate finds the interaction it created before
        interaction_id=f"int_{run.run_id.removeprefix('run_')}_{task.step}_{ref.index}",
        run_id=run.run_id,
        session_id=run.session_id,
        agent_id=run.agent_id,
        kind=kind,
        step=task.step,
        tool_call_id=ref.id,
        tool_call_index=ref.index,
        tool_name=ref.name,
        arguments=arguments,
        timeout_seconds=timeout,
        channels=channels,
    )
    status: Literal["ask", "client"] = "ask" if kind == "approval" else "client"
    return GateOutcome(
        tool_call_id=ref.id,
        status=status,
        interaction_id=interaction.interaction_id,
        timeout_seconds=interaction.timeout_seconds,
    )


def gate(task: GateTask) -> GateOutcome:
    if task.mode == "resume":
        return resume(task)
    if task.mode == "expire":
        return expire(task)
    tenant_id, ref = task.tenant_id, task.tool_call
    run = runs.get(tenant_id, task.run_id)
    observability.bind_run(run)
    if sessions.get_message(tenant_id, run.session_id, run.run_id, task.step, tool_slot(ref.index)):
        return GateOutcome(tool_call_id=ref.id, status="done")  # a retry after the result was stored

    assistant = sessions.get_message(tenant_id, run.session_id, run.run_id, task.step, ASSISTANT_SLOT) or {}
    call = next((c for c in assistant.get("tool_calls") or [] if c["id"] == ref.id), None)
    raw_arguments = call["function"].get("arguments", "{}") if call else "{}"
    arguments = _arguments(raw_arguments)
    events.emit(
        tenant_id,
        run.run_id,
        "tool_call",
        {
            "tool_call_id": ref.id,
            "tool_name": ref.name,
            "arguments": arguments if arguments is not None else raw_arguments,
        },
    )
    agent = agents.get_for_run(tenant_id, run.agent_id)
    tool = registry.resolve(agent, ref.name)
    if tool is None:
        return _store(
            task, run, ToolResult.failure("unknown_tool", f"this agent has no tool named {ref.name!r}")
        )
    if arguments is None:
        return _store(task, run, ToolResult.failure("invalid_arguments", "arguments must be a JSON object"))

    verdict = registry.before_tool_use(tenant_id, run, agent, tool, arguments)
    if verdict.action == "deny":
        refusal = ToolResult.failure(verdict.code or "blocked", verdict.message or f"{tool.name} was blocked")
        return _store(task, run, refusal)
    arguments = verdict.arguments
    if verdict.action == "ask":
        return _pause(
            task, run, "approval", arguments, verdict.timeout or DEFAULT_APPROVAL_TIMEOUT, verdict.channels
        )
    if isinstance(tool, ClientTool):
        return _pause(task, run, "client_tool", arguments, DEFAULT_CLIENT_TIMEOUT)
    return _execute(task, run, agent, tool, arguments)


def resume(task: GateTask) -> GateOutcome:
    """The answer arrived: act on exactly what was answered."""
    tenant_id, ref = task.tenant_id, task.tool_call
    run = runs.get(tenant_id, task.run_id)
    observability.bind_run(run)
    if sessions.get_message(tenant_id, run.session_id, run.run_id, task.step, tool_slot(ref.index)):
        return GateOutcome(tool_call_id=ref.id, status="done")
    if task.interaction_id is None:
        raise RunStateError("resume without an interaction")
    interaction = interactions.get(tenant_id, task.interaction_id)
    answer = interaction.answer or {}
    if interaction.kind == "client_tool":
        if answer.get("outcome") == "error":
            return _store(task, run, ToolResult.failure("client_error", json.dumps(answer.get("output"))))
        return _store(task, run, ToolResult(output=answer.get("output")))
    if not answer.get("approved"):
        reason = answer.get("reason") or "no reason given"
        return _store(task, run, ToolResult.failure("denied", f"a human denied this call: {reason}"))
    agent = agents.get_for_run(tenant_id, run.agent_id)
    tool = registry.resolve(agent, interaction.tool_name)
    bound = interactions.digest(tenant_id, interaction.tool_name, interaction.arguments)
    if tool is None or isinstance(tool, ClientTool) or bound != interaction.digest:
        # the approval is bound to tool, arguments and tenant: anything else is not what was approved
        return _store(
            task, run, ToolResult.failure("approval_mismatch", "the approved call no longer matches")
        )
    return _execute(task, run, agent, tool, interaction.arguments)


def expire(task: GateTask) -> GateOutcome:
    """The deadline passed before anyone answered."""
    tenant_id, ref = task.tenant_id, task.tool_call
    run = runs.get(tenant_id, task.run_id)
    observability.bind_run(run)
    if sessions.get_message(tenant_id, run.session_id, run.run_id, task.step, tool_slot(ref.index)):
        return GateOutcome(tool_call_id=ref.id, status="done")
    waited = "an answer"
    if task.interaction_id:
        interactions.close(tenant_id, task.interaction_id, "expired")
        if interactions.get(tenant_id, task.interaction_id).kind == "approval":
            waited = "an approval"
    return _store(
        task, run, ToolResult.failure("timeout", f"no one gave {waited} in time; the call did not run")
    )
