"""Budgets: a tenant's, an agent's or a user's limit on cost or billable tokens per day or month, and
what a run does when it is reached (`pause` on a `budget` wait, or `fail` with `budget_exceeded`).

One item per budget (QuotasTable, quota = "budget#<scope>") holds the limits and the spend. The spend
lives in attributes named after their period (`cost@2026-12-04`, `tokens@2026-12-04` for a daily
budget, `cost@2026-12` for a monthly one): a step's usage transaction ADDs to the current period's
attributes without reading the item or knowing whether the period just turned, and a new period
simply starts from an attribute that does not exist yet. Each ADD also REMOVEs the previous period's
attributes, so the item stays small. The check before a model call reads the run's (at most three)
budget items in the same BatchGetItem as its agent (stepwise.usage.standing).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from stepwise.core.errors import Malformed
from stepwise.core.ids import USER_ID
from stepwise.core.schema import Strict, Timestamp

Period = Literal["day", "month"]
OnExceed = Literal["pause", "fail"]
CountKeys = Literal["all", "deployment"]
BUDGET_PREFIX = "budget#"
_AGENT = r"agt_[0-9A-HJKMNP-TV-Z]{26}"


class BudgetSet(Strict):
    """`PUT /v1/budgets/{scope}`. `count_keys: "deployment"` counts only model calls paid with the
    deployment's provider keys (a tenant's own keys are its own bill)."""

    period: Period
    max_cost_usd: float | None = Field(default=None, gt=0)
    max_billable_tokens: int | None = Field(default=None, ge=1)
    soft_limit_pct: int | None = Field(default=None, ge=1, le=99)
    on_exceed: OnExceed = "pause"
    count_keys: CountKeys = "all"

    @model_validator(mode="after")
    def _a_limit(self) -> BudgetSet:
        if self.max_cost_usd is None and self.max_billable_tokens is None:
            raise ValueError("a budget needs max_cost_usd, max_billable_tokens or both")
        return self


class Spend(BaseModel):
    cost_usd: float = 0.0
    billable_tokens: int = 0


class Budget(BudgetSet):
    scope: str
    period_key: str  # the current period: "2026-12-04" or "2026-12"
    spend: Spend = Field(default_factory=Spend)
    warned: bool = False  # budget_warning was emitted this period
    updated_at: Timestamp | None = None

    def over(self) -> str | None:
        """The limit that is reached ("max_cost_usd" or "max_billable_tokens"), None while under."""
        if self.max_cost_usd is not None and self.spend.cost_usd >= self.max_cost_usd:
            return "max_cost_usd"
        if self.max_billable_tokens is not None and self.spend.billable_tokens >= self.max_billable_tokens:
            return "max_billable_tokens"
        return None

    def past_soft_limit(self) -> bool:
        if self.soft_limit_pct is None:
            return False
        share = self.soft_limit_pct / 100
        cost = self.max_cost_usd is not None and self.spend.cost_usd >= share * self.max_cost_usd
        tokens = (
            self.max_billable_tokens is not None
            and self.spend.billable_tokens >= share * self.max_billable_tokens
        )
        return cost or tokens

    def counts(self, key_owner: str) -> bool:
        return self.count_keys == "all" or key_owner == "deployment"

    def shown(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def reached(self) -> dict[str, Any]:
        """What `budget_reached` and `budget_warning` say: the budget, its spend and its limit."""
        limit = self.over() or ("max_cost_usd" if self.max_cost_usd is not None else "max_billable_tokens")
        return {
            "budget": self.scope,
            "period": self.period,
            "period_key": self.period_key,
            "limit": limit,
            "max_cost_usd": self.max_cost_usd,
            "max_billable_tokens": self.max_billable_tokens,
            "spend": self.spend.model_dump(),
            "on_exceed": self.on_exceed,
        }


def check_scope(scope: str) -> str:
    """`tenant`, `agent:<agent id>` or `user:<user id>`; anything else is a 400 `invalid_scope`."""
    import re

    kind, _, ident = scope.partition(":")
    ok = (
        scope == "tenant"
        or (kind == "agent" and re.fullmatch(_AGENT, ident) is not None)
        or (kind == "user" and re.fullmatch(USER_ID, ident) is not None)
    )
    if not ok:
        raise Malformed(
            f"{scope!r} is not a budget scope: use tenant, agent:<agent_id> or user:<user_id>",
            code="invalid_scope",
        )
    return scope


def scopes_of(agent_id: str, user_id: str | None) -> list[str]:
    """The budgets that apply to a run: its tenant's, its agent's, its user's."""
    return ["tenant", f"agent:{agent_id}", *([f"user:{user_id}"] if user_id else [])]


def period_key(period: str, at: datetime) -> str:
    return at.strftime("%Y-%m-%d") if period == "day" else at.strftime("%Y-%m")


def previous_key(period: str, at: datetime) -> str:
    if period == "day":
        return period_key(period, at - timedelta(days=1))
    first = at.replace(day=1)
    return period_key(period, first - timedelta(days=1))


def next_start(period: str, at: datetime) -> datetime:
    """When the period after `at`'s starts (UTC)."""
    day = at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return day + timedelta(days=1)
    first = day.replace(day=1)
    return (first + timedelta(days=32)).replace(day=1)


def cost_name(key: str) -> str:
    return f"cost@{key}"


def tokens_name(key: str) -> str:
    return f"tokens@{key}"


def warned_name(key: str) -> str:
    return f"warned@{key}"


def _number(value: Any) -> float:
    if isinstance(value, Decimal):
        return float(value)
    return float(value or 0)


def from_plain(attributes: dict[str, Any], now: datetime) -> Budget | None:
    """A budget from its item's attributes as plain Python values (None for a stub without limits)."""
    if not attributes.get("period") or not attributes.get("scope"):
        return None
    period = str(attributes["period"])
    key = period_key(period, now)
    updated = attributes.get("updated_at")
    return Budget(
        scope=str(attributes["scope"]),
        period=period,
        max_cost_usd=_number(attributes["max_cost_usd"])
        if attributes.get("max_cost_usd") is not None
        else None,
        max_billable_tokens=(
            int(_number(attributes["max_billable_tokens"]))
            if attributes.get("max_billable_tokens") is not None
            else None
        ),
        soft_limit_pct=(
            int(_number(attributes["soft_limit_pct"]))
            if attributes.get("soft_limit_pct") is not None
            else None
        ),
        on_exceed=str(attributes.get("on_exceed") or "pause"),
        count_keys=str(attributes.get("count_keys") or "all"),
        period_key=key,
        spend=Spend(
            cost_usd=_number(attributes.get(cost_name(key))),
            billable_tokens=int(_number(attributes.get(tokens_name(key)))),
        ),
        warned=bool(attributes.get(warned_name(key))),
        updated_at=datetime.fromisoformat(str(updated)) if updated else None,
    )
