"""`stepwise usage` and `stepwise budgets set|list|delete`: what the tenant spent, and its budgets."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from typing import Any

from stepwise_cli.client import data
from stepwise_cli.context import Context
from stepwise_cli.render import table

BY = ("day", "hour", "agent", "model", "user", "tool")
KEY_FIELD = {
    "day": "day",
    "hour": "hour",
    "agent": "agent_id",
    "model": "model",
    "user": "user_id",
    "tool": "tool",
}


def register(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    usage = commands.add_parser("usage", parents=[common], help="tokens and cost, by day, agent, model…")
    usage.add_argument(
        "--by", default="day", help=f"one or two of {', '.join(BY)}, comma-separated (default day)"
    )
    usage.add_argument("--days", type=int, default=30, help="the last N days, today included (default 30)")
    usage.set_defaults(handler=show_usage)

    budgets = commands.add_parser("budgets", help="budgets that pause or fail runs")
    actions = budgets.add_subparsers(dest="action", required=True, metavar="ACTION")
    put = actions.add_parser("set", parents=[common], help="set a budget: tenant, agent:<id> or user:<id>")
    put.add_argument("scope")
    put.add_argument("--period", choices=["day", "month"], default="day")
    put.add_argument("--max-cost-usd", type=float)
    put.add_argument("--max-billable-tokens", type=int)
    put.add_argument("--soft-limit-pct", type=int)
    put.add_argument("--on-exceed", choices=["pause", "fail"], default="pause")
    put.set_defaults(handler=set_budget)
    actions.add_parser("list", parents=[common], help="budgets with their spend").set_defaults(
        handler=list_budgets
    )
    delete = actions.add_parser("delete", parents=[common], help="remove a budget (its paused runs resume)")
    delete.add_argument("scope")
    delete.set_defaults(handler=delete_budget)


def usage_lines(rows: list[dict[str, Any]], by: list[str]) -> list[str]:
    if not rows:
        return ["no usage in that range"]
    headers = [k.upper() for k in by] + ["INPUT", "CACHED", "OUTPUT", "BILLABLE", "COST USD", "RUNS", "CALLS"]
    cells = [
        [
            *(r.get(KEY_FIELD[k]) for k in by),
            r["input_tokens"],
            r["cached_tokens"],
            r["output_tokens"],
            r["billable_tokens"],
            "unknown" if r["cost_usd"] is None else f"{r['cost_usd']:.4f}",
            r["runs"],
            r["model_calls"] + r.get("tool_calls", 0),
        ]
        for r in rows
    ]
    return table(headers, cells)


def show_usage(ctx: Context) -> int:
    by = [k.strip() for k in ctx.args.by.split(",") if k.strip()]
    start = (datetime.now(UTC) - timedelta(days=max(ctx.args.days, 1) - 1)).date().isoformat()
    answer = data(ctx.client.usage.read(start=start, group_by=",".join(by)))
    ctx.show(answer, usage_lines(answer.get("rows", []), by))
    return 0


def budget_lines(budgets: list[dict[str, Any]]) -> list[str]:
    if not budgets:
        return ["no budgets"]
    rows = [
        [
            b["scope"],
            b["period"],
            b.get("max_cost_usd"),
            b.get("max_billable_tokens"),
            f"{b['spend']['cost_usd']:.4f}",
            b["spend"]["billable_tokens"],
            b["on_exceed"],
        ]
        for b in budgets
    ]
    return table(["SCOPE", "PERIOD", "MAX USD", "MAX TOKENS", "SPENT USD", "SPENT TOKENS", "ON EXCEED"], rows)


def set_budget(ctx: Context) -> int:
    args = ctx.args
    body = {
        "period": args.period,
        "max_cost_usd": args.max_cost_usd,
        "max_billable_tokens": args.max_billable_tokens,
        "soft_limit_pct": args.soft_limit_pct,
        "on_exceed": args.on_exceed,
    }
    budget = data(ctx.client.budgets.set(args.scope, {k: v for k, v in body.items() if v is not None}))
    ctx.show(budget, budget_lines([budget]))
    return 0


def list_budgets(ctx: Context) -> int:
    listed = data(ctx.client.budgets.list())
    ctx.show(listed, budget_lines(listed.get("budgets", [])))
    return 0


def delete_budget(ctx: Context) -> int:
    ctx.client.budgets.delete(ctx.args.scope)
    ctx.show({"scope": ctx.args.scope, "deleted": True}, [f"deleted budget {ctx.args.scope}"])
    return 0
