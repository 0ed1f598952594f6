"""Reading usage back: the tenant's counters over a time range, summed by up to two of day, hour,
agent, model, user and tool (`GET /v1/usage`)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal, get_args

from pydantic import BaseModel

from stepwise.core.errors import Malformed
from stepwise.core.schema import utcnow
from stepwise.core.tables import UsageCounterItem, bind
from stepwise.usage.counters import COUNTER_PREFIX

GroupKey = Literal["day", "hour", "agent", "model", "user", "tool"]
GROUP_KEYS: tuple[str, ...] = get_args(GroupKey)
DEFAULT_DAYS = 30
MAX_DAYS = 366
_FIELD = {
    "day": "day",
    "hour": "hour",
    "agent": "agent_id",
    "model": "model",
    "user": "user_id",
    "tool": "tool",
}
TOKEN_FIELDS = ("input_tokens", "cached_tokens", "cache_write_tokens", "output_tokens", "billable_tokens")


class UsageRow(BaseModel):
    day: str | None = None
    hour: str | None = None
    agent_id: str | None = None
    model: str | None = None
    user_id: str | None = None
    tool: str | None = None
    input_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    billable_tokens: int = 0
    cost_usd: float | None = 0.0
    runs: int = 0
    model_calls: int = 0
    tool_calls: int = 0


def _instant(value: str | None, name: str, *, end: bool) -> datetime | None:
    if value is None or value == "":
        return None
    try:
        if len(value) == 10:
            day = date.fromisoformat(value)
            start = datetime(day.year, day.month, day.day, tzinfo=UTC)
            return start + timedelta(days=1) if end else start  # a `to` day is included whole
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise Malformed(
            f"{name}={value!r} is not an ISO 8601 date or date-time", code="invalid_range"
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def group_keys(group_by: str | None) -> list[str]:
    keys = [k.strip() for k in (group_by or "day").split(",") if k.strip()]
    unknown = [k for k in keys if k not in GROUP_KEYS]
    if unknown or not keys or len(keys) > 2 or len(set(keys)) != len(keys):
        raise Malformed(
            f"group_by takes one or two (different) of {', '.join(GROUP_KEYS)}, comma-separated; "
            f"got {group_by!r}",
            code="invalid_group_by",
        )
    return keys


def rows(tenant_id: str, start: str | None, end: str | None, group_by: str | None) -> list[UsageRow]:
    """Rows of summed usage, ordered by their keys. `cost_usd` is null for a row holding any call of a
    model without a known price (a total is never a guess)."""
    keys = group_keys(group_by)
    until = _instant(end, "to", end=True) or utcnow()
    since = _instant(start, "from", end=False) or until - timedelta(days=DEFAULT_DAYS)
    if since >= until:
        raise Malformed("from must be before to", code="invalid_range")
    if until - since > timedelta(days=MAX_DAYS):
        raise Malformed(f"a range covers at most {MAX_DAYS} days", code="invalid_range")
    first = since.astimezone(UTC).strftime("%Y-%m-%dT%H")
    last = (until - timedelta(microseconds=1)).astimezone(UTC).strftime("%Y-%m-%dT%H")
    bind()
    condition = UsageCounterItem.quota.between(f"{COUNTER_PREFIX}{first}", f"{COUNTER_PREFIX}{last}#~")
    grouped: dict[tuple[Any, ...], dict[str, Any]] = {}
    for item in UsageCounterItem.query(tenant_id, condition):
        values = {
            "day": (item.hour or "")[:10],
            "hour": item.hour,
            "agent_id": item.agent_id,
            "model": item.model,
            "user_id": item.user_id,
            "tool": item.tool,
        }
        group = tuple(values[_FIELD[k]] for k in keys)
        row = grouped.setdefault(group, {**{_FIELD[k]: values[_FIELD[k]] for k in keys}, "unpriced": 0})
        for name in (*TOKEN_FIELDS, "runs", "model_calls", "tool_calls", "unpriced"):
            row[name] = row.get(name, 0) + int(getattr(item, name) or 0)
        row["cost_usd"] = row.get("cost_usd", 0.0) + float(item.cost_usd or 0)
    out = []
    for group in sorted(grouped, key=lambda g: tuple(str(v or "") for v in g)):
        row = grouped[group]
        if row.pop("unpriced"):
            row["cost_usd"] = None
        else:
            row["cost_usd"] = round(row["cost_usd"], 10)
        out.append(UsageRow.model_validate(row))
    return out
