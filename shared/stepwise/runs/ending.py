"""The one way a run ends, whoever ends it: the Step that gets the final answer, the Failed state,
a cancel, or the reconciler. The terminal transition decides (a conditional write: exactly one ending
wins); the winner closes what the run waits on, stops its children, queues its webhook, writes the
terminal event, tells its parent (or workflow), hands the session on and fires OnRunComplete. A
loser finishes what a winner that died midway left undone (`settle`)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from aws_lambda_powertools import Logger

from stepwise.core import aws, observability, tracing
from stepwise.core.errors import NotFound
from stepwise.interactions.models import Interaction
from stepwise.llm.models import Usage
from stepwise.runs import delegation, events, late, shares
from stepwise.runs.hooks import fire
from stepwise.runs.models import ACTIVE_STATUSES, EventType, Run, RunError, RunStatus
from stepwise.runs.ports import stores
from stepwise.runs.queue import start_next, stop, stop_run
from stepwise.runs.state import RunContext
from stepwise.webhooks.enqueue import enqueue

logger = Logger(service="stepwise")


def _terminal_event(status: RunStatus) -> EventType:
    if status == "succeeded":
        return "run_completed"
    return "run_cancelled" if status == "cancelled" else "run_failed"


def end_run(
    tenant_id: str,
    run_id: str,
    status: RunStatus,
    *,
    output: str | None = None,
    error: RunError | None = None,
    context: RunContext | None = None,
) -> bool:
    """Give the run its terminal `status`, once. True when this call ended it. `context`: the run's
    context as the caller just wrote it (else it is read)."""
    store = stores()
    context = context or store.run_context.load(tenant_id, run_id)
    fields: dict[str, Any] = {}
    if context.prepared:  # the counters leave the context for the run item
        fields.update(
            steps=context.steps,
            input_tokens=context.usage.input_tokens,
            output_tokens=context.usage.output_tokens,
            cached_tokens=context.usage.cached_tokens,
            cache_write_tokens=context.usage.cache_write_tokens,
            cost_usd=context.usage.cost_usd,
            children=list(context.children) or None,
            descendants_usage=context.descendants_usage.model_dump(mode="json"),
            tools_executed=list(context.tools_executed),
            compaction_failures=context.compaction_failures,
        )
        if context.what_if_calls:
            fields["what_if_calls"] = dict(context.what_if_calls)
    if output is not None:
        fields["output"] = output
    if error is not None:
        fields["error"] = error.model_dump()
    run = store.runs.get(tenant_id, run_id)
    events.flush()  # what the run did is in its log before its status says it ended
    if not store.runs.transition(tenant_id, run_id, status, allowed_from=ACTIVE_STATUSES, **fields):
        settle(tenant_id, run_id)
        return False
    marked = store.run_context.mark_ended(tenant_id, run_id)
    if marked.version > context.version:
        # A Step wrote between this ending's read and the fence (its model call had just answered):
        # what it spent is in its context, not in the counters just copied onto the run. Its usage
        # lines were counted with that write.
        late.count(tenant_id, run_id, late.minus(marked.usage, context.usage), [])
    shares.leave(tenant_id, run_id)  # a step share it held between steps or in a failed one
    tracing.run_ended(tenant_id, run, status, usage=context.usage, error_code=error.code if error else None)
    if status == "succeeded":
        observability.run_succeeded()
    elif error is not None and status != "cancelled":
        observability.run_failed(error.code)
    ended = run.model_copy(update={"status": status, "output": output, "error": error})
    # What the transition just copied onto the run, without reading it back.
    _follow_through(tenant_id, ended, _ending_data(ended, context.steps, context.usage))
    return True


def settle(tenant_id: str, run_id: str) -> None:
    """After an ending this call did not win: finish that ending if its winner died midway (a Lambda
    killed mid-ending; the retried Step's Failed state, a cancel or the reconciler then comes here).
    A log without its terminal event means the follow-through stopped before it: all of it is done
    again. With the event written, what comes after it (the parent told, the workflow called back,
    the session handed on) is done again. Every part is idempotent, so a winner still at work and
    this call may both do it."""
    store = stores()
    run = store.runs.get(tenant_id, run_id)
    if not run.done:
        _hand_on(tenant_id, run.session_id, run_id)
        return
    head = store.events.head(tenant_id, run_id)
    if head is None or not head.done:
        logger.warning("finishing an ending whose writer stopped midway", extra={"run_id": run_id})
        _follow_through(tenant_id, run, _ending_data(run, run.steps, run.usage))
        return
    _tell_waiters(tenant_id, run)
    _hand_on(tenant_id, run.session_id, run_id)


def _ending_data(run: Run, steps: int, usage: Usage) -> dict[str, Any]:
    if run.status == "succeeded":
        return {"output": run.output, "steps": steps, "usage": usage.model_dump()}
    data: dict[str, Any] = {"error": run.error.model_dump() if run.error else None}
    if run.status == "cancelled":
        data["reason"] = run.error.message if run.error else None
    return data


def _follow_through(tenant_id: str, run: Run, data: dict[str, Any]) -> None:
    """What an ended run owes the world, in an order that lets `settle` finish it: the terminal event
    comes after the run's own affairs are closed (its waits, its children, its session's history, its
    webhook queued) and before anyone who waits on it hears (its parent, its workflow), so a follower
    sees a child end before its parent goes on. Each step is idempotent: conditional writes, keyed
    deliveries, task tokens that answer once."""
    store = stores()
    run_id, status = run.run_id, run.status
    waited = store.interactions.for_run(tenant_id, run_id, "pending")
    for pending in waited:
        store.interactions.close(tenant_id, pending.interaction_id, "expired")  # its links now answer 410
    _stop_children(tenant_id, run_id, [w for w in waited if w.kind == "delegation"])
    if run.kind == "workflow" and status != "succeeded":
        _stop_node_runs(tenant_id, run_id, list(store.run_context.load(tenant_id, run_id).children))
    if status == "succeeded":
        with contextlib.suppress(NotFound):
            store.sessions.complete_run(tenant_id, run.session_id, run_id)
    terminal = _terminal_event(status)
    # Keyed on the ending itself: a second follow-through of the same ending queues nothing more.
    enqueue(tenant_id, run.target(), terminal, {"status": status, **data}, key="ending", at=run.created_at)
    events.flush()
    # A log that is done takes nothing more (store.events): only one follow-through writes it.
    wrote = bool(events.emit_many(tenant_id, run_id, [(terminal, data)]))
    _tell_waiters(tenant_id, run)
    _hand_on(tenant_id, run.session_id, run_id)
    if wrote:
        _on_run_complete(tenant_id, run.agent_id, run_id, status, run.output)


def _tell_waiters(tenant_id: str, run: Run) -> None:
    delegation.report(tenant_id, run)  # a child's parent resumes with its outcome
    _call_back(run, run.status, run.error)  # an eval case's EvalRun execution (or a workflow's node) goes on


def _call_back(run: Run, status: RunStatus, error: RunError | None = None) -> None:
    """Send the run's callback token back with its outcome, once (only the winning ending gets here).
    An execution that stopped waiting (the eval run was stopped, its wait timed out) has nothing to
    resume; any other failure is logged, never raised: the run has ended whatever its waiter hears."""
    if not run.callback_token:
        return
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        sfn = aws.client("stepfunctions")
        if run.trigger == "workflow" and status != "succeeded":
            # A workflow's node run fails its task, so the node's Retry and Catch see it (its error
            # names the run's status; the cause carries the run's error).
            cause = {"run_id": run.run_id, "status": status, **(error.model_dump() if error else {})}
            sfn.send_task_failure(
                taskToken=run.callback_token, error="Run.Failed", cause=json.dumps(cause)[:32_000]
            )
            return
        sfn.send_task_success(
            taskToken=run.callback_token, output=json.dumps({"run_id": run.run_id, "status": status})
        )
    except (BotoCoreError, ClientError):
        logger.warning("the run's callback could not be sent", extra={"run_id": run.run_id})


def _stop_children(tenant_id: str, run_id: str, delegations: list[Interaction]) -> None:
    """The children the run still waited for stop with it (and theirs with them, through this same
    ending): nothing of a finished tree keeps working or keeps a human waiting."""
    for waited in delegations:
        child_id = delegation.child_run_id(waited)
        with contextlib.suppress(NotFound):
            child = stores().runs.get(tenant_id, child_id)
            if child.done:
                continue
            stop_run(child, f"its parent run {run_id} ended")  # a workflow tool's: its workflow's machine
            reason = RunError(code="cancelled", message=f"its parent run {run_id} ended")
            end_run(tenant_id, child_id, "cancelled", error=reason)


def _stop_node_runs(tenant_id: str, run_id: str, children: list[str]) -> None:
    """A workflow run that did not succeed stops every node run still going (a cancel mid-map
    stops every item's run); the execution itself is stopped by whoever cancelled it."""
    for child_id in children:
        with contextlib.suppress(NotFound):
            if stores().runs.get(tenant_id, child_id).done:
                continue
            stop(child_id, f"its workflow run {run_id} ended")
            end_run(
                tenant_id,
                child_id,
                "cancelled",
                error=RunError(code="cancelled", message=f"its workflow run {run_id} ended"),
            )


def _hand_on(tenant_id: str, session_id: str, run_id: str) -> None:
    """Give the run's session to its next queued run (a no-op when that happened already)."""
    with contextlib.suppress(NotFound):  # the session was deleted: nobody waits on it
        start_next(tenant_id, session_id, run_id)


def _on_run_complete(tenant_id: str, agent_id: str, run_id: str, status: str, output: str | None) -> None:
    """Fire and forget: the run is final, so nothing a hook says or does can change it."""
    try:
        agent = stores().agents.get(tenant_id, agent_id)
    except NotFound:
        return
    if agent.hooks:
        fire(tenant_id, run_id, agent, "OnRunComplete", arguments={"status": status}, output=output)
