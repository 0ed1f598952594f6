"""ModelStep: one model call per state, its answer persisted, and the decision for Route.

Only this module (through stepwise.llm) touches litellm; it runs in the model-step function alone.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from typing import Any

from stepwise import events, lifecycle, observability
from stepwise.errors import BudgetExceeded, ContextTooLong, DoomLoop, RunStateError
from stepwise.llm.client import ModelTurn, complete, resolve_model
from stepwise.models import Agent, FailedState, Run, RunState, StepFailure, ToolCallRef
from stepwise.prompt import build_messages, tool_declarations
from stepwise.store import agents, runs, sessions
from stepwise.store.sessions import ASSISTANT_SLOT
from stepwise.streaming import ChunkBatcher
from stepwise.tools import registry

PARALLEL_TOOL_CALLS = 10


DOOM_LOOP_REPEATS = 3


def _call_signatures(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(tool, canonical arguments) of every tool call in these messages, in order."""
    calls = []
    for message in messages:
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            try:
                arguments = json.dumps(json.loads(function.get("arguments") or "{}"), sort_keys=True)
            except ValueError:
                arguments = str(function.get("arguments"))
            calls.append((str(function.get("name")), arguments))
    return calls


def _check_doom_loop(current: list[dict[str, Any]], turn: ModelTurn) -> None:
    """The same tool with identical arguments three times in a row ends the run: a model in that loop
    rarely gets out, and every lap costs tokens and side effects."""
    calls = _call_signatures([*current, turn.assistant_message()])
    last = calls[-DOOM_LOOP_REPEATS:]
    if len(last) == DOOM_LOOP_REPEATS and len(set(last)) == 1 and turn.tool_calls:
        name, arguments = last[0]
        raise DoomLoop(
            f"the model called {name} with the same arguments {DOOM_LOOP_REPEATS} times in a row "
            f"({arguments[:200]}); stopped to avoid a loop"
        )


def _check_budget(run: Run, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
    """Stop before a call that would spend past the budget, not after: the input is known up front."""
    if run.max_tokens_budget is None:
        return
    from stepwise.context import count_tokens

    needed = run.usage.total + count_tokens(model, messages, tools or None)
    if needed > run.max_tokens_budget:
        raise BudgetExceeded(
            f"the next model call needs about {needed} tokens in total, over the budget of "
            f"{run.max_tokens_budget} ({run.usage.total} spent so far)"
        )


SUMMARY_MODEL_ENV = "STEPWISE_SUMMARY_MODEL"
MAX_COMPACTION_FAILURES = 3


def _summarizer(model: str) -> Any:
    """The light model that summarizes old conversation: STEPWISE_SUMMARY_MODEL, else the run's model
    (the scripted model locally)."""
    from stepwise.context import summary_prompt

    light = os.environ.get(SUMMARY_MODEL_ENV) or model

    def summarize(old: list[dict[str, Any]]) -> str:
        return complete(model=light, messages=summary_prompt(old), tools=None).text or ""

    return summarize


def _fit(
    tenant_id: str,
    run: Run,
    model: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    *,
    force: bool = False,
) -> list[dict[str, Any]]:
    """Compaction before the call, on a copy: the stored session keeps everything."""
    from stepwise.context import fit

    if run.compaction_failures >= MAX_COMPACTION_FAILURES and not force:
        return messages  # it did not help three times: send as is and let the provider decide
    fitted, report = fit(
        messages, model=model, tools=tools or None, summarize=_summarizer(model), force=force
    )
    if report is not None:
        events.emit(tenant_id, run.run_id, "compaction", {**asdict(report), "forced": force})
        if report.over_window:
            runs.record_compaction_failure(tenant_id, run.run_id)
    return fitted


def _take_step(tenant_id: str, run: Run, agent: Agent, step: int, *, tools_allowed: bool) -> ModelTurn:
    """Call the model once with the session's history and persist what it said."""
    if run.status != "running":
        raise RunStateError(f"run {run.run_id} is {run.status}; no model step")
    events.emit(tenant_id, run.run_id, "step_started", {"step": step})
    earlier, current = sessions.history(tenant_id, run.session_id, run.run_id)
    declarations = tool_declarations(agent) if tools_allowed else []
    model = resolve_model(agent.model)
    messages = _fit(tenant_id, run, model, build_messages(agent, earlier + current), declarations)
    _check_budget(run, model, messages, declarations)
    chunks = ChunkBatcher(tenant_id, run.run_id, step)

    def call(prompt: list[dict[str, Any]]) -> ModelTurn:
        return complete(
            model=model,
            messages=prompt,
            tools=declarations or None,
            temperature=agent.temperature,
            script=run.script or agent.script,
            on_text=chunks,
        )

    try:
        turn = call(messages)
    except ContextTooLong:
        # Our estimate was low: compact harder and try once more; a second refusal fails the run.
        chunks.flush()
        turn = call(_fit(tenant_id, run, model, messages, declarations, force=True))
    chunks.flush()
    sessions.put_message(
        tenant_id, run.session_id, run.run_id, step, ASSISTANT_SLOT, turn.assistant_message()
    )
    runs.record_step(tenant_id, run.run_id, step, turn.usage)  # spent, whatever happens next
    observability.step_taken(turn.usage)
    if tools_allowed:
        _check_doom_loop(current, turn)
    events.emit(
        tenant_id,
        run.run_id,
        "step_completed",
        {
            "step": step,
            "action": "tools" if turn.tool_calls else "final",
            "finish_reason": turn.finish_reason,
            "continuations": turn.continuations,
            "usage": turn.usage.model_dump(),
        },
    )
    return turn


def model_step(state: RunState) -> RunState:
    """One ReAct step. On the last allowed step tools are withheld, so the model must answer."""
    # The step's waits are over (every approval and client tool was answered or expired).
    runs.transition(state.tenant_id, state.run_id, "running", allowed_from={"waiting"})
    run = runs.get(state.tenant_id, state.run_id)
    observability.bind_run(run, step=state.step + 1)
    agent = agents.get_for_run(state.tenant_id, run.agent_id)
    step = state.step + 1
    tools_allowed = step < state.max_steps
    turn = _take_step(state.tenant_id, run, agent, step, tools_allowed=tools_allowed)
    if not turn.tool_calls or not tools_allowed:
        return state.model_copy(update={"step": step, "action": "final", "tool_calls": []})
    refs = []
    for index, call in enumerate(turn.tool_calls):
        tool = registry.resolve(agent, call.name)
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
        run = runs.get(tenant_id, run_id)
        observability.bind_run(run, step=1)
        _take_step(tenant_id, run, agents.get_for_run(tenant_id, run.agent_id), 1, tools_allowed=False)
    except Exception as exc:
        cause = json.dumps({"errorType": type(exc).__name__, "errorMessage": str(exc)})
        failure = StepFailure(Error=type(exc).__name__, Cause=cause)
        lifecycle.fail(FailedState(**state.model_dump(), error=failure))
        raise
    lifecycle.finalize(state)
    return runs.get(tenant_id, run_id)
