"""Step: one Lambda invocation per model step, and Route's decision.

In order: prepare the run (its first step only), finish the previous step's waited calls in the
model's order, run the calls that were still to come after them, call the model, then gate every
call it asked for and execute those that need no human (consecutive parallel-safe calls together).
It stops at the first call a human or the app must answer and returns the wait; on a final answer
the run ends here. Everything it must remember between invocations is in the run's context (one
item, one read); the conversation itself is cached in the function (stepwise.loop.working).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from aws_lambda_powertools import Logger
from pydantic import TypeAdapter

from stepwise.agents.models import Agent
from stepwise.attachments import render
from stepwise.core import concurrently, observability, tracing
from stepwise.core.errors import BudgetExceeded, DoomLoop, HookDenied, RateLimited, RunStateError
from stepwise.core.schema import utcnow
from stepwise.loop import done, execution, failed, gating, metering, parking, recall, whatif, working
from stepwise.loop import waits as waits_
from stepwise.loop.calls import Paused, Ready, Refused, Resolved, Settled, StepScope
from stepwise.loop.model_call import call_model, check_doom_loop
from stepwise.loop.results import store_result
from stepwise.loop.working import Working
from stepwise.runs import events, late, shares, suspension
from stepwise.runs.hooks import fire
from stepwise.runs.models import Run
from stepwise.runs.ports import stores
from stepwise.runs.state import (
    CallRef,
    CircuitProbe,
    ContextMovedOn,
    RunContext,
    RunState,
    StepEvent,
    SyncAnswer,
    Wait,
    Weigh,
)
from stepwise.sessions.models import USER_SLOT
from stepwise.tools.models import DELEGATES, ClientTool
from stepwise.usage import circuits, enforce
from stepwise.usage.standing import Standing

logger = Logger(service="stepwise")


def _prepare(tenant_id: str, work: Working, agent: Agent, context: RunContext) -> RunContext:
    """The run's first step: OnRunStart hooks (a deny fails the run), running, the user's message."""
    run = work.run
    if run.status == "queued":
        decision = fire(tenant_id, run.run_id, agent, "OnRunStart", arguments={"message": run.input})
        if decision.action == "deny":
            raise HookDenied(decision.message or "an OnRunStart hook refused this run")
    recalled = recall.for_user_turn(tenant_id, agent, run)  # stored with the turn: a rebuild sends the same
    user: dict[str, Any] = {"role": "user", "content": recall.user_turn(run.input, recalled)}
    if run.attachments:  # by id: the files and their names are the run's, fetched for each model call
        ids = [a.attachment_id for a in run.attachments]
        user[render.EXTENSION] = {"run_id": run.run_id, "attachment_ids": ids}
    store = stores()
    # `running`, the checkpoint and the user's message go out together: the two writes are at fixed
    # keys, so a retry writes the same, and a run that turns out not to start (cancelled while
    # queued) leaves two items no history reads (only completed runs are folded in).
    started, _, _ = concurrently.together(
        lambda: store.runs.transition(tenant_id, run.run_id, "running", allowed_from={"queued"}),
        lambda: store.sessions.put_checkpoint(tenant_id, run.session_id, run.run_id, work.earlier),
        lambda: store.sessions.put_message(tenant_id, run.session_id, run.run_id, 0, USER_SLOT, user),
    )
    if not started and store.runs.get(tenant_id, run.run_id).status != "running":  # running: a retry
        raise RunStateError(f"run {run.run_id} is {run.status}; it cannot start")
    work.current = [user]
    work.run = run.model_copy(update={"status": "running"})
    if started:
        data: dict[str, Any] = {
            "agent_id": run.agent_id,
            "session_id": run.session_id,
            "max_steps": run.max_steps,
        }
        if recalled is not None:
            data["recalled_memory_ids"] = recalled.memory_ids
        events.emit(tenant_id, run.run_id, "run_started", data)
    return context.model_copy(update={"prepared": True})


def _scope(tenant_id: str, work: Working, agent: Agent, context: RunContext) -> StepScope:
    assistant: dict[str, Any] = next((m for m in reversed(work.current) if m.get("role") == "assistant"), {})
    replay = whatif.replay_for(tenant_id, work.run, context) if work.run.what_if_of else None
    return StepScope(
        tenant_id=tenant_id, run=work.run, agent=agent, step=context.steps, assistant=assistant, replay=replay
    )


def _answered_ids(work: Working) -> set[str]:
    """The calls of the current step whose result is stored (the conversation after its request)."""
    tail: list[str] = []
    for message in reversed(work.current):
        if message.get("role") != "tool":
            break
        tail.append(str(message.get("tool_call_id")))
    return set(tail)


def _add_results(work: Working, context: RunContext, results: list[dict[str, Any]]) -> None:
    """Results join the conversation in the model's order, as a rebuild from the store would read
    them (they are stored by call index), so a cache hit and a miss send the same bytes."""
    order = {ref.id: ref.index for ref in context.calls}
    tail = len(work.current)
    while tail > 0 and work.current[tail - 1].get("role") == "tool":
        tail -= 1
    results_tail = [*work.current[tail:], *results]
    work.current[tail:] = sorted(results_tail, key=lambda m: order.get(str(m.get("tool_call_id")), 1 << 30))


def _executing(context: RunContext, ready: list[Ready]) -> RunContext:
    """Recorded before the calls act, so a crash after acting still counts them."""
    return context.model_copy(
        update={
            "tools_executed": [*context.tools_executed, *(r.tool.name for r in ready)],
            "inflight": [r.ref.index for r in ready],
        }
    )


@dataclass
class Acted:
    """What acting on a step's calls left: the context (fenced), the results to add, the new pauses."""

    context: RunContext
    results: list[dict[str, Any]]
    paused: list[Paused]


def _act(
    tenant_id: str,
    work: Working,
    context: RunContext,
    scope: StepScope,
    items: list[Ready] | list[Settled],
    *,
    in_order: bool,
) -> Acted:
    """The one way a step's calls act, whether they were just gated or their wait is over. The Ready
    ones are fenced in the context first (a retried Step never runs them twice). A batch just gated
    then starts its delegations' children and runs the rest (together when several are
    parallel-safe); settled waits go `in_order`, one at a time in the model's order: each delegates,
    runs, or has its result stored."""
    ready = [i for i in items if isinstance(i, Ready)]
    if ready:
        # The events that led here (the model's turn, the calls) start their append now and land
        # while the context is written; every call waits for them before it acts (execution).
        events.flush(background=True)
        context = _write(tenant_id, work, _executing(context, ready))
    results: list[dict[str, Any]] = []
    paused: list[Paused] = []

    def delegated(item: Ready) -> None:
        outcome = gating.delegate(scope, item)  # a delegation's child runs on its own; the call waits
        if isinstance(outcome, Paused):
            paused.append(outcome)
        else:
            results.append(outcome.message)

    if not in_order:
        if any(isinstance(call.tool, DELEGATES) for call in ready):
            events.flush()  # the calls are in the log before a child run starts
        for call in ready:
            if isinstance(call.tool, DELEGATES):
                delegated(call)
        inline = [r for r in ready if not isinstance(r.tool, DELEGATES)]
        results += execution.execute_all(scope, inline, concurrently=len(inline) > 1)
        return Acted(context, results, paused)
    events.flush()  # what led here is in the log before the calls act
    for item in items:  # one at a time, in the model's order
        if isinstance(item, Resolved):
            results.append(store_result(scope, item.ref, item.result, limit=item.limit))
        elif isinstance(item.tool, DELEGATES):
            delegated(item)
        else:
            results.append(execution.execute(scope, item))
    return Acted(context, results, paused)


def _finish_waits(
    tenant_id: str, work: Working, agent: Agent, context: RunContext
) -> tuple[RunContext, list[Wait]]:
    """Apply each answer (an approved call runs with exactly the approved arguments; an approved
    delegation starts its child, a new wait) or expire the wait, in the model's order."""
    # Only a human's or the app's wait made the run `waiting` (Await); through a delegation it stayed
    # `running`, and a transition from `waiting` would only be a failed conditional write.
    waited_on_someone = any(w.kind != "delegation" for w in context.waits)
    if waited_on_someone and stores().runs.transition(
        tenant_id, work.run.run_id, "running", allowed_from={"waiting"}
    ):
        work.run = work.run.model_copy(update={"status": "running"})
    scope = _scope(tenant_id, work, agent, context)
    by_id = {ref.id: ref for ref in context.calls}
    waits = sorted(context.waits, key=lambda w: by_id[w.tool_call_id].index)
    done_ids = _answered_ids(work)
    settled = [
        waits_.settle(scope, by_id[w.tool_call_id], w) for w in waits if w.tool_call_id not in done_ids
    ]
    # A wait whose result an earlier, killed attempt of this step stored is not settled again, but what
    # its child spent was counted only in that attempt's context write, which never happened.
    stored = [waits_.spent_of(scope, w) for w in waits if w.tool_call_id in done_ids]
    spent = sum(
        (s.spent for s in settled if isinstance(s, Resolved) and s.spent is not None),
        sum(stored, context.descendants_usage),
    )
    acted = _act(tenant_id, work, context, scope, settled, in_order=True)
    _add_results(work, acted.context, acted.results)
    started = [p.child_run_id for p in acted.paused if p.child_run_id is not None]
    update = {"waits": [p.wait for p in acted.paused], "inflight": [], "descendants_usage": spent}
    context = acted.context.model_copy(update={**update, "children": [*context.children, *started]})
    return context, [p.wait for p in acted.paused]


def _batches(pending: list[CallRef]) -> list[list[CallRef]]:
    """Consecutive parallel-safe calls form one batch; any other call is a batch of its own."""
    out: list[list[CallRef]] = []
    for ref in pending:
        if ref.parallel_safe and out and out[-1][-1].parallel_safe:
            out[-1].append(ref)
        else:
            out.append([ref])
    return out


def _run_calls(
    tenant_id: str, work: Working, agent: Agent, context: RunContext
) -> tuple[RunContext, list[Wait]]:
    """Gate and execute the step's calls still to come, until one must wait."""
    scope = _scope(tenant_id, work, agent, context)
    done_ids = _answered_ids(work)
    for batch in _batches([r for r in context.pending_calls if r.id not in done_ids]):
        gated = [gating.gate(scope, ref) for ref in batch]
        results = [g.message for g in gated if isinstance(g, Refused)]
        paused = [g for g in gated if isinstance(g, Paused)]
        ready = [g for g in gated if isinstance(g, Ready)]
        if ready:
            acted = _act(tenant_id, work, context, scope, ready, in_order=False)
            context, results, paused = acted.context, results + acted.results, paused + acted.paused
        _add_results(work, context, results)
        started = [p.child_run_id for p in paused if p.child_run_id is not None]
        context = context.model_copy(
            update={
                "next_call": batch[-1].index + 1,
                "inflight": [],
                "children": [*context.children, *started],
            }
        )
        if scope.replay is not None:  # what became of the calls, saved with the cursor that passed them
            context = context.model_copy(update={"what_if_calls": dict(scope.replay.calls)})
        if paused:
            waits = [p.wait for p in paused]
            return context.model_copy(update={"waits": waits}), waits
    return context.model_copy(update={"next_call": len(context.calls)}), []


def _save(tenant_id: str, work: Working, context: RunContext) -> RunContext:
    billed = metering.drain()  # the step's billable tool calls: counted with this write
    if billed:
        context = context.model_copy(update={"unbilled": [*context.unbilled, *billed]})
    # The step's events (its results) start their append now: it overlaps the context write, and the
    # end of the step waits for it.
    events.flush(background=True)
    context = _write(tenant_id, work, context)
    working.keep(tenant_id, work, context.version)
    return context


def _write(tenant_id: str, work: Working, context: RunContext) -> RunContext:
    """The context write, with the messages that must land with it (the model's turn)."""
    saved = stores().run_context.save(tenant_id, work.run.run_id, context, work.unsaved)
    work.unsaved = []
    return saved


def _wait(state: RunState, context: RunContext, waits: list[Wait]) -> RunState:
    if len(waits) == 1:
        return RunState(
            tenant_id=state.tenant_id, run_id=state.run_id, step=context.steps, action="wait", wait=waits[0]
        )
    return RunState(
        tenant_id=state.tenant_id, run_id=state.run_id, step=context.steps, action="waits", waits=waits
    )


def _call_refs(agent: Agent, names: list[tuple[str, str]]) -> list[CallRef]:
    refs = []
    for index, (call_id, name) in enumerate(names):
        tool = gating.resolve(agent, name)
        refs.append(
            CallRef(id=call_id, name=name, index=index, parallel_safe=bool(tool and tool.parallel_safe))
        )
    return refs


def step(state: RunState) -> RunState:
    """One ReAct step. On the last allowed step tools are withheld, so the model must answer."""
    try:
        with events.batched(state.tenant_id, state.run_id):
            return _step(state)
    except ContextMovedOn as moved:
        # The run ended (a cancel) while this Step waited on the model: the answer was paid all the
        # same, so it is counted on the ended run, its tree and the usage counters.
        working.forget(state.tenant_id, state.run_id)
        if moved.spent:
            late.count(state.tenant_id, state.run_id, moved.context.unsaved_usage, moved.context.unbilled)
        raise
    except BaseException:
        # The cached conversation may hold what this attempt added before it failed: a retry starts
        # from what the store holds.
        working.forget(state.tenant_id, state.run_id)
        raise


def _step(state: RunState) -> RunState:
    tenant_id, run_id = state.tenant_id, state.run_id
    suspension.check_step(tenant_id)  # the operator's kill switch: no cost, the list is cached
    known = working.cached_run(tenant_id, run_id)
    if known is not None:
        # The run's agent and budgets follow from its record (cached here), not from its context:
        # the two reads go out together, one round trip.
        context, agent = concurrently.both(
            lambda: stores().run_context.load(tenant_id, run_id), lambda: _agent_read(tenant_id, known)
        )
        _check_not_ended(state, context)
        work = working.load(tenant_id, run_id, context.version)  # another function's step: read afresh
    else:
        # Nothing cached (the run's first step in this function): its record does not depend on its
        # context either; then its conversation and its agent both follow from the record.
        context, run = concurrently.both(
            lambda: stores().run_context.load(tenant_id, run_id), lambda: stores().runs.get(tenant_id, run_id)
        )
        _check_not_ended(state, context)
        work, agent = concurrently.both(
            lambda: working.load(tenant_id, run_id, context.version, run=run),
            lambda: _agent_read(tenant_id, run),
        )
    observability.bind_run(work.run, step=context.steps + 1)
    with tracing.step_span(tenant_id, work.run, context.steps + 1):
        return _take(state, work, context, agent)


def _check_not_ended(state: RunState, context: RunContext) -> None:
    if context.ended:
        raise RunStateError(f"run {state.run_id} has ended; no step")


AgentRead = tuple["Agent", "Standing | None"] | Exception


def _agent_read(tenant_id: str, run: Run) -> AgentRead:
    """The agent read, or what it raised: raised where the step used to read it (after the context
    said the run has not ended), so a deleted agent fails the run exactly as before."""
    try:
        return _agent(tenant_id, run)
    except Exception as exc:  # noqa: BLE001 - handed back, raised by _take
        return exc


def _with_run_tools(agent: Agent, run: Run) -> Agent:
    """The agent as this run sees it: its own tools, then the run's own client tools (a door's caller
    brought them); declarations, gating and waits then treat them like the agent's client tools."""
    if not run.client_tools:
        return agent
    own = [ClientTool.model_validate(spec) for spec in run.client_tools]
    return agent.model_copy(update={"tools": [*agent.tools, *own]})


def _agent(tenant_id: str, run: Run) -> tuple[Agent, Standing | None]:
    """The run's agent (a deleted agent fails the run here) and, where spend is kept, where the run
    stands against its budgets, read with it in one request (stepwise.usage.standing)."""
    spend = stores().spend
    if spend is None:
        return stores().agents.get_for_run(tenant_id, run.agent_id), None
    agent, standing = spend.load(tenant_id, run)
    return agent, standing


def _budget_gate(state: RunState, work: Working, context: RunContext, standing: Standing) -> RunState | None:
    """Before the model call: a reached budget parks the run (`pause`, a `budget` wait until it is
    raised or its period turns) or fails it (`fail`, budget_exceeded); past a soft limit, a warning."""
    tenant_id = state.tenant_id
    now = utcnow()
    budget = enforce.over(standing)
    if budget is None:
        enforce.warn(tenant_id, work.run, standing, now)
        return None
    if budget.on_exceed == "fail":
        raise enforce.exceeded(budget)
    parked, context = parking.park(
        tenant_id,
        work.run,
        context,
        "budget",
        budget.reached(),
        event="budget_reached",
        timeout_seconds=enforce.park_seconds(budget, now),
    )
    context = _save(tenant_id, work, context)
    return _wait(state, context, [parked.wait])


def _take(state: RunState, work: Working, context: RunContext, read: AgentRead) -> RunState:
    tenant_id = state.tenant_id
    if isinstance(read, Exception):
        raise read
    agent, standing = read
    if work.run.what_if is not None:  # the request's model, prompt, tools and temperature
        agent = whatif.overridden(agent, work.run.what_if)
    agent = recall.with_memory_tools(tenant_id, _with_run_tools(agent, work.run), work.run)
    if not context.prepared:
        context = _prepare(tenant_id, work, agent, context)
    elif work.run.status not in ("running", "waiting"):
        raise RunStateError(f"run {state.run_id} is {work.run.status}; no model step")
    if standing is not None:  # tool lines add to the budgets that count every key
        metering.start(enforce.targets(standing, work.run, own_tree=False, key_owner="tenant", at=utcnow()))
    if any(w.run_level for w in context.waits):  # a park is over: resumed, or its timeout passed
        context = parking.unpark(tenant_id, work.run, context)
        work.run = work.run.model_copy(update={"status": "running"})
    if context.waits or context.pending_calls:
        waits: list[Wait] = []
        if context.waits:
            context, waits = _finish_waits(tenant_id, work, agent, context)
        if not waits:
            context, waits = _run_calls(tenant_id, work, agent, context)
        context = _save(tenant_id, work, context)  # before the model: a retried Step never redoes them
        if waits:
            return _wait(state, context, waits)

    if standing is not None:
        parked = _budget_gate(state, work, context, standing)
        if parked is not None:
            return parked
    number = context.steps + 1
    tools_allowed = number < work.run.max_steps
    if work.run.status == "waiting" and stores().runs.transition(
        tenant_id, work.run.run_id, "running", allowed_from={"waiting"}
    ):  # resumed from a provider's circuit: no call of it was waiting
        work.run = work.run.model_copy(update={"status": "running"})
    try:
        turn, context = call_model(
            tenant_id, work, context, agent, number, tools_allowed=tools_allowed, standing=standing
        )
    except circuits.Parked as parked:  # the provider's circuit is open: wait, no Lambda, no retries
        context = _save(tenant_id, work, context)  # prepared: the resumed Step goes on from here
        return _wait(state, context, [parked.wait])
    if not turn.tool_calls or not tools_allowed:
        context = _save(tenant_id, work, context.model_copy(update={"calls": [], "next_call": 0}))
        done.finish(tenant_id, work, agent, context)
        working.forget(tenant_id, state.run_id)
        return RunState(tenant_id=tenant_id, run_id=state.run_id, step=number, action="done")
    try:
        context = check_doom_loop(context, turn)
    except DoomLoop:
        _save(tenant_id, work, context)  # the call was spent: its usage counts whatever happens next
        raise
    refs = _call_refs(agent, [(c.id, c.name) for c in turn.tool_calls])
    context = context.model_copy(update={"calls": refs, "next_call": 0, "inflight": [], "waits": []})
    context, waits = _run_calls(tenant_id, work, agent, context)
    context = _save(tenant_id, work, context)
    if waits:
        return _wait(state, context, waits)
    return RunState(tenant_id=tenant_id, run_id=state.run_id, step=number, action="continue")


@cache
def _events() -> TypeAdapter[StepEvent]:
    return TypeAdapter(StepEvent)


def handle(event: dict[str, Any]) -> dict[str, Any]:
    """The Step function's one entry: a state of the run's execution, or one of the API's requests."""
    match _events().validate_python(event):
        case SyncAnswer(tenant_id=tenant_id, run_id=run_id):
            run = sync_answer(tenant_id, run_id)
            return {"run_id": run.run_id, "status": run.status}
        case Weigh(tenant_id=tenant_id, agent_id=agent_id):  # tokens are counted where litellm is
            from stepwise.loop import weight

            return weight.weigh_request(tenant_id, agent_id)
        case CircuitProbe(probe=spec):  # the reconciler's sweep tries an open circuit's provider
            return {"ok": circuits.probe_call(spec)}
        case RunState() as state:
            return _shared_step(state).model_dump()
    raise AssertionError("unreachable: StepEvent is a closed union")


def _shared_step(state: RunState) -> RunState:
    """A step of the run's execution, within one of its tenant's step shares (stepwise.runs.shares):
    kept while the run goes on, given back when it pauses (its ending gives it back otherwise)."""
    until = shares.enter(state.tenant_id, state.run_id, state.share_until)
    taken = step(state)
    if taken.action == "continue":
        return taken.model_copy(update={"share_until": until})
    if taken.action in ("wait", "waits"):
        shares.leave(state.tenant_id, state.run_id)
    return taken


def sync_answer(tenant_id: str, run_id: str) -> Run:
    """`POST /v1/agents/{id}/run`: one step without tools, the run recorded and ended like any other."""
    try:
        taken = step(RunState(tenant_id=tenant_id, run_id=run_id, max_steps=1))
        if taken.wait is not None and taken.wait.kind == "budget":
            # A synchronous answer cannot wait for its budget: the park is closed and the run fails.
            stores().interactions.close(tenant_id, taken.wait.interaction_id, "expired")
            raise BudgetExceeded("a budget of this run is reached; a synchronous run cannot wait for it")
        if taken.action != "done":  # parked on an open circuit: a synchronous caller cannot wait
            raise RateLimited(
                "the provider is paused (its circuit is open after repeated refusals); retry later"
            )
    except Exception as exc:
        failed.fail_with(tenant_id, run_id, exc)
        raise
    return stores().runs.get(tenant_id, run_id)
