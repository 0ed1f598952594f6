"""Budgets as the API sets and shows them, and resuming the runs they parked.

A run parked on its budget resumes when the budget allows it again: raised or deleted (here, at
once), its period turned (the park's own timeout, and the reconciler's sweep), or on request
(`POST /v1/runs/{id}/resume`). Every path asks the same question of the run's budgets as its Step
would, then answers the park (stepwise.runs.answers.resume_parked); the Step checks once more.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pynamodb.expressions.operand import Path
from pynamodb.expressions.update import Action

from stepwise.core import aws, config
from stepwise.core.errors import Conflict, NotFound
from stepwise.core.schema import utcnow
from stepwise.core.tables import BudgetItem, UsageCounterItem, bind
from stepwise.runs import answers
from stepwise.runs.models import Run
from stepwise.runs.ports import stores
from stepwise.usage import budgets as budgets_
from stepwise.usage import parked as parked_
from stepwise.usage.budgets import Budget, BudgetSet
from stepwise.usage.counters import COUNTER_PREFIX
from stepwise.usage.standing import _plain

SWEEP_LIMIT = 50  # parked runs the reconciler's sweep looks at per pass, oldest first
BUDGET = "budget"


def _scope_matches(scope: str, attributes: dict[str, Any]) -> bool:
    kind, _, ident = scope.partition(":")
    if kind == "tenant":
        return True
    return attributes.get("agent_id" if kind == "agent" else "user_id") == ident


def _seed(tenant_id: str, scope: str, period: str, now: datetime) -> tuple[float, int]:
    """What the scope has spent in the period so far, from the usage counters: a budget set mid-period
    starts from the truth, not from zero."""
    key = budgets_.period_key(period, now)
    bind()
    condition = UsageCounterItem.quota.startswith(f"{COUNTER_PREFIX}{key}")
    cost, tokens = 0.0, 0
    for item in UsageCounterItem.query(tenant_id, condition):
        if _scope_matches(scope, {"agent_id": item.agent_id, "user_id": item.user_id}):
            cost += float(item.cost_usd or 0)
            tokens += int(item.billable_tokens or 0)
    return cost, tokens


def _check_agent(tenant_id: str, scope: str) -> None:
    if scope.startswith("agent:"):
        stores().agents.get(tenant_id, scope.partition(":")[2])  # another tenant's is a 404 too


def put(tenant_id: str, scope: str, body: BudgetSet) -> Budget:
    """Set (create or replace) the scope's budget; its paused runs resume if it now allows them."""
    budgets_.check_scope(scope)
    _check_agent(tenant_id, scope)
    now = utcnow()
    bind()
    key = budgets_.period_key(body.period, now)
    cost, tokens = _seed(tenant_id, scope, body.period, now)
    item = BudgetItem
    actions: list[Action] = [
        item.scope.set(scope),
        item.period.set(body.period),
        item.on_exceed.set(body.on_exceed),
        item.count_keys.set(body.count_keys),
        item.updated_at.set(now),
        Path(budgets_.cost_name(key)).set(Path(budgets_.cost_name(key)) | cost),  # if_not_exists
        Path(budgets_.tokens_name(key)).set(Path(budgets_.tokens_name(key)) | tokens),
    ]
    for name, value in (
        ("max_cost_usd", body.max_cost_usd),
        ("max_billable_tokens", body.max_billable_tokens),
        ("soft_limit_pct", body.soft_limit_pct),
    ):
        attribute = getattr(item, name)
        actions.append(attribute.set(value) if value is not None else attribute.remove())
    BudgetItem(tenant_id, budgets_.BUDGET_PREFIX + scope).update(actions=actions)
    resume_allowed(tenant_id)
    return get(tenant_id, scope)


def _raw(tenant_id: str) -> list[dict[str, Any]]:
    client = aws.client("dynamodb")
    found: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {
        "TableName": config.tables().quotas,
        "KeyConditionExpression": "tenant_id = :t AND begins_with(quota, :p)",
        "ExpressionAttributeValues": {":t": {"S": tenant_id}, ":p": {"S": budgets_.BUDGET_PREFIX}},
        "ConsistentRead": True,
    }
    while True:
        page = client.query(**kwargs)
        found += [_plain(i) for i in page.get("Items", [])]
        if not page.get("LastEvaluatedKey"):
            return found
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def list_all(tenant_id: str) -> list[Budget]:
    now = utcnow()
    return [b for b in (budgets_.from_plain(i, now) for i in _raw(tenant_id)) if b is not None]


def get(tenant_id: str, scope: str) -> Budget:
    budgets_.check_scope(scope)
    for budget in list_all(tenant_id):
        if budget.scope == scope:
            return budget
    raise NotFound(f"no budget is set for {scope}", code="budget_not_found")


def delete(tenant_id: str, scope: str) -> None:
    get(tenant_id, scope)
    bind()
    BudgetItem(tenant_id, budgets_.BUDGET_PREFIX + scope).delete()
    resume_allowed(tenant_id)


def for_run(tenant_id: str, run: Run) -> list[Budget]:
    """The run's budgets as its Step would read them: the tenant's, its agent's, its user's."""
    scopes = budgets_.scopes_of(run.agent_id, run.user_id)
    return [b for b in list_all(tenant_id) if b.scope in scopes]


def _blocking(budgets: list[Budget]) -> Budget | None:
    return next((b for b in budgets if b.over() is not None), None)


def _try_resume(entry: parked_.ParkedRun, by: str) -> bool:
    """Resume one parked run if its budgets allow it; drop the entry of a run that moved on."""
    interaction = stores().interactions.get(entry.tenant_id, entry.interaction_id)
    if interaction.status != "pending":
        parked_.remove(entry.key)  # resumed already, or its timeout passed and the Step moved on
        return False
    run = stores().runs.get(entry.tenant_id, entry.run_id)
    if run.done:
        parked_.remove(entry.key)
        return False
    if _blocking(for_run(entry.tenant_id, run)) is not None:
        return False
    answers.resume_parked(entry.tenant_id, entry.interaction_id, {"resumed_by": by}, by=by)
    parked_.remove(entry.key)
    return True


def resume_allowed(tenant_id: str) -> int:
    """Resume the tenant's budget-parked runs that their budgets now allow, oldest first."""
    return sum(_try_resume(entry, "budget_changed") for entry in parked_.of_tenant(tenant_id, kind=BUDGET))


def resume_run(tenant_id: str, run_id: str) -> Run:
    """`POST /v1/runs/{id}/resume`: one budget-parked run, if its budgets allow it. 409 `run_not_paused`
    for a run not parked on its budget, 409 `budget_exceeded` while a budget still stops it."""
    run = stores().runs.get(tenant_id, run_id)  # 404 for an unknown id or another tenant's
    entries = [e for e in parked_.of_tenant(tenant_id, kind=BUDGET) if e.run_id == run_id]
    live = [e for e in entries if stores().interactions.get(tenant_id, e.interaction_id).status == "pending"]
    if not live:
        raise Conflict(f"run {run_id} is not paused on a budget", code="run_not_paused")
    blocking = _blocking(for_run(tenant_id, run))
    if blocking is not None:
        raise Conflict(
            f"budget {blocking.scope} is still reached; raise it, delete it or wait for its next period",
            code="budget_exceeded",
            details=blocking.reached(),
        )
    for entry in live:
        _try_resume(entry, "request")
    return stores().runs.get(tenant_id, run_id)


def sweep(limit: int = SWEEP_LIMIT) -> int:
    """The reconciler's pass: resume parked runs whose budget now allows them (a period turned, a
    budget changed without its resume getting through), oldest first per tenant, at most `limit`."""
    resumed = 0
    for entry in parked_.page(kind=BUDGET, limit=limit):
        try:
            resumed += _try_resume(entry, "sweep")
        except NotFound:
            parked_.remove(entry.key)  # the run or its park is gone
    return resumed
