"""Gate: one Lambda call per tool call. It resolves permission, records the call, executes the tool
and stores its result, so an allowed call costs one state transition.

Its arguments are read from the stored assistant message, never from the state machine's payload.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from stepwise import events
from stepwise.models import ToolCallTask
from stepwise.store import agents, runs, sessions
from stepwise.store.sessions import ASSISTANT_SLOT, tool_slot
from stepwise.tools import registry
from stepwise.tools.base import ToolResult


class GateOutcome(BaseModel):
    tool_call_id: str
    status: str  # "done": the result is stored and the model will see it


def _arguments(raw: str) -> dict[str, Any] | None:
    try:
        value = json.loads(raw or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def gate(task: ToolCallTask) -> GateOutcome:
    tenant_id, ref = task.tenant_id, task.tool_call
    run = runs.get(tenant_id, task.run_id)
    slot = tool_slot(ref.index)
    done = GateOutcome(tool_call_id=ref.id, status="done")
    if sessions.get_message(tenant_id, run.session_id, run.run_id, task.step, slot) is not None:
        return done  # a Step Functions retry after the result was stored: never run a tool twice

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
    tool = agent.tool(ref.name)
    if tool is None:
        result = ToolResult.failure("unknown_tool", f"this agent has no tool named {ref.name!r}")
    elif arguments is None:
        result = ToolResult.failure("invalid_arguments", "arguments must be a JSON object")
    elif (decision := registry.permission_for(agent, tool)) == "deny":
        result = ToolResult.failure("permission_denied", f"tool {ref.name} is not permitted for this agent")
    elif decision == "ask":
        # Human approval arrives with the approvals work (task tokens); until then an ask is refused.
        result = ToolResult.failure("approval_required", f"tool {ref.name} needs a human approval")
    else:
        runs.record_tool_executed(tenant_id, run.run_id, tool.name)
        result = registry.execute(tool, arguments)

    sessions.put_message(
        tenant_id,
        run.session_id,
        run.run_id,
        task.step,
        slot,
        {"role": "tool", "tool_call_id": ref.id, "content": result.for_model()},
    )
    payload: dict[str, Any] = {"tool_call_id": ref.id, "tool_name": ref.name}
    payload.update({"output": result.output} if result.ok else {"error": result.error.model_dump()})  # type: ignore[union-attr]
    events.emit(tenant_id, run.run_id, "tool_result", payload)
    return done
