"""One call of the model: the conversation fitted to its window, the budget checked before the call,
the answer streamed as chunk events, stored, and counted.

Only this module (through stepwise.llm) touches litellm; it runs in the Step function alone.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from stepwise.agents.bounds import allowed_for_step
from stepwise.agents.models import Agent
from stepwise.attachments import render
from stepwise.attachments.models import Attachment
from stepwise.core import config, observability, safejson, tracing
from stepwise.core.errors import (
    BudgetExceeded,
    ContextTooLong,
    DoomLoop,
    NotFound,
    ProviderUnavailable,
    RateLimited,
)
from stepwise.core.schema import utcnow
from stepwise.llm.client import ModelTurn, complete, provider_of
from stepwise.loop.chunks import ChunkBatcher
from stepwise.loop.prompt import build_messages, tool_declarations
from stepwise.loop.working import Working
from stepwise.runs import events
from stepwise.runs.models import Run
from stepwise.runs.ports import SessionMessage, stores
from stepwise.runs.state import RunContext
from stepwise.sessions.models import ASSISTANT_SLOT
from stepwise.settings import providers
from stepwise.tools.models import DELEGATES
from stepwise.usage import circuits, enforce
from stepwise.usage.lines import KeyOwner, model_line
from stepwise.usage.standing import Standing

DOOM_LOOP_REPEATS = 3
MAX_COMPACTION_FAILURES = 3
# Past this share of the window the incremental estimate gives way to a full count (compaction starts
# at 75%).
RECOUNT_NEAR = 0.5


def _signature(name: str, raw_arguments: Any) -> str:
    try:
        arguments = json.dumps(safejson.loads(raw_arguments or "{}"), sort_keys=True)
    except (TypeError, ValueError):  # TooDeep is a ValueError: compared as the text the model wrote
        arguments = str(raw_arguments)
    return hashlib.sha256(f"{name}\0{arguments}".encode()).hexdigest()[:16] + f":{name}:{arguments[:200]}"


def check_doom_loop(context: RunContext, turn: ModelTurn) -> RunContext:
    """The same tool with identical arguments three times in a row ends the run: a model in that loop
    rarely gets out, and every lap costs tokens and side effects."""
    signatures = [
        _signature(call["function"]["name"], call["function"].get("arguments"))
        for call in turn.assistant_message().get("tool_calls") or []
    ]
    recent = [*context.recent_calls, *signatures][-DOOM_LOOP_REPEATS:]
    if turn.tool_calls and len(recent) == DOOM_LOOP_REPEATS and len(set(recent)) == 1:
        _, name, arguments = recent[0].split(":", 2)
        raise DoomLoop(
            f"the model called {name} with the same arguments {DOOM_LOOP_REPEATS} times in a row "
            f"({arguments}); stopped to avoid a loop"
        )
    return context.model_copy(update={"recent_calls": recent})


def _summarizer(model: str, paying: providers.ProviderCredentials) -> Any:
    """The light model that summarizes old conversation: STEPWISE_SUMMARY_MODEL, else the run's model
    (the scripted model locally), called with the run's own key when it is the same provider's."""
    from stepwise.loop.compaction import summary_prompt

    light = config.models().summary_model or model
    key = paying.api_key if provider_of(light) == provider_of(model) else None

    def summarize(old: list[dict[str, Any]]) -> str:
        return complete(model=light, messages=summary_prompt(old), tools=None, api_key=key).text or ""

    return summarize


def _estimate(
    model: str, context: RunContext, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> int:
    """The next call's input tokens, with the run's kept compaction applied: the provider's count of
    the last prompt (sent with that same compaction) plus the messages added since, counted alone.
    The whole prompt is counted only without a usable last count, or near the window, where
    compaction decides on our own tokenizer's count as it always has (a provider's count and ours can
    differ by a few percent)."""
    from stepwise.loop.compaction import context_window, count_tokens, reapply

    added = len(messages) - context.counted_messages
    if context.prompt_tokens and 0 <= added <= len(messages):
        estimate = context.prompt_tokens + (count_tokens(model, messages[-added:]) if added else 0)
        if estimate < RECOUNT_NEAR * context_window(model):
            return estimate
    return count_tokens(model, reapply(messages, context.compacted), tools or None)


def _fit(
    tenant_id: str,
    run_id: str,
    context: RunContext,
    model: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    *,
    tokens: int | None,
    force: bool = False,
    paying: providers.ProviderCredentials = providers.DEPLOYMENT,
) -> tuple[list[dict[str, Any]], RunContext, bool]:
    """Compaction before the call, on a copy: the stored session keeps everything. The run's last
    compaction is applied again as it was; a new one replaces it in the context. The flag says
    whether this call compacted anew (the estimate no longer describes the prompt)."""
    from stepwise.loop.compaction import fit

    if context.compaction_failures >= MAX_COMPACTION_FAILURES and not force:
        # it did not help three times: send as is and let the provider decide
        return messages, context.model_copy(update={"compacted": None}), False
    fitted, report = fit(
        messages,
        model=model,
        tools=tools or None,
        summarize=_summarizer(model, paying),
        force=force,
        tokens=None if force else tokens,
        kept=context.compacted,
    )
    if report is None:
        return fitted, context, False
    events.emit(tenant_id, run_id, "compaction", {**report.event(), "forced": force})
    update: dict[str, Any] = {"compacted": report.kept}
    if report.over_window:
        update["compaction_failures"] = context.compaction_failures + 1
    return fitted, context.model_copy(update=update), True


def _listed(tenant_id: str, run: Run) -> render.Listed:
    """The attachments a run's record lists: the running run's from hand, an earlier run's read."""

    def listed(run_id: str) -> list[Attachment]:
        if run_id == run.run_id:
            return run.attachments
        try:
            return stores().runs.get(tenant_id, run_id).attachments
        except NotFound:
            return []

    return listed


def call_model(
    tenant_id: str,
    working: Working,
    context: RunContext,
    agent: Agent,
    step: int,
    *,
    tools_allowed: bool,
    standing: Standing | None = None,
) -> tuple[ModelTurn, RunContext]:
    """Call the model once with the run's conversation and store what it said. With `standing` (where
    the run stands against its budgets), its ancestors' token budgets are checked before the call
    and the call's usage line is put on the context for the next write to count. Raises Parked (the
    wait to return) while the provider's circuit for the paying key is open."""
    run = working.run
    model = allowed_for_step(agent.model)  # a run started before the bound was narrowed fails here
    provider = provider_of(model)
    # The agent's own key, else the tenant's, else the deployment's: cached in the function, no request.
    paying = providers.resolve(tenant_id, run.agent_id, provider)
    circuit = (
        circuits.circuit_for(tenant_id, run.agent_id, str(provider), paying.owner)
        if circuits.enabled(provider)
        else None
    )
    if circuit is not None and circuits.is_open(circuit):  # cached for seconds: no request per step
        _park(tenant_id, run, step, circuit)
    events.emit(tenant_id, run.run_id, "step_started", {"step": step})
    history = working.history
    declarations = tool_declarations(agent, history) if tools_allowed else []
    # Files are fetched into the messages here, never stored in them (stepwise.attachments.render).
    messages = render.expand(
        build_messages(agent, history, run.instructions),
        tenant_id=tenant_id,
        model=model,
        listed=_listed(tenant_id, run),
    )
    tokens = _estimate(model, context, messages, declarations)
    prompt, context, anew = _fit(
        tenant_id, run.run_id, context, model, messages, declarations, tokens=tokens, paying=paying
    )
    if run.max_tokens_budget is not None and anew:
        from stepwise.loop.compaction import count_tokens

        tokens = count_tokens(model, prompt, declarations or None)
    _check_budget(run.max_tokens_budget, context, tokens)
    if standing is not None:
        enforce.check_tree(standing, tokens)
    chunks = ChunkBatcher(tenant_id, run.run_id, step)

    def call(sent: list[dict[str, Any]]) -> ModelTurn:
        with tracing.chat_span(tenant_id, run, step, model, provider) as span:
            turn = complete(
                model=model,
                messages=sent,
                tools=declarations or None,
                temperature=agent.temperature,
                script=run.script or agent.script,
                on_text=chunks,
                api_key=paying.api_key,
            )
            tracing.record_turn(
                span, response_model=turn.model, usage=turn.usage, finish_reason=turn.finish_reason
            )
            return dataclasses.replace(turn, key_owner=paying.owner)

    # A model call takes seconds: followers see the step start. Its append (two requests in a row)
    # goes on while the model answers, not before the request (a chunk's append waits for it).
    events.flush(background=True)
    try:
        try:
            turn = call(prompt)
        except ContextTooLong:
            # Our estimate was low: compact harder and try once more; a second refusal fails the run.
            chunks.flush()
            prompt, context, _ = _fit(
                tenant_id,
                run.run_id,
                context,
                model,
                messages,
                declarations,
                tokens=None,
                force=True,
                paying=paying,
            )
            turn = call(prompt)
    except (RateLimited, ProviderUnavailable):
        chunks.flush()
        # Only a failing call touches the circuit; when this one opened it (or found it open), the run
        # parks rather than spend its retries. Otherwise the state machine retries, as before.
        if circuit is not None and circuits.record_failure(circuit, model):
            _park(tenant_id, run, step, circuit)
        raise
    if circuit is not None:
        circuits.record_success(circuit)  # a write only after failures this function saw
    chunks.flush()
    assistant = turn.assistant_message()
    # Stored with the step's next context write, which points at its calls (one transaction): the
    # context must never name calls whose message is not stored, and a step that fails before that
    # write calls the model again and overwrites this slot anyway.
    working.unsaved.append(SessionMessage(run.session_id, run.run_id, step, ASSISTANT_SLOT, assistant))
    working.current.append(assistant)
    # The provider's prompt count is the base of the next estimate (which applies the same kept
    # compaction), unless a continuation made it describe more than this prompt.
    exact = not turn.continuations
    context = context.model_copy(
        update={
            "steps": step,
            "usage": context.usage + turn.usage,
            "prompt_tokens": turn.usage.input_tokens if exact else 0,
            "counted_messages": len(messages) if exact else 0,
        }
    )
    if standing is not None:
        # Whose key paid (the agent's, the tenant's or the deployment's) is on the line, for budgets
        # that count only the deployment's keys.
        context = _with_line(tenant_id, run, agent, context, standing, model, turn, step, paying.owner)
    observability.step_taken(turn.usage, tenant_id)
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
    return turn, context


def _with_line(
    tenant_id: str,
    run: Run,
    agent: Agent,
    context: RunContext,
    standing: Standing,
    model: str,
    turn: ModelTurn,
    step: int,
    key_owner: KeyOwner,
) -> RunContext:
    """The call's usage line, on the context until the next write counts it (stepwise.usage.counters)."""
    now = utcnow()
    line = model_line(
        tenant_id=tenant_id,
        agent_id=run.agent_id,
        user_id=run.user_id,
        run_id=run.run_id,
        root_run_id=run.root_run_id or run.run_id,
        model=model,
        provider=provider_of(model),
        usage=turn.usage,
        at=now,
        first_of_run=step == 1,
        key_owner=key_owner,
    )
    delegates = any(isinstance(tool, DELEGATES) for tool in agent.tools)
    targets = enforce.targets(standing, run, own_tree=delegates, key_owner=key_owner, at=now)
    return context.model_copy(update={"unbilled": [*context.unbilled, {"line": line.stored(), **targets}]})


def _park(tenant_id: str, run: Run, step: int, circuit: circuits.Circuit) -> None:
    """Raise Parked with the run's provider wait, unless a fresh look finds the circuit closed."""
    wait = circuits.park(tenant_id, run, step, circuit)
    if wait is not None:
        raise circuits.Parked(wait)


def _check_budget(budget: int | None, context: RunContext, tokens: int) -> None:
    """Stop before a call that would spend past the budget, not after: the input is known up front.
    What the run's finished children spent counts too (a live child checks its ancestors' budgets
    itself, stepwise.usage.enforce.check_tree)."""
    if budget is None:
        return
    spent = context.usage.total + context.descendants_usage.total
    needed = spent + tokens
    if needed > budget:
        raise BudgetExceeded(
            f"the next model call needs about {needed} tokens in total, over the budget of "
            f"{budget} ({spent} spent so far, its delegated runs' included)"
        )
