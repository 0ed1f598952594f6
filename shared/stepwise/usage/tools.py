"""Billable tool actions. `web_search` bills per mode, the search type actually sent to Exa (one
pinned in the tool's config wins over the model's, as the tool itself sends it): a standard search
(auto, neural, keyword) bills `web_search`, `deep` bills `web_search_deep`, `deep-reasoning`
`web_search_deep_reasoning`.

A failure on the platform's side is not billed: a 5xx (`provider_error`), a 429 (`rate_limited`), a
timeout, no connection, or no provider key configured (`not_configured`). The tenant's own 4xx
(`provider_rejected`, `provider_auth` for the tenant's own key) is billed: the request reached the
provider and was answered. A call refused before anything was sent (bad arguments, a blocked
destination) was never a search: not billed either.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from stepwise.tools.base import ToolResult
from stepwise.usage.lines import UsageLine

WEB_SEARCH = "web_search"
# USD per search, Exa's list prices for up to 25 results (exa.ai/pricing): what a line costs the tenant.
ACTION_PRICES: dict[str, float] = {
    "web_search": 0.005,
    "web_search_deep": 0.015,
    "web_search_deep_reasoning": 0.03,
}
_BY_TYPE = {"deep": "web_search_deep", "deep-reasoning": "web_search_deep_reasoning"}
# Error codes of a request that reached the provider and was answered for the tenant's request.
BILLED_ERRORS = frozenset({"provider_rejected", "provider_auth"})


def web_search_action(arguments: dict[str, Any], config: dict[str, Any] | None) -> str:
    """The billed action of a web_search call: its config's pinned type, else the model's, else auto."""
    pinned = (config or {}).get("search_type")
    sent = pinned or arguments.get("search_type") or "auto"
    return _BY_TYPE.get(str(sent), WEB_SEARCH)


def billed(result: ToolResult) -> bool:
    """A success, or the tenant's own 4xx; never a platform-side failure or a call never sent."""
    return result.error is None or result.error.code in BILLED_ERRORS


def tool_line(
    *,
    tenant_id: str,
    agent_id: str,
    user_id: str | None,
    run_id: str,
    root_run_id: str,
    tool_name: str,
    arguments: dict[str, Any],
    config: dict[str, Any] | None,
    result: ToolResult,
    at: datetime,
) -> UsageLine | None:
    """The line a call of `tool_name` writes, or None (not billable, or not billed this time)."""
    if tool_name != WEB_SEARCH or not billed(result):
        return None
    action = web_search_action(arguments, config)
    return UsageLine(
        tenant_id=tenant_id,
        agent_id=agent_id,
        user_id=user_id,
        run_id=run_id,
        root_run_id=root_run_id,
        at=at,
        tool=action,
        cost_usd=ACTION_PRICES[action],
    )
