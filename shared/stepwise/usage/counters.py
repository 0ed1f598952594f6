"""Counting usage lines: the actions that one run-context write carries in its DynamoDB transaction.

A step's context write (stepwise.store.run_context.save) that finds usage lines on the context
becomes one TransactWriteItems: the context update (conditional on its version, as always), one
counter update per line (the tenant's hour × agent × model or tool × user), the spend of each budget
that applies, and the tree spend of the run's ancestors with a `max_tokens_budget`. One request, as
the plain context write was; each item of a transaction costs two write units.

Lines are plain dicts on the context (the run's state cannot import this package); each names the
budgets and trees it adds to, decided by the Step from what it read (stepwise.usage.standing).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pynamodb.expressions.operand import Path
from pynamodb.expressions.update import Action
from pynamodb.transactions import TransactWrite

from stepwise.core import config
from stepwise.core.schema import utcnow
from stepwise.core.tables import TREE_SEQ, BudgetItem, TreeSpendItem, UsageCounterItem, tenant_key
from stepwise.usage import budgets as budgets_
from stepwise.usage.lines import UsageLine

COUNTER_PREFIX = "usage#"


def counter_key(line: UsageLine) -> str:
    what = line.model if line.tool is None else f"tool:{line.tool}"
    return f"{COUNTER_PREFIX}{line.hour}#{line.agent_id}#{what}#{line.user_id or '-'}"


def _counter_actions(line: UsageLine) -> list[Action]:
    item = UsageCounterItem
    actions: list[Action] = [
        item.hour.set(line.hour),
        item.agent_id.set(line.agent_id),
    ]
    if line.user_id:
        actions.append(item.user_id.set(line.user_id))
    if line.tool is not None:
        actions += [item.tool.set(line.tool), item.tool_calls.add(1)]
    else:
        actions += [
            item.model.set(line.model or "unknown"),
            item.model_calls.add(1),
            item.input_tokens.add(line.input_tokens),
            item.cached_tokens.add(line.cached_tokens),
            item.cache_write_tokens.add(line.cache_write_tokens),
            item.output_tokens.add(line.output_tokens),
            item.billable_tokens.add(line.billable_tokens),
        ]
    if line.cost_usd is None:
        actions.append(item.unpriced.add(1))
    elif line.cost_usd:
        actions.append(item.cost_usd.add(line.cost_usd))
    if line.first_of_run:
        actions.append(item.runs.add(1))
    return actions


def budget_actions(period: str, at: datetime, cost: float | None, tokens: int) -> list[Action]:
    """ADD to the period's spend, REMOVE the previous period's (the item stays small)."""
    key = budgets_.period_key(period, at)
    previous = budgets_.previous_key(period, at)
    actions: list[Action] = [Path(budgets_.tokens_name(key)).add(tokens)]
    if cost:
        actions.append(Path(budgets_.cost_name(key)).add(cost))
    actions += [
        Path(budgets_.cost_name(previous)).remove(),
        Path(budgets_.tokens_name(previous)).remove(),
        Path(budgets_.warned_name(previous)).remove(),
    ]
    return actions


def count(tx: TransactWrite, tenant_id: str, lines: list[dict[str, Any]]) -> None:
    """Add `lines` (as the context holds them) to `tx`. Each item is named once: DynamoDB refuses a
    transaction that names an item twice, so what several lines add to one item is summed first."""
    counters: dict[str, list[UsageLine]] = {}
    spend: dict[tuple[str, str], tuple[float | None, int, datetime]] = {}
    trees: dict[str, int] = {}
    for raw in lines:
        line = UsageLine.model_validate(raw["line"])
        counters.setdefault(counter_key(line), []).append(line)
        tokens = line.billable_tokens
        for budget in raw.get("budgets") or []:
            key = (str(budget["scope"]), str(budget["period"]))
            cost, before, _ = spend.get(key, (0.0, 0, line.at))
            total = None if cost is None or line.cost_usd is None else cost + line.cost_usd
            spend[key] = (total if total is not None else cost, before + tokens, line.at)
        for run_id in raw.get("trees") or []:
            trees[str(run_id)] = trees.get(str(run_id), 0) + line.input_tokens + line.output_tokens
    for counter, same in counters.items():
        line = same[0]
        for other in same[1:]:
            line = line.model_copy(
                update={
                    name: getattr(line, name) + getattr(other, name)
                    for name in (
                        "input_tokens",
                        "cached_tokens",
                        "cache_write_tokens",
                        "output_tokens",
                        "billable_tokens",
                    )
                }
                | {
                    "cost_usd": None
                    if line.cost_usd is None or other.cost_usd is None
                    else line.cost_usd + other.cost_usd,
                    "first_of_run": line.first_of_run or other.first_of_run,
                }
            )
        actions = _counter_actions(line)
        if len(same) > 1:  # one item, several calls: the call counters move by their number
            actions = [a for a in actions if not _is_call_count(a)]
            calls = UsageCounterItem.tool_calls if line.tool is not None else UsageCounterItem.model_calls
            actions.append(calls.add(len(same)))
        tx.update(UsageCounterItem(tenant_id, counter), actions=actions)
    for (scope, period), (cost, tokens, at) in spend.items():
        tx.update(
            BudgetItem(tenant_id, budgets_.BUDGET_PREFIX + scope),
            actions=budget_actions(period, at, cost, tokens),
        )
    expires = utcnow() + timedelta(days=config.runtime().events_ttl_days)
    for run_id, tokens in trees.items():
        if not tokens:
            continue
        tx.update(
            TreeSpendItem(tenant_key(tenant_id, run_id), TREE_SEQ),
            actions=[TreeSpendItem.tokens.add(tokens), TreeSpendItem.expires_at.set(expires)],
        )


def _is_call_count(action: Action) -> bool:
    text = str(action)
    return text.startswith(("model_calls ", "tool_calls "))
