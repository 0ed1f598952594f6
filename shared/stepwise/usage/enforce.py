"""What the Step does with where its run stands, before each model call and after it.

- `over`: the first budget that applies and is reached (tenant, then agent, then user).
- `warn`: `budget_warning` once per period per budget, past its soft limit. "Once" is a conditional
  write of the period's `warned@` attribute: one request, only in the step that crosses the line.
- `targets`: which budgets and trees a usage line adds to (those that exist and count its key).
- `check_tree`: a run's ancestors' `max_tokens_budget`, against what their trees have spent.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pynamodb.exceptions import UpdateError
from pynamodb.expressions.operand import Path

from stepwise.core.errors import BudgetExceeded
from stepwise.core.tables import BudgetItem, bind, condition_failed
from stepwise.runs import events
from stepwise.runs.models import Run
from stepwise.usage import budgets as budgets_
from stepwise.usage.budgets import Budget
from stepwise.usage.lines import DEPLOYMENT
from stepwise.usage.standing import Standing
from stepwise.webhooks.enqueue import enqueue

PARK_MARGIN = 60  # seconds past the period's turn before a parked run looks again by itself
MAX_PARK_SECONDS = 32 * 24 * 3600


def over(standing: Standing, key_owner: str = DEPLOYMENT) -> Budget | None:
    for budget in standing.budgets:
        if budget.counts(key_owner) and budget.over() is not None:
            return budget
    return None


def exceeded(budget: Budget) -> BudgetExceeded:
    reached = budget.reached()
    return BudgetExceeded(
        f"budget {budget.scope} is reached for {budget.period_key}: spent "
        f"{reached['spend']} against {reached['limit']} {getattr(budget, str(reached['limit']))}"
    )


def park_seconds(budget: Budget, now: datetime) -> int:
    """Until the budget's next period starts: the park ends by itself then (Await's timeout)."""
    seconds = (budgets_.next_start(budget.period, now) - now).total_seconds() + PARK_MARGIN
    return int(min(max(seconds, PARK_MARGIN), MAX_PARK_SECONDS))


def warn(tenant_id: str, run: Run, standing: Standing, now: datetime, key_owner: str = DEPLOYMENT) -> None:
    for budget in standing.budgets:
        if budget.warned or not budget.counts(key_owner) or not budget.past_soft_limit():
            continue
        if _first_warning(tenant_id, budget):
            data = budget.reached() | {"soft_limit_pct": budget.soft_limit_pct, "run_id": run.run_id}
            events.emit(tenant_id, run.run_id, "budget_warning", data)
            key = f"budget_warning:{budget.scope}:{budget.period_key}"
            enqueue(tenant_id, run.target(), "budget_warning", data, key=key, at=now)


def _first_warning(tenant_id: str, budget: Budget) -> bool:
    bind()
    name = budgets_.warned_name(budget.period_key)
    try:
        BudgetItem(tenant_id, budgets_.BUDGET_PREFIX + budget.scope).update(
            actions=[Path(name).set(True)],
            condition=BudgetItem.scope.exists() & Path(name).does_not_exist(),
        )
    except UpdateError as exc:
        if condition_failed(exc):
            return False
        raise
    return True


def targets(standing: Standing, run: Run, *, own_tree: bool, key_owner: str, at: datetime) -> dict[str, Any]:
    """What a model line adds to besides its counter: the budgets that count its key, in their
    current period, and the trees it spends in (its ancestors', and its own once it can delegate)."""
    budgets = [{"scope": b.scope, "period": b.period} for b in standing.budgets if b.counts(key_owner)]
    trees = [run_id for run_id, _, _ in standing.trees]
    if own_tree and run.max_tokens_budget:
        trees.append(run.run_id)
    return {"budgets": budgets, "trees": trees}


def check_tree(standing: Standing, needed: int) -> None:
    """An ancestor's `max_tokens_budget` counts its whole tree: stop before a call that passes it."""
    for run_id, limit, spent in standing.trees:
        if spent + needed > limit:
            raise BudgetExceeded(
                f"the next model call needs about {needed} tokens; the tree of run {run_id} has spent "
                f"{spent} of its budget of {limit}"
            )
