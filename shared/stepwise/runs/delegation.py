"""Delegation: an agent tool's call is a child run of the target agent, an execution of its own.

The parent's Step gates the call like any other, records a `delegation` interaction and the child run
(queued, in a fresh session; ids derived from the interaction so a retried Step finds them again); its
Await stores the task token on the interaction and starts the child's execution. No Lambda runs
while the child works. The child's ending answers the interaction with its outcome and sends the
token back; the parent's next Step turns that outcome into the call's result.

Moto's Step Functions interpreter cannot run nested `states:startExecution` integrations, so the
token is the whole mechanism, in AWS as locally.
"""

from __future__ import annotations

import contextlib
from typing import Any

from stepwise.core import ids
from stepwise.core.errors import NotFound
from stepwise.core.schema import utcnow
from stepwise.interactions.models import Interaction
from stepwise.llm.models import Usage
from stepwise.runs.models import Run, RunError, RunExists
from stepwise.runs.ports import stores

MAX_DEPTH = 3  # below the root: a run at depth 3 cannot delegate
DELEGATION_TIMEOUT = 24 * 3600  # seconds a parent waits for a child before the call times out


def child_run_id(interaction: Interaction) -> str:
    return ids.derived_id("run", interaction.created_at, interaction.interaction_id, "run")


def child_trigger(parent: Run, interaction: Interaction) -> str:
    """From the parent's trigger and the call's place in it (step and index, not the model's call id),
    so a replayed tree's children share their originals' triggers and the ledger sees their effects
    as done."""
    return f"delegation:{parent.trigger_id or parent.run_id}>{interaction.step}.{interaction.tool_call_index}"


def record_child(tenant_id: str, parent: Run, interaction: Interaction) -> Run:
    """The child run, recorded once (queued, in a session of its own) before its execution starts."""
    store = stores()
    run_id = child_run_id(interaction)
    with contextlib.suppress(NotFound):
        return store.runs.get(tenant_id, run_id)  # a retried Await: recorded before
    agent_id = str(interaction.arguments["agent_id"])
    session_id = ids.derived_id("ses", interaction.created_at, interaction.interaction_id, "session")
    agent = store.agents.get(tenant_id, agent_id)
    child = Run(
        run_id=run_id,
        trigger_id=child_trigger(parent, interaction),
        agent_id=agent_id,
        session_id=session_id,
        status="queued",
        input=str(interaction.arguments["message"]),
        max_steps=agent.max_steps or parent.max_steps,
        max_tokens_budget=agent.max_tokens_budget,
        tools_executed=[],
        created_at=utcnow(),
        parent_run_id=parent.run_id,
        root_run_id=parent.root_run_id or parent.run_id,
        depth=parent.depth + 1,
        parent_interaction_id=interaction.interaction_id,
        root_session_id=parent.root_session_id or parent.session_id,
        tree_budgets=tree_budgets(parent),
    )
    store.runs.check_fits(tenant_id, child)
    store.sessions.create(tenant_id, session_id, agent_id, active_run_id=run_id)
    try:
        return store.runs.create(tenant_id, child)
    except RunExists:
        return store.runs.get(tenant_id, run_id)


def tree_budgets(parent: Run) -> list[dict[str, Any]]:
    """The budgets a child's spending counts against: its parent's ancestors' and its parent's own."""
    own = (
        [{"run_id": parent.run_id, "max_tokens": parent.max_tokens_budget}]
        if parent.max_tokens_budget
        else []
    )
    return [*parent.tree_budgets, *own]


def report(tenant_id: str, child: Run) -> None:
    """The child has ended: answer its parent's wait with the outcome and resume the parent. A parent
    that stopped waiting (it ended, or its wait timed out) has nothing left to resume."""
    if child.parent_interaction_id is None:
        return
    from stepwise.runs import answers

    store = stores()
    ended = store.runs.get(tenant_id, child.run_id)
    outcome: dict[str, Any] = {
        "child_run_id": child.run_id,
        "status": ended.status,
        "output": ended.output,
        "error": ended.error.model_dump() if ended.error else None,
        "total_usage": ended.total_usage.model_dump(mode="json"),
    }
    if store.interactions.answer(tenant_id, child.parent_interaction_id, outcome, key=None, by=child.run_id):
        answers.deliver(tenant_id, child.parent_interaction_id)
        return
    waited = store.interactions.get(tenant_id, child.parent_interaction_id)
    if waited.answered_by == child.run_id:
        # This report's own answer (an ending finished again after its writer died): the parent may
        # not have heard it yet.
        if not waited.delivered:
            answers.deliver(tenant_id, child.parent_interaction_id)
    elif child.parent_run_id is not None and ended.total_usage != Usage():
        # The parent ended first and stopped this child with it (its wait was closed): what the child
        # spent still counts in the parent's tree total. One level only: the parent's own report, which
        # comes after its children's, carries it further up.
        key = f"report:{child.run_id}"
        store.runs.add_descendants_usage(tenant_id, child.parent_run_id, ended.total_usage, key=key)


def outcome_usage(outcome: dict[str, Any]) -> Usage:
    return Usage.model_validate(outcome.get("total_usage") or {})


def child_error(outcome: dict[str, Any]) -> RunError:
    error = outcome.get("error") or {}
    status = str(outcome.get("status"))
    code = str(error.get("code") or status)
    return RunError(code=code, message=str(error.get("message") or f"the delegated run {status}"))
