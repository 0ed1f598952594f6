"""Usage lines and budgets, the pure parts: billable tokens (cached input at 25%, cache writes at the
provider's premium), web_search billed per mode sent and never for a platform-side failure, budget
limits and periods, and the CLI's usage table."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from stepwise.llm.client import _litellm
from stepwise.llm.models import Usage
from stepwise.tools.base import ToolResult
from stepwise.usage import budgets, lines, tools
from stepwise.usage.budgets import Budget, Spend
from stepwise_cli.usage import usage_lines

AT = datetime(2026, 12, 31, 23, 30, tzinfo=UTC)


def test_cached_input_counts_at_a_quarter_and_cache_writes_at_the_write_premium() -> None:
    usage = Usage(input_tokens=10_000, cached_tokens=8_000, cache_write_tokens=1_000, output_tokens=500)

    # uncached 1,000 + 25% of 8,000 + 500 output + 1,000 writes at 1.25×
    assert lines.billable(usage, premium=1.25) == 1_000 + 2_000 + 500 + 1_250
    assert lines.billable(Usage(input_tokens=100, output_tokens=7), premium=1.0) == 107


def test_the_write_premium_is_litellm_s_cost_map_ratio() -> None:
    _litellm()  # loaded as the Step loads it (the bundled map, no fetch)

    assert lines.write_premium("claude-sonnet-4-5") == pytest.approx(1.25)
    assert lines.write_premium("gpt-4o") == 1.0  # no separate cache-write price: written as input
    assert lines.write_premium("scripted") == 1.0
    assert lines.write_premium("no-such-model-anywhere") == 1.0


@pytest.mark.parametrize(
    ("arguments", "config", "action"),
    [
        ({}, None, "web_search"),
        ({"search_type": "neural"}, None, "web_search"),
        ({"search_type": "deep"}, None, "web_search_deep"),
        ({"search_type": "deep-reasoning"}, {}, "web_search_deep_reasoning"),
        ({"search_type": "auto"}, {"search_type": "deep"}, "web_search_deep"),  # pinned wins
        ({"search_type": "deep-reasoning"}, {"search_type": "keyword"}, "web_search"),
    ],
)
def test_web_search_bills_the_mode_actually_sent(
    arguments: dict[str, str], config: dict[str, str] | None, action: str
) -> None:
    line = _line(arguments, config, ToolResult(output={"results": []}))

    assert line is not None and line.tool == action
    assert line.cost_usd == tools.ACTION_PRICES[action]


@pytest.mark.parametrize(
    ("code", "billed"),
    [
        ("provider_error", False),  # 5xx
        ("rate_limited", False),  # 429
        ("timeout", False),
        ("unreachable", False),
        ("not_configured", False),  # no EXA_API_KEY
        ("invalid_arguments", False),  # never sent
        ("provider_rejected", True),  # the tenant's own 4xx
        ("provider_auth", True),  # the tenant's own key refused
    ],
)
def test_a_platform_side_failure_is_not_billed_and_the_tenants_own_4xx_is(code: str, billed: bool) -> None:
    line = _line({"search_type": "deep"}, None, ToolResult.failure(code, "it failed"))

    assert (line is not None) == billed


def test_only_web_search_writes_a_tool_line() -> None:
    assert _line({}, None, ToolResult(output="ok"), tool="web_scrape") is None


def _line(
    arguments: dict[str, str], config: dict[str, str] | None, result: ToolResult, tool: str = "web_search"
) -> lines.UsageLine | None:
    return tools.tool_line(
        tenant_id="t",
        agent_id="agt_x",
        user_id=None,
        run_id="run_x",
        root_run_id="run_x",
        tool_name=tool,
        arguments=arguments,
        config=config,
        result=result,
        at=AT,
    )


def test_a_budget_is_reached_at_its_limit_and_warns_past_its_soft_limit() -> None:
    budget = Budget(
        scope="agent:agt_x",
        period="day",
        period_key="2026-12-31",
        max_billable_tokens=1_000,
        soft_limit_pct=80,
        spend=Spend(billable_tokens=799),
    )
    assert budget.over() is None and not budget.past_soft_limit()
    warned = budget.model_copy(update={"spend": Spend(billable_tokens=800)})
    assert warned.past_soft_limit() and warned.over() is None
    reached = budget.model_copy(update={"spend": Spend(billable_tokens=1_000)})
    assert reached.over() == "max_billable_tokens"
    assert reached.reached()["limit"] == "max_billable_tokens"
    deployment = reached.model_copy(update={"count_keys": "deployment"})
    assert deployment.counts("deployment") and not deployment.counts("tenant")


def test_periods_turn_at_utc_midnight_and_the_first_of_the_month() -> None:
    assert budgets.period_key("day", AT) == "2026-12-31"
    assert budgets.previous_key("day", AT) == "2026-12-30"
    assert budgets.previous_key("month", AT) == "2026-11"
    assert budgets.next_start("day", AT) == datetime(2027, 1, 1, tzinfo=UTC)
    assert budgets.next_start("month", AT) == datetime(2027, 1, 1, tzinfo=UTC)


def test_a_budget_read_back_takes_the_current_periods_spend_only() -> None:
    stored = {
        "scope": "user:u1",
        "period": "month",
        "max_cost_usd": 5,
        "on_exceed": "fail",
        "cost@2026-12": 4.5,
        "tokens@2026-12": 900,
        "cost@2026-11": 99.0,
    }
    budget = budgets.from_plain(stored, AT)

    assert budget is not None and budget.spend == Spend(cost_usd=4.5, billable_tokens=900)
    assert budgets.from_plain({"tokens@2026-12": 5}, AT) is None  # a spend stub left after a delete


@pytest.mark.parametrize("scope", ["team", "agent:x", "user:", "user:a#b", "tenant:x"])
def test_a_scope_outside_the_three_kinds_is_refused(scope: str) -> None:
    with pytest.raises(Exception) as refused:
        budgets.check_scope(scope)
    assert getattr(refused.value, "code", None) == "invalid_scope"


def test_the_cli_usage_table_has_a_column_per_key() -> None:
    row = {
        "agent_id": "agt_1",
        "input_tokens": 10,
        "cached_tokens": 0,
        "output_tokens": 2,
        "billable_tokens": 12,
        "cost_usd": None,
        "runs": 1,
        "model_calls": 2,
        "tool_calls": 1,
    }
    header, line = usage_lines([row], ["agent"])

    assert header.split()[:2] == ["AGENT", "INPUT"]
    assert line.split() == ["agt_1", "10", "0", "2", "12", "unknown", "1", "3"]
    assert usage_lines([], ["agent"]) == ["no usage in that range"]
