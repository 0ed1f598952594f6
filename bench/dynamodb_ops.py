"""DynamoDB requests, read units and write units per model step and per tool call, and how a step's
reads grow with the run's history.

Metering is bench/meter.py's (every request, failed conditional writes included; units from what each
request really read and wrote, index writes included) over bench/capacity.py's rules. Runs are awaited
on the execution (describe_execution), not by polling the API, so nothing of a waiting client is
counted; starting a run (the API request, the authorizer) is.

History growth: one run of GROWTH_STEPS tool-using steps (one read-only call each) and a final answer.
A step's requests are those that began between its `step_started` event and the next step's: one whole
cycle of the loop whatever the states are called (the reads before a step's event fall in the window
before it, the same in every window).
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from typing import Any

from bench.fitting import add_fit
from bench.harness import CANONICAL, RUN_SHAPES, Local, Section, local, median, script_for
from bench.meter import OUTSIDE, READS, WRITES, Recorder, Request

__all__ = ["READS", "START", "WRITES", "Recorder", "Request", "run", "totals"]

START = "API (POST …/runs)"  # requests made while the run is being started, authorizer included
POLLING = "bench polling (not counted)"
GROWTH_STEPS = 50  # tool-using steps of the history-growth run
GROWTH_AT = (5, 50)  # steps reported
GROWTH_WINDOW = 2  # steps either side, medians (a single step can be an outlier, e.g. compaction)


def totals(requests: list[Request]) -> dict[str, Any]:
    """Counts and units of some requests, every outcome included."""
    ops = Counter(r.operation for r in requests)
    return {
        "requests": len(requests),
        "reads": sum(n for op, n in ops.items() if op in READS),
        "writes": sum(n for op, n in ops.items() if op in WRITES),
        "failed": sum(1 for r in requests if r.failed),
        "attempts": sum(r.attempts for r in requests),
        "items_read": sum(r.items_read for r in requests),
        "items_returned": sum(r.items_returned for r in requests if r.operation in READS),
        "items_written": sum(r.items_written for r in requests),
        "rru": sum(r.rru for r in requests),
        "wru": sum(r.wru for r in requests),
        "wru_table": sum(r.wru_table for r in requests),
        "wru_index": sum(r.wru_index for r in requests),
    }


def breakdown(requests: list[Request]) -> dict[str, Any]:
    """By operation (outcomes apart), by table and by function, for the notes and the JSON."""
    by_op: dict[str, dict[str, int]] = {}
    for r in requests:
        by_op.setdefault(r.operation, {}).setdefault(r.outcome, 0)
        by_op[r.operation][r.outcome] += 1
    by_table: dict[str, dict[str, float]] = {}
    for r in requests:
        for t in r.tables:
            row = by_table.setdefault(t, {"requests": 0, "rru": 0.0, "wru": 0.0})
            row["requests"] += 1
            # A multi-table batch's units are not split per table; charged to its first.
            if t == r.tables[0]:
                row["rru"] += r.rru
                row["wru"] += r.wru
    index: Counter[str] = Counter()
    for r in requests:
        index.update(r.index_wru)
    return {
        "by_operation": by_op,
        "by_table": by_table,
        "index_wru": dict(index),
        "by_function": dict(Counter(r.function for r in requests)),
        "failures": dict(Counter(f"{r.operation} {r.outcome}" for r in requests if r.failed)),
    }


def _shape_runs(env: Local, recorder: Recorder) -> list[dict[str, Any]]:
    runs = []
    for i, (label, calls) in enumerate(RUN_SHAPES.items()):
        script = script_for(calls, f"ddb-{i}")
        mark = len(recorder.requests)
        with recorder.charging(START):
            run_id = env.start(script, len(script))
        env.wait_execution(run_id)
        during = recorder.since(mark)
        with recorder.charging(POLLING):
            view = env.stack.invoke_api("GET", f"/v1/runs/{run_id}")[2]
        runs.append(
            {
                "shape": label,
                "run_id": run_id,
                "status": view["status"],
                "steps": int(view["steps"]),
                "tool_calls": sum(calls),
                **totals(during),
                **breakdown(during),
            }
        )
    return runs


def _growth(env: Local, recorder: Recorder) -> dict[str, Any]:
    script = script_for([1] * GROWTH_STEPS, "growth")
    mark = len(recorder.requests)
    with recorder.charging(START):
        run_id = env.start(script, len(script))
    env.wait_execution(run_id)
    during = recorder.since(mark)
    with recorder.charging(POLLING):
        events = env.events(run_id)
    marks = [_epoch(e["at"]) for e in events if e["type"] == "step_started"]
    end = max(_epoch(e["at"]) for e in events) + 1.0
    edges = [*marks, end]
    steps = []
    for k in range(len(marks)):
        inside = [r for r in during if edges[k] <= r.began < edges[k + 1]]
        steps.append({"step": k + 1, **totals(inside)})
    largest: dict[str, int] = {}
    for r in during:
        for t in r.tables[:1]:
            largest[t] = max(largest.get(t, 0), r.write_bytes // max(r.items_written, 1))
    return {
        "run_id": run_id,
        "steps": steps,
        "status": events[-1]["type"] if events else None,
        "largest_item_written": largest,
        "script_bytes": len(json.dumps(script)),
    }


def _at(steps: list[dict[str, Any]], step: int, key: str) -> float | None:
    window = [s[key] for s in steps if abs(s["step"] - step) <= GROWTH_WINDOW and s["step"] <= GROWTH_STEPS]
    return median(window) if window else None


def run() -> Section:
    section = Section("DynamoDB requests and units (moto, every request metered at botocore)")
    env = local()
    recorder = Recorder(env)
    with recorder.installed():
        runs = _shape_runs(env, recorder)
        growth = _growth(env, recorder)

    failed = [f"{r['shape']}: {r['status']}" for r in runs if r["status"] != "succeeded"]
    if failed:
        section.notes.append(
            "RUNS THAT DID NOT SUCCEED (fits use the runs that succeeded): " + "; ".join(failed)
        )
    if recorder.errors:
        section.notes.append(f"METERING FAILED for {len(recorder.errors)} requests: {recorder.errors[0]}")

    fits = {
        "requests": add_fit(section, runs, "requests", "requests", notes=("all outcomes", "")),
        "failed": add_fit(section, runs, "failed", "requests", label="failed requests"),
        "items_read": add_fit(section, runs, "items_read", "items", label="items read"),
        "rru": add_fit(section, runs, "rru", "RRU", label="read units"),
        "wru": add_fit(section, runs, "wru", "WRU", label="write units", notes=("indexes included", "")),
    }
    section.notes.append(f"fixed per run includes starting the run ({START}, authorizer included)")

    canon = next(r for r in runs if r["shape"] == CANONICAL)
    section.add(
        f"canonical run less its approval ({CANONICAL})",
        canon["requests"],
        "requests",
        f"{canon['reads']} reads, {canon['writes']} writes, {canon['failed']} failed",
    )
    section.add("  read units", canon["rru"], "RRU", f"{canon['items_read']} items read", digits=1)
    section.add(
        "  write units",
        canon["wru"],
        "WRU",
        f"{canon['wru_table']:.0f} table + {canon['wru_index']:.0f} index",
    )
    for op, outcomes in sorted(canon["by_operation"].items()):
        section.notes.append(
            f"canonical, {op}: "
            + ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items(), key=lambda x: x[0] != "ok"))
        )
    for table, row in sorted(canon["by_table"].items()):
        section.notes.append(
            f"canonical, {table}: {row['requests']} requests, {row['rru']:.1f} RRU, {row['wru']:.0f} WRU"
        )
    if canon["index_wru"]:
        section.notes.append(
            "canonical, index writes: "
            + ", ".join(f"{k} {v:.0f}" for k, v in sorted(canon["index_wru"].items()))
        )
    section.notes.append(
        "canonical, by function: " + ", ".join(f"{k} {v}" for k, v in canon["by_function"].items())
    )

    steps = growth["steps"]
    first, last = GROWTH_AT
    for key, label, unit in (
        ("items_read", "items read", "items"),
        ("requests", "requests", "requests"),
        ("rru", "read units", "RRU"),
        ("wru", "write units", "WRU"),
    ):
        a, b = _at(steps, first, key), _at(steps, last, key)
        section.add(
            f"{label} per step, step {first} → step {last} of {GROWTH_STEPS}",
            None if a is None or b is None else f"{a:,.1f} → {b:,.1f}",
            unit,
            f"median of steps ±{GROWTH_WINDOW}" + ("" if not a or b is None else f"; ×{b / a:.2f}"),
        )
    biggest = sorted(growth["largest_item_written"].items(), key=lambda kv: -kv[1])[:3]
    section.notes.append(
        "growth run, largest item written per table: "
        + ", ".join(f"{t} {n:,} B" for t, n in biggest)
        + f"; the run carries its scripted model's {GROWTH_STEPS + 1}-turn script "
        f"({growth['script_bytes']:,} B of JSON), which a real run does not, and every write of an item "
        "holding it pays for it (once per index too)"
    )
    if any(r.function == OUTSIDE for r in recorder.requests):
        section.notes.append(f"some requests ran outside any function ({OUTSIDE}): counted, charged to it")
    width = max(len(r["shape"]) for r in runs)
    for r in runs:
        section.notes.append(
            f"{r['shape']:<{width}}  {r['requests']:>3} req ({r['failed']} failed)  {r['rru']:>6.1f} RRU  "
            f"{r['wru']:>4.0f} WRU ({r['wru_index']:.0f} index)  {r['items_read']:>4} items read"
        )
    section.details = {
        "runs": runs,
        "fits": {k: f.as_dict() for k, f in fits.items() if f},
        "growth": growth,
    }
    return section


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
