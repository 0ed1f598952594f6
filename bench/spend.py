"""What usage and budgets cost per model step: DynamoDB requests, read units and write units with them
off (the stores without the spend port: the Step reads its agent alone and writes its context with a
plain UpdateItem, as before issue 24), on without any budget (every model call's usage line counted
in a transaction with the context write; the budget keys ride in the agent's read), and on with two
budgets that apply (the tenant's and the agent's, each ADDed to in the same transaction). Then the
canonical run (5 steps, 4 calls, 1 approval) priced per 1,000 runs in each mode (bench/pricing.py).

Counting is bench/meter.py's: every request, failed ones included; a transaction's items at two write
units per KB each; an absent key of a BatchGetItem at the minimum half unit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bench import canonical
from bench.dynamodb_ops import POLLING, START, breakdown, totals
from bench.fitting import REGRESSORS, fit
from bench.harness import RUN_SHAPES, Local, Section, local, lookup_tool, script_for
from bench.meter import Recorder
from bench.pricing import functions_from_template, per_thousand

MODES = ("off", "on, no budget", "on, 2 budgets")


@contextmanager
def mode(env: Local, name: str, agent_id: str) -> Iterator[None]:
    from stepwise.runs import ports
    from stepwise.store import wiring

    if name == "off":
        ports.install(lambda: dataclasses.replace(wiring.dynamodb(), spend=None))
    else:
        wiring.install()
    scopes = ["tenant", f"agent:{agent_id}"] if name == "on, 2 budgets" else []
    for scope in scopes:  # limits far above what the bench spends: checked and counted, never reached
        body = {"period": "month", "max_billable_tokens": 10**12, "soft_limit_pct": 99}
        status, _, answer = env.stack.invoke_api("PUT", f"/v1/budgets/{scope}", body)
        if status != 200:
            raise RuntimeError(f"budget {scope}: {status} {answer}")
    try:
        yield
    finally:
        for scope in scopes:
            env.stack.invoke_api("DELETE", f"/v1/budgets/{scope}")
        wiring.install()


def _shapes(env: Local, recorder: Recorder, agent_id: str, tag: str) -> list[dict[str, Any]]:
    runs = []
    for i, (label, calls) in enumerate(RUN_SHAPES.items()):
        script = script_for(calls, f"spend-{tag}-{i}")
        mark = len(recorder.requests)
        with recorder.charging(START):
            run_id = env.start(script, len(script), agent_id=agent_id)
        env.wait_execution(run_id)
        during = recorder.since(mark)
        with recorder.charging(POLLING):
            view = env.stack.invoke_api("GET", f"/v1/runs/{run_id}")[2]
        runs.append(
            {
                "shape": label,
                "status": view["status"],
                "steps": int(view["steps"]),
                "tool_calls": sum(calls),
                **totals(during),
                **breakdown(during),
            }
        )
    return runs


def _per_step(runs: list[dict[str, Any]], key: str) -> float | None:
    good = [r for r in runs if r["status"] == "succeeded"]
    try:
        result = fit(REGRESSORS, [((1, r["steps"], r["tool_calls"]), r[key]) for r in good])
    except ValueError:
        return None
    return float(result.coefficient("steps"))


def run() -> Section:
    section = Section("Usage and budgets: DynamoDB per model step, off vs on, and the canonical run's cost")
    env = local()
    from stepwise_local.cfn_yaml import load_template
    from stepwise_local.stack import TEMPLATE

    functions = functions_from_template(load_template(TEMPLATE))
    recorder = Recorder(env)
    per_mode: dict[str, dict[str, Any]] = {}
    with recorder.installed():
        for name in MODES:
            tag = name.replace(",", "").replace(" ", "-")
            agent_id = env.create_agent(
                {
                    "name": f"bench-spend-{tag}",
                    "tools": [
                        lookup_tool(env.tool.url),
                        {**lookup_tool(env.tool.url), "name": canonical.ASK_TOOL, "permission": "ask"},
                    ],
                }
            )
            with mode(env, name, agent_id):
                shapes = _shapes(env, recorder, agent_id, tag)
                one = canonical._one(env, recorder, agent_id)
            per_mode[name] = {
                "shapes": shapes,
                "requests": _per_step(shapes, "requests"),
                "rru": _per_step(shapes, "rru"),
                "wru": _per_step(shapes, "wru"),
                "canonical": {k: one[k] for k in ("status", "requests", "rru", "wru", "by_operation")},
                "usd": sum(per_thousand(one["usage"].cost(functions)).values()),
                "dynamodb_usd": per_thousand(one["usage"].cost(functions)).get("DynamoDB"),
            }
    base = per_mode["off"]
    for name in MODES:
        m = per_mode[name]
        delta = "" if name == "off" else f"{_signed(m['requests'], base['requests'])} vs off"
        section.add(f"requests per model step, {name}", m["requests"], "requests", delta, digits=2)
        section.add(
            f"  read units per model step, {name}", m["rru"], "RRU", _signed(m["rru"], base["rru"]), digits=2
        )
        section.add(
            f"  write units per model step, {name}", m["wru"], "WRU", _signed(m["wru"], base["wru"]), digits=2
        )
    for name in MODES:
        m = per_mode[name]
        c = m["canonical"]
        section.add(
            f"canonical run, {name}: AWS cost of 1,000",
            m["usd"],
            "USD",
            f"{c['requests']} requests, {c['rru']:.1f} RRU, {c['wru']:.0f} WRU; DynamoDB "
            f"{m['dynamodb_usd']:.4f} USD; {c['status']}",
            digits=4,
        )
    for name in MODES:
        ops = per_mode[name]["canonical"]["by_operation"]
        section.notes.append(
            f"canonical, {name}: " + ", ".join(f"{op} ×{sum(o.values())}" for op, o in sorted(ops.items()))
        )
    bad = [(n, r["shape"]) for n in MODES for r in per_mode[n]["shapes"] if r["status"] != "succeeded"]
    if bad:
        section.notes.append(f"RUNS THAT DID NOT SUCCEED: {bad}")
    section.details = {n: {k: v for k, v in m.items() if k != "shapes"} for n, m in per_mode.items()}
    return section


def _signed(value: float | None, base: float | None) -> str:
    if value is None or base is None:
        return ""
    return f"{value - base:+.2f}"
