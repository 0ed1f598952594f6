"""Usage lines: what one model call (or one billable tool action) spent, as the counters and the
budgets take it.

A line is built where the call is made (the Step) and rides on the run's context until the step's
next context write, which counts it in the same DynamoDB transaction (stepwise.usage.counters): a line
is counted exactly when the run's own `usage` takes it, so the two cannot disagree.

Billable tokens follow the ApowerB rule: cached input at 25% ("otherwise users are charged for
savings already made") and cache writes at the provider's write premium, as litellm's cost map states
it (Anthropic's 1.25×; 1× where the map names no separate price).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel

from stepwise.llm.models import Usage

CACHED_RATE = 0.25
KeyOwner = Literal["agent", "tenant", "deployment"]
DEPLOYMENT: KeyOwner = "deployment"


class UsageLine(BaseModel):
    """One model call or one billable tool action. Tool lines carry `tool` (the billed action, e.g.
    `web_search_deep`) and no tokens."""

    tenant_id: str
    agent_id: str
    user_id: str | None = None
    run_id: str
    root_run_id: str
    at: datetime
    model: str | None = None
    provider: str | None = None
    tool: str | None = None
    input_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0
    billable_tokens: int = 0
    first_of_run: bool = False  # counts the run once, in the row of its first model call
    # Whose provider key paid: the deployment's unless the tenant's own keys are used (issue 24 §5
    # fills it in through `model_line(..., key_owner=)`).
    key_owner: KeyOwner = DEPLOYMENT

    @property
    def hour(self) -> str:
        return self.at.strftime("%Y-%m-%dT%H")

    def stored(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def write_premium(model: str) -> float:
    """The provider's price of a cache write over its price of plain input, from litellm's cost map
    (1.0 for a model the map does not price or prices no cache write for). litellm is already loaded
    when this runs: it is asked after a model call."""
    from stepwise.llm.client import is_scripted

    if is_scripted(model):
        return 1.0
    try:
        import litellm

        info = litellm.get_model_info(model)
    except Exception:  # noqa: BLE001 - an unpriced model bills cache writes as plain input
        return 1.0
    base = info.get("input_cost_per_token") or 0.0
    write = info.get("cache_creation_input_token_cost") or 0.0
    return float(write) / float(base) if base and write else 1.0


def billable(usage: Usage, premium: float) -> int:
    """Uncached input + 25% of cached input + output + cache writes at the write premium, rounded to
    the nearest token. `input_tokens` is the whole prompt: its cached and written parts are taken
    out before they are counted at their own rates."""
    uncached = max(usage.input_tokens - usage.cached_tokens - usage.cache_write_tokens, 0)
    exact = uncached + CACHED_RATE * usage.cached_tokens + usage.output_tokens
    exact += premium * usage.cache_write_tokens
    return int(exact + 0.5)


def model_line(
    *,
    tenant_id: str,
    agent_id: str,
    user_id: str | None,
    run_id: str,
    root_run_id: str,
    model: str,
    provider: str | None,
    usage: Usage,
    at: datetime,
    first_of_run: bool,
    key_owner: KeyOwner = DEPLOYMENT,
) -> UsageLine:
    """The line of one model call (every request of one turn, continuations included)."""
    return UsageLine(
        tenant_id=tenant_id,
        agent_id=agent_id,
        user_id=user_id,
        run_id=run_id,
        root_run_id=root_run_id,
        at=at,
        model=model,
        provider=provider,
        input_tokens=usage.input_tokens,
        cached_tokens=usage.cached_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        output_tokens=usage.output_tokens,
        cost_usd=usage.cost_usd,
        billable_tokens=billable(usage, write_premium(model)),
        first_of_run=first_of_run,
        key_owner=key_owner,
    )
