"""ModelStep: one model call per state, its answer persisted, and the decision for Route.

Only this module (through stepwise.llm) touches litellm; it runs in the model-step function alone.
"""

from __future__ import annotations

import json
from typing import Any

from stepwise import events, lifecycle
from stepwise.errors import RunStateError
from stepwise.llm.client import ModelTurn, complete, resolve_model
from stepwise.models import FailedState, Run, RunState, StepFailure, ToolCallRef
from stepwise.prompt import build_messages, tool_declarations
from stepwise.store import agents, runs, sessions
from stepwise.store.sessions import ASSISTANT_SLOT

PARALLEL_TOOL_CALLS = 10


def _assistant_message(turn: ModelTurn) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.text}
    if turn.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments, sort_keys=True)},
            }
            for call in turn.tool_calls
        ]
    return message


def _take_step(tenant_id: str, run: Run, step: int, *, tools_allowed: bool) -> ModelTurn:
    """Call the model once with the session's history and persist what it said."""
    if run.status != "running":
        raise RunStateError(f"run {run.run_id} is {run.status}; no model step")
    agent = agents.get_for_run(tenant_id, run.agent_id)
    events.emit(tenant_id, run.run_id, "step_started", {"step": step})
    history = sessions.history(tenant_id, run.session_id, run.run_id)
    declarations = tool_declarations(agent) if tools_allowed else []
    turn = complete(
        model=resolve_model(agent.model),
        messages=build_messages(agent, history),
        tools=declarations or None,
        temperature=agent.temperature,
        script=run.script or agent.script,
    )
    sessions.put_message(
        tenant_id, run.session_id, run.run_id, step, ASSISTANT_SLOT, _assistant_message(turn)
    )
    runs.record_step(tenant_id, run.run_id, step, turn.usage)
    emitted: list[tuple[Any, dict[str, Any]]] = []
    if turn.text:
        emitted.append(("chunk", {"step": step, "text": turn.text}))
    emitted.append(
        (
            "step_completed",
            {
                "step": step,
                "action": "tools" if turn.tool_calls else "final",
                "finish_reason": turn.finish_reason,
                "usage": turn.usage.model_dump(),
            },
        )
    )
    events.emit_many(tenant_id, run.run_id, emitted)
    return turn


def model_step(state: RunState) -> RunState:
    """One ReAct step. On the last allowed step tools are withheld, so the model must answer."""
    run = runs.get(state.tenant_id, state.run_id)
    agent = agents.get_for_run(state.tenant_id, run.agent_id)
    step = state.step + 1
    tools_allowed = step < state.max_steps
    turn = _take_step(state.tenant_id, run, step, tools_allowed=tools_allowed)
    if not turn.tool_calls or not tools_allowed:
        return state.model_copy(update={"step": step, "action": "final", "tool_calls": []})
    refs = []
    for index, call in enumerate(turn.tool_calls):
        tool = agent.tool(call.name)
        refs.append(
            ToolCallRef(
                id=call.id, name=call.name, index=index, parallel_safe=bool(tool and tool.parallel_safe)
            )
        )
    concurrency = PARALLEL_TOOL_CALLS if all(r.parallel_safe for r in refs) else 1
    return state.model_copy(
        update={"step": step, "action": "tools", "tool_calls": refs, "concurrency": concurrency}
    )


def sync_answer(tenant_id: str, run_id: str) -> Run:
    """`POST /v1/agents/{id}/run`: one model call without tools, the run recorded like any other."""
    state = lifecycle.prepare(RunState(tenant_id=tenant_id, run_id=run_id, max_steps=1))
    try:
        _take_step(tenant_id, runs.get(tenant_id, run_id), 1, tools_allowed=False)
    except Exception as exc:
        cause = json.dumps({"errorType": type(exc).__name__, "errorMessage": str(exc)})
        failure = StepFailure(Error=type(exc).__name__, Cause=cause)
        lifecycle.fail(FailedState(**state.model_dump(), error=failure))
        raise
    lifecycle.finalize(state)
    return runs.get(tenant_id, run_id)
