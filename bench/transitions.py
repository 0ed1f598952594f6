"""State transitions, history events and Lambda invocations per model step and per tool call, read from
the execution history moto's interpreter writes while running the real ASL.

Counting rule for state transitions (what a Standard workflow bills):
- Step Functions "counts a state transition each time a step of your workflow is executed", including
  retries (https://aws.amazon.com/step-functions/pricing/). Every state entered is one, whatever its type
  (Task, Choice, Map, Pass, Wait, Fail, Succeed...), and so is every state entered inside an Inline Map
  iteration, once per iteration.
- The Map iteration itself is not: "When you use the Map state in Inline mode, you're not charged a state
  transition for each iteration of the Inline Map state"
  (https://docs.aws.amazon.com/step-functions/latest/dg/concepts-transitions.html). Nor are the
  execution's start and end, nor *Started/*Succeeded/*Exited events.
So transitions = the number of `*StateEntered` events + Task retries, where a retry shows as a second
`TaskScheduled` for one state entry (retries = TaskScheduled − TaskStateEntered). Scripted runs have none,
but the rule counts them if a Lambda is ever retried here.

Lambda invocations are counted twice, and both are shown: the Lambda tasks the history scheduled
(`TaskScheduled` with resourceType "lambda", retries included) and the local Lambda log's invocations of
the functions the state machine names (which also sees a function's own async invocations).

Per-step and per-call costs come from a least-squares fit, y = fixed + a·steps + b·tool_calls, over runs
of different shapes (harness.RUN_SHAPES); "fixed" is the run's own overhead (whatever the states: the
first and last steps may do more). The fit is exact when every residual is 0. Nothing here names a
state, so the counts follow the ASL whatever its shape.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from bench.fitting import add_fit
from bench.harness import CANONICAL, RUN_SHAPES, RunResult, Section, local, script_for
from bench.pricing import SFN_TRANSITION

HISTORY_CAP = 25_000  # events one Standard execution may hold (Step Functions quota)
# Issue 10's goals: (per model step, per tool call that needs no human).
DESIGN_TARGETS = {"transitions": ("goal ≤ 3", "goal 0")}


def transitions(history: list[dict[str, Any]]) -> int:
    types = Counter(e["type"] for e in history)
    entered = sum(n for t, n in types.items() if t.endswith("StateEntered"))
    retries = max(types["TaskScheduled"] - types["TaskStateEntered"], 0)
    return entered + retries


def lambda_tasks(history: list[dict[str, Any]]) -> int:
    """Lambda invocations the execution made: its Lambda tasks scheduled, retries included."""
    return sum(
        1
        for e in history
        if e["type"] == "TaskScheduled"
        and (e.get("taskScheduledEventDetails") or {}).get("resourceType") == "lambda"
    )


def entered_by_state(history: list[dict[str, Any]]) -> dict[str, int]:
    return dict(
        Counter(e["stateEnteredEventDetails"]["name"] for e in history if e["type"].endswith("StateEntered"))
    )


def _per_call_states(runs: list[dict[str, Any]]) -> list[str]:
    """The states entered once per tool call, read off a run whose call count differs from its steps
    and from its tool-using steps (so Map and per-step states cannot be mistaken for per-call ones)."""
    for r in runs:
        calls = r["tool_calls"]
        if r["status"] == "succeeded" and calls not in (r["steps"], r["steps"] - 1):
            return [state for state, n in r["entered"].items() if n == calls]
    return []


def run() -> Section:
    section = Section("Step Functions state transitions, history events, Lambda invocations")
    env = local()
    results: dict[str, tuple[RunResult, list[dict[str, Any]]]] = {}
    for i, (label, calls) in enumerate(RUN_SHAPES.items()):
        result = env.run(script_for(calls, f"sfn-{i}"))
        results[label] = (result, env.history(result.run_id))

    listed = env.execution_names()
    verified = all(
        listed.get(result.run_id) == env.execution_arn(result.run_id) for result, _ in results.values()
    )
    section.notes.append(
        "execution ARN = arn:aws:states:us-east-1:123456789012:execution:AgentRunStateMachine:<run_id> "
        + (
            "(verified against list_executions for every run)"
            if verified
            else "(DID NOT match list_executions)"
        )
    )

    runs: list[dict[str, Any]] = []
    for label, (result, history) in results.items():
        runs.append(
            {
                "shape": label,
                "run_id": result.run_id,
                "status": result.status,
                "steps": result.steps,
                "tool_calls": result.tool_calls,
                "transitions": transitions(history),
                "history_events": len(history),
                "lambda_invocations": sum(result.invocations.values()),
                "lambda_tasks": lambda_tasks(history),
                "invocations": result.invocations,
                "entered": entered_by_state(history),
            }
        )
    failed = [f"{r['shape']}: {r['status']}" for r in runs if r["status"] != "succeeded"]
    if failed:
        section.notes.append(
            "RUNS THAT DID NOT SUCCEED (fits use the runs that succeeded): " + "; ".join(failed)
        )

    units = {"transitions": "transitions", "history_events": "events", "lambda_invocations": "invocations"}
    fits = {
        key: add_fit(section, runs, key, unit, notes=DESIGN_TARGETS.get(key, ()))
        for key, unit in units.items()
    }

    canon = next(r for r in runs if r["shape"] == CANONICAL)
    section.add(
        f"canonical run ({CANONICAL})",
        canon["transitions"],
        "transitions",
        f"{canon['history_events']} history events, "
        f"{canon['lambda_invocations']} Lambda invocations by the state machine",
    )
    section.add(
        "  Step Functions cost of 1,000 canonical runs",
        canon["transitions"] * SFN_TRANSITION * 1000,
        "USD",
        "transitions only, $0.025 per 1,000, no free tier; with its approval: bench/canonical.py",
        digits=3,
    )
    events = fits["history_events"]
    if events is not None:
        per_step_with_call = events.coefficient("steps") + events.coefficient("tool_calls")
        section.add(
            "history events per step with one tool call",
            per_step_with_call,
            "events",
            "DESIGN.md keeps this at about 20",
            digits=1,
        )
        section.add(
            "steps one execution holds (1 call per step)",
            int((HISTORY_CAP - events.coefficient("1")) // per_step_with_call),
            "steps",
            f"under the {HISTORY_CAP:,}-event history cap",
        )
    mismatched = [r["shape"] for r in runs if r["lambda_tasks"] != r["lambda_invocations"]]
    section.notes.append(
        "Lambda tasks in the histories = invocations in the Lambda log, every run"
        if not mismatched
        else f"Lambda tasks in the history ≠ the Lambda log's invocations for: {', '.join(mismatched)}"
    )
    section.notes.append(
        "states entered in the canonical run: " + ", ".join(f"{k} ×{v}" for k, v in canon["entered"].items())
    )
    per_call = _per_call_states(runs)
    if per_call:
        section.notes.append(
            f"states entered once per allowed call: {', '.join(per_call)} ({len(per_call)} transitions); "
            "an approved one: bench/approvals.py"
        )
    width = max(len(r["shape"]) for r in runs)
    for r in runs:
        inv = ", ".join(f"{k.removesuffix('Function')} {v}" for k, v in r["invocations"].items() if v)
        section.notes.append(
            f"{r['shape']:<{width}}  {r['transitions']:>3} transitions  {r['history_events']:>4} events  "
            f"{r['lambda_invocations']:>3} invocations ({inv}), {r['lambda_tasks']} Lambda tasks"
        )
    section.details = {
        "counting_rule": "StateEntered events (all nesting levels) + (TaskScheduled - TaskStateEntered)",
        "execution_arn_verified": verified,
        "runs": runs,
        "fits": {k: f.as_dict() for k, f in fits.items() if f},
    }
    return section
