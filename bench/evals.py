"""Changing an agent safely, priced: what a what-if replay of the canonical run (bench/canonical.py)
costs against the original. The replay gets the same script and a new system prompt; its four calls are
served from the original's record (the approval too), so it makes no tool request and never waits.

Counted the way bench/canonical.py counts (the real ASL on moto, every DynamoDB request with its units,
failed ones included, every Lambda invocation including the client's API request), one function per
measurement so later measurements (the eval suites) sit beside it; `run()` is what `python -m bench
evals` calls, `main()` runs this file alone.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

from bench.canonical import ASK_TOOL, POLLING, SCRIPT
from bench.canonical import _one as canonical_run
from bench.dynamodb_ops import breakdown, totals
from bench.harness import Local, Section, local, lookup_tool
from bench.meter import Recorder
from bench.transitions import lambda_tasks, transitions

WHAT_IF = "API (POST …/what-if)"
RUNS = 2  # counts must agree between them


def _what_if(env: Local, recorder: Recorder, original_id: str) -> dict[str, Any]:
    """One what-if replay of `original_id`, counted from its request to its end."""
    marks = (len(recorder.requests), len(recorder.invocations), len(env.tool.arrivals))
    body = {"system_prompt": "Answer in one short sentence.", "script": SCRIPT}
    with recorder.charging(WHAT_IF):
        status, _, created = env.stack.invoke_api("POST", f"/v1/runs/{original_id}/what-if", body)
    if status != 201:
        raise RuntimeError(f"what-if of {original_id}: {status} {created}")
    run_id = created["run_id"]
    env.wait_execution(run_id)
    with recorder.charging(POLLING):
        view = env.wait_run(run_id)
    history = env.history(run_id)
    requests = recorder.since(marks[0], exclude=(POLLING,))
    invocations = recorder.invocations_since(marks[1], exclude=(POLLING,))
    return {
        "run_id": run_id,
        "status": view["status"],
        "steps": int(view["steps"]),
        "served": view.get("served"),
        "divergences": view.get("divergences"),
        "transitions": transitions(history),
        "lambda_tasks": lambda_tasks(history),
        "invocations": dict(Counter(i.function for i in invocations)),
        "model_calls": sum(i.model_calls for i in invocations),
        "tool_requests": len(env.tool.arrivals) - marks[2],
        **totals(requests),
        **breakdown(requests),
    }


def what_if_replay(section: Section, env: Local) -> None:
    """The canonical run, then its what-if replay, side by side."""
    recorder = Recorder(env)
    with recorder.installed():
        agent_id = env.create_agent(
            {
                "name": "bench-what-if",
                "tools": [
                    lookup_tool(env.tool.url),
                    {**lookup_tool(env.tool.url), "name": ASK_TOOL, "permission": "ask"},
                ],
            }
        )
        pairs = []
        for _ in range(RUNS):
            original = canonical_run(env, recorder, agent_id)
            pairs.append((original, _what_if(env, recorder, original["run_id"])))

    keys = ("transitions", "requests", "failed", "rru", "wru", "model_calls", "tool_requests")
    if any(w[k] != pairs[0][1][k] for _, w in pairs for k in keys):
        section.notes.append("THE REPLAYS DID NOT ALL COUNT THE SAME: " + "; ".join(str(w) for _, w in pairs))
    original, replay = pairs[0]
    if replay["status"] != "succeeded" or replay["divergences"]:
        section.notes.append(f"THE REPLAY DID NOT SERVE EVERYTHING: {replay}")

    def both(name: str, key: str, unit: str, digits: int = 0) -> None:
        a, b = original[key], replay[key]
        section.add(f"{name}: original / what-if", f"{a:.{digits}f} / {b:.{digits}f}", unit)

    section.add("what-if served / diverged", f"{replay['served']} / {replay['divergences']}", "calls")
    both("model calls", "model_calls", "calls")
    both("tool requests", "tool_requests", "requests")
    both("state transitions", "transitions", "transitions")
    both("DynamoDB requests", "requests", "requests")
    both("  read units", "rru", "RRU", 1)
    both("  write units", "wru", "WRU")
    both("  failed conditional writes", "failed", "requests")
    for label, row in (("original", original), ("what-if", replay)):
        invocations = row["invocations"]
        section.add(
            f"Lambda invocations ({label})",
            sum(invocations.values()),
            "invocations",
            ", ".join(f"{k.removesuffix('Function')} {v}" for k, v in invocations.items()),
        )
    section.notes.append(
        "the original counts its two API requests (POST …/runs, POST …/approve) and the wait for the "
        "approval; the what-if counts its one (POST …/what-if) and never waits"
    )
    for label, row in (("original", original), ("what-if", replay)):
        section.notes.append(
            f"DynamoDB by table ({label}): "
            + ", ".join(f"{t} {r['requests']}" for t, r in sorted(row["by_table"].items()))
        )
    section.details["what_if"] = {"pairs": [{"original": o, "what_if": w} for o, w in pairs]}


def run() -> Section:
    section = Section("Changing an agent safely: a what-if replay of the canonical run, against it")
    what_if_replay(section, local())
    return section


def main() -> int:
    from bench.__main__ import main as bench_main

    return bench_main(["evals"])


if __name__ == "__main__":
    sys.exit(main())
