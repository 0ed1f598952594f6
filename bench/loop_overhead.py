"""Local wall time per ReAct step with the scripted model: the cost of the loop itself (moto's Step
Functions interpreter, DynamoDB in moto, our handlers in process, one loopback HTTP tool), with no model
latency. Times are the run record's created_at → finished_at, so polling granularity does not count;
the bench's client polls each run every CLIENT_POLL seconds, because it shares the one process (and
its GIL) with the stack: polling every 20 ms took about a third of the process's CPU from the steps.

A run without tool calls has exactly one step (a text turn is the final answer), so "a 5-step run
without tools" is measured two ways: a 1-step text-only run (the floor: one Step that
answers and ends the run) and a 5-step run whose calls name a tool the agent lacks (answered without HTTP).
"""

from __future__ import annotations

import os
from datetime import datetime
from itertools import pairwise
from typing import Any

from bench.harness import RunResult, Section, local, median, script_for

LONG_RUNS = 3  # long runs, median reported (several seconds each on 2 cores)
LONG_STEPS = 50  # tool-using steps of a long run (one read-only call each), then the final text turn
SHORT_RUNS = 3  # runs of each short shape, median reported (well under a second each)
SHORT_STEPS = 5
GROWTH_AT = (5, 50)  # steps compared, as in bench/dynamodb_ops.py
WINDOW = 2  # steps either side of each, median over the window and the long runs
GOAL_MS, GOAL_GROWTH = 50, 1.2  # issue 10: ≤ 50 ms a step, step 50 within 20% of step 5
CLIENT_POLL = (
    0.25  # seconds between the client's GET /v1/runs/{id}; the light events function polls the head as often
)
MISSING_TOOL = "not_on_agent"  # not in the agent's tools: Gate records unknown_tool, no HTTP request


def _note(results: list[RunResult]) -> str:
    bad = [r for r in results if r.status != "succeeded"]
    if bad:
        first = bad[0]
        why = f"{first.status} after {first.steps} steps, {first.error}"
        return f"NOT SUCCEEDED ({len(bad)} of {len(results)}): {why}"
    return "runs: " + ", ".join(f"{r.ms_per_step:,.0f}" for r in results)


def _step_durations(events: list[dict[str, Any]]) -> list[float]:
    """ms from each step_started to the next (the last step ends at run_completed)."""
    marks = [e["at"] for e in events if e["type"] in ("step_started", "run_completed")]
    stamps = [datetime.fromisoformat(m.replace("Z", "+00:00")) for m in marks]
    return [(b - a).total_seconds() * 1000 for a, b in pairwise(stamps)]


def run() -> Section:
    section = Section("Loop overhead (local, scripted model)")
    load_before = os.getloadavg()[0]
    env = local()
    section.add("local stack start (template.yaml → moto)", env.start_seconds, "s", digits=2)

    warm = env.run(
        script_for([1], "warmup"), poll=CLIENT_POLL
    )  # loads every handler module and, in Step, litellm
    section.add(
        "first run (cold model step)",
        warm.server_seconds * 1000,
        "ms",
        f"{warm.steps} steps, 1 tool call, {warm.status}; includes the litellm import and handler loads",
        digits=0,
    )

    text = [env.run(script_for([], f"text-{i}"), poll=CLIENT_POLL) for i in range(SHORT_RUNS)]
    section.add(
        "1-step run, no tool calls",
        median([r.server_seconds * 1000 for r in text]),
        "ms per run",
        _note(text),
        digits=0,
    )
    calls = [1] * (SHORT_STEPS - 1)
    short = [env.run(script_for(calls, f"short-{i}"), poll=CLIENT_POLL) for i in range(SHORT_RUNS)]
    section.add(
        f"{SHORT_STEPS}-step run, {len(calls)} HTTP tool calls",
        median([r.ms_per_step for r in short]),
        "ms per step",
        f"goal ≤ {GOAL_MS}; " + _note(short),
        digits=0,
    )
    missing = [
        env.run(script_for(calls, f"missing-{i}", tool=MISSING_TOOL), poll=CLIENT_POLL)
        for i in range(SHORT_RUNS)
    ]
    section.add(
        f"{SHORT_STEPS}-step run, {len(calls)} calls to a missing tool (no HTTP)",
        median([r.ms_per_step for r in missing]),
        "ms per step",
        _note(missing),
        digits=0,
    )

    long_calls = [1] * LONG_STEPS
    long = [env.run(script_for(long_calls, f"long-{i}"), poll=CLIENT_POLL) for i in range(LONG_RUNS)]
    per_step = [r.ms_per_step for r in long]
    section.add(
        f"{LONG_STEPS + 1}-step run, {len(long_calls)} HTTP tool calls",
        median(per_step),
        "ms per step",
        _note(long) + f"; run wall {median([r.server_seconds for r in long]):.1f} s",
        digits=0,
    )
    section.add(
        f"{LONG_STEPS + 1}-step run, client-observed (POST → terminal GET)",
        median([r.client_seconds * 1000 / max(r.steps, 1) for r in long]),
        "ms per step",
        f"includes polling every {CLIENT_POLL * 1000:.0f} ms",
        digits=0,
    )
    durations = [_step_durations(env.events(r.run_id)) for r in long]
    at = {step: _window(durations, step) for step in GROWTH_AT}
    first, last = GROWTH_AT
    for step, ms in at.items():
        section.add(
            f"  step {step} of the long runs",
            ms,
            "ms per step",
            f"median of steps {step - WINDOW}–{min(step + WINDOW, LONG_STEPS)} over {LONG_RUNS} runs",
            digits=0,
        )
    a, b = at[first], at[last]
    section.add(
        f"  step {last} / step {first}",
        None if not a or b is None else b / a,
        "×",
        f"goal ≤ {GOAL_GROWTH:.1f}; the history a step reads and sends grows by 2 messages a step",
        digits=2,
    )
    section.add(
        "  slowest step of the long runs",
        max((max(d) for d in durations if d), default=None),
        "ms",
        "a full GC of the one shared process (moto + every function) lands in some step",
        digits=0,
    )
    served = sum(r.tool_requests for r in long)
    section.add(
        "tool requests served during the long runs",
        served,
        "requests",
        f"expected {len(long_calls) * len(long)}",
    )

    section.notes.append(
        f"1-minute load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after, "
        f"on {os.cpu_count()} CPUs: these are wall times of one shared process, "
        "and move with whatever else the machine runs"
    )
    section.details = {
        "load_average": [load_before, os.getloadavg()[0]],
        "parameters": {
            "long_runs": LONG_RUNS,
            "long_steps": LONG_STEPS + 1,
            "short_runs": SHORT_RUNS,
            "short_steps": SHORT_STEPS,
        },
        "stack_start_s": env.start_seconds,
        "first_run": _row(warm),
        "text_only": [_row(r) for r in text],
        "short_http": [_row(r) for r in short],
        "short_missing_tool": [_row(r) for r in missing],
        "long_http": [_row(r) for r in long],
        "long_step_durations_ms": durations,
    }
    return section


def _window(durations: list[list[float]], step: int) -> float | None:
    """Median over the long runs' tool-using steps within WINDOW of `step` (1-based)."""
    picked = [
        d[k - 1]
        for d in durations
        for k in range(step - WINDOW, step + WINDOW + 1)
        if 1 <= k <= min(len(d), LONG_STEPS)
    ]
    return median(picked) if picked else None


def _row(r: RunResult) -> dict[str, Any]:
    return {
        "run_id": r.run_id,
        "status": r.status,
        "steps": r.steps,
        "tool_calls": r.tool_calls,
        "server_ms": r.server_seconds * 1000,
        "client_ms": r.client_seconds * 1000,
        "ms_per_step": r.ms_per_step,
    }
