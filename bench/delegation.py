"""Delegation on the real ASL in moto: what a child run adds to its parent's execution, how soon the
parent resumes once the child has ended, and what a coordinator with two children costs.

- Added to the parent: a coordinator whose step 1 calls one agent tool (then answers) against the same
  script on the bench agent calling its plain `lookup` tool; and two concurrent (read-only) agent tools
  against two concurrent lookups. State transitions by bench/transitions.py's rule over the parent's
  execution history; Lambda invocations from its Lambda tasks.
- While the child runs: the parent's Lambda invocations between the child's first invocation and its
  run record turning terminal, counted twice: from the parent's history (TaskScheduled timestamps) and
  from the local Lambda seam (each invocation's payload names its run).
- Child's end → parent's next model step: from the child's `finished_at` (its ending records it, then
  sends the parent's task token back) to the parent's next Step invocation starting, and to that
  Step's model call; median of RUNS.
- Cost of a coordinator + 2 children run: every execution of the tree (transitions), every Lambda
  invocation it caused with canonical.py's billed-duration assumptions, every DynamoDB request (failed
  conditional writes and index writes included, bench/meter.py) and the one API request that starts it;
  priced by bench/pricing.py exactly like the canonical figure.

Each child does one `lookup` call and then answers (2 steps); the coordinator delegates to both at once
and answers (2 steps).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bench.canonical import billed_seconds
from bench.dynamodb_ops import breakdown, totals
from bench.harness import TOOL_NAME, Local, Section, local, lookup_tool, median
from bench.meter import Recorder
from bench.pricing import MODEL_CALL_SECONDS, TOOL_CALL_SECONDS, Usage, functions_from_template, per_thousand
from bench.transitions import entered_by_state, lambda_tasks, transitions

RUNS = 5  # delegating runs timed (median), and coordinator + 2 children runs priced (median)
GOALS = {"transitions": 3, "invocations_while_child_runs": 0}  # issue 12
START, POLLING = "API (POST …/runs)", "bench polling (not counted)"


def _child_script(tag: str) -> list[dict[str, Any]]:
    return [
        {"tool_calls": [{"name": TOOL_NAME, "arguments": {"q": f"child-{tag}"}}]},
        {"text": f"{tag} done"},
    ]


def _calls(*names: str) -> list[dict[str, Any]]:
    return [
        {"tool_calls": [{"name": n, "arguments": {"message": f"go {n}"}} for n in names]},
        {"text": "done"},
    ]


def _lookups(n: int, tag: str) -> list[dict[str, Any]]:
    calls = [{"name": TOOL_NAME, "arguments": {"q": f"{tag}-{i}"}} for i in range(n)]
    return [{"tool_calls": calls}, {"text": "done"}]


# --- a timeline of the state machine's Lambda invocations ------------------------------------------


@dataclass
class Call:
    function: str
    run_id: str | None
    began: float  # time.time(), comparable with the run records' timestamps
    ended: float = 0.0
    model_at: list[float] = field(default_factory=list)


@contextmanager
def timeline(env: Local) -> Iterator[list[Call]]:
    """Every invocation through the local Lambda seam (Step Functions' tasks, async invocations; not
    the API's) with the run its payload names, and when each model call in it began. Nests inside
    bench/meter.py's Recorder and restores whatever was installed before."""
    from stepwise.llm.scripted import ScriptedLLM

    lambdas = env.stack.lambdas
    previous = lambdas.__dict__.get("invoke")
    inner: Callable[[str, Any], Any] = lambdas.invoke
    models = {name: getattr(ScriptedLLM, name) for name in ("completion", "streaming")}
    calls: list[Call] = []
    where = threading.local()
    lock = threading.Lock()

    def invoke(name_or_arn: str, event: Any) -> Any:
        run_id = event.get("run_id") if isinstance(event, dict) else None
        call = Call(lambdas.logical_id(name_or_arn), run_id, time.time())
        outer, where.call = getattr(where, "call", None), call
        try:
            return inner(name_or_arn, event)
        finally:
            call.ended, where.call = time.time(), outer
            with lock:
                calls.append(call)

    def noting(method: Callable[..., Any]) -> Callable[..., Any]:
        def model_call(handler: Any, *args: Any, **kwargs: Any) -> Any:
            current = getattr(where, "call", None)
            if current is not None:
                current.model_at.append(time.time())
            return method(handler, *args, **kwargs)

        return model_call

    lambdas.invoke = invoke
    for name, method in models.items():
        setattr(ScriptedLLM, name, noting(method))
    try:
        yield calls
    finally:
        for name, method in models.items():
            setattr(ScriptedLLM, name, method)
        if previous is None:
            del lambdas.invoke
        else:
            lambdas.invoke = previous


# --- one delegating run ----------------------------------------------------------------------------


def _stamp(value: Any) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def _finish(env: Local, run_id: str, recorder: Recorder) -> dict[str, Any]:
    with recorder.charging(POLLING):
        view = env.wait_run(run_id)
    env.wait_execution(run_id)
    if view["status"] != "succeeded":
        raise RuntimeError(f"run {run_id} {view['status']}: {view.get('error')}")
    return view


def _tree(env: Local, recorder: Recorder, run_id: str) -> list[dict[str, Any]]:
    """The run and its descendants, finished, each with its execution history."""
    out, pending = [], [run_id]
    while pending:
        current = pending.pop(0)
        view = _finish(env, current, recorder)
        out.append({"view": view, "history": env.history(current)})
        pending += view.get("children") or []
    return out


def _delegating(
    env: Local, recorder: Recorder, calls: list[Call], agent_id: str, tool: str
) -> dict[str, Any]:
    with recorder.charging(START):
        run_id = env.start(_calls(tool), 2, agent_id=agent_id)
    parent, child = _tree(env, recorder, run_id)
    child_id = child["view"]["run_id"]
    child_began = min(c.began for c in calls if c.run_id == child_id)
    child_ended = _stamp(child["view"]["finished_at"])
    mine = [c for c in calls if c.run_id == run_id]
    while_running = [c for c in mine if child_began <= c.began <= child_ended]
    scheduled = [
        e
        for e in parent["history"]
        if e["type"] == "TaskScheduled" and child_began <= _stamp(e["timestamp"]) <= child_ended
    ]
    resumed = min(
        (c for c in mine if c.function == "StepFunction" and c.began > child_ended), key=lambda c: c.began
    )
    return {
        "run_id": run_id,
        "child_run_id": child_id,
        "transitions": transitions(parent["history"]),
        "lambda_tasks": lambda_tasks(parent["history"]),
        "entered": entered_by_state(parent["history"]),
        "parent_invocations_while_child_runs": len(while_running),
        "parent_tasks_scheduled_while_child_runs": len(scheduled),
        "child_seconds": child_ended - child_began,
        "end_to_step_ms": (resumed.began - child_ended) * 1000,
        "end_to_model_ms": (resumed.model_at[0] - child_ended) * 1000 if resumed.model_at else None,
    }


def _plain(env: Local, recorder: Recorder, script: list[dict[str, Any]]) -> dict[str, Any]:
    with recorder.charging(START):
        run_id = env.start(script, len(script))
    _finish(env, run_id, recorder)
    history = env.history(run_id)
    return {"run_id": run_id, "transitions": transitions(history), "lambda_tasks": lambda_tasks(history)}


def _priced(env: Local, recorder: Recorder, agent_id: str) -> dict[str, Any]:
    """One coordinator + 2 children run, everything it caused."""
    marks = (len(recorder.requests), len(recorder.invocations), len(env.tool.arrivals))
    with recorder.charging(START):
        run_id = env.start(_calls("ask_a", "ask_b"), 2, agent_id=agent_id)
    runs = _tree(env, recorder, run_id)
    if len(runs) != 3:
        raise RuntimeError(f"run {run_id}: a tree of {len(runs)} runs, not a coordinator and 2 children")
    requests = recorder.since(marks[0], exclude=(POLLING,))
    invocations = recorder.invocations_since(marks[1], exclude=(POLLING,))
    billed = billed_seconds(invocations, env.tool.arrivals[marks[2] :])
    usage = Usage(transitions=sum(transitions(r["history"]) for r in runs), http_api_requests=1)
    counted = totals(requests)
    usage.rru, usage.wru = counted["rru"], counted["wru"]
    for i in invocations:
        usage.add_lambda(i.function, 1, billed[i.id])
    return {
        "run_id": run_id,
        "usage": usage,
        "transitions": {r["view"]["run_id"]: transitions(r["history"]) for r in runs},
        "invocations": dict(Counter(i.function for i in invocations)),
        "model_calls": sum(i.model_calls for i in invocations),
        "tool_requests": len(env.tool.arrivals) - marks[2],
        **counted,
        "failures": breakdown(requests)["failures"],
    }


def _split(counts: list[int]) -> tuple[int, str]:
    return counts[0], " + ".join(str(c) for c in counts[1:])


def run() -> Section:
    section = Section("Delegation: what a child adds to its parent, the parent's resume, a tree's cost")
    env = local()
    from stepwise_local.cfn_yaml import load_template
    from stepwise_local.stack import TEMPLATE

    functions = functions_from_template(load_template(TEMPLATE))
    recorder = Recorder(env)
    with recorder.installed(), timeline(env) as calls:
        child_a = env.create_agent(
            {"name": "bench-child-a", "tools": [lookup_tool(env.tool.url)], "script": _child_script("a")}
        )
        child_b = env.create_agent(
            {"name": "bench-child-b", "tools": [lookup_tool(env.tool.url)], "script": _child_script("b")}
        )

        def agent_tool(name: str, target: str) -> dict[str, Any]:
            return {"type": "agent", "name": name, "description": f"Ask {name}.", "agent_id": target}

        one = env.create_agent({"name": "bench-coordinator-1", "tools": [agent_tool("ask_a", child_a)]})
        pair = env.create_agent(
            {
                "name": "bench-coordinator-2",
                "tools": [
                    {**agent_tool("ask_a", child_a), "read_only": True},
                    {**agent_tool("ask_b", child_b), "read_only": True},
                ],
            }
        )
        delegating = [_delegating(env, recorder, calls, one, "ask_a") for _ in range(RUNS)]
        baseline_one = _plain(env, recorder, _lookups(1, "deleg-1"))
        concurrent = _plain_tree(env, recorder, pair)
        baseline_two = _plain(env, recorder, _lookups(2, "deleg-2"))
        priced = [_priced(env, recorder, pair) for _ in range(RUNS)]

    first = delegating[0]
    if any(
        d["transitions"] != first["transitions"] or d["lambda_tasks"] != first["lambda_tasks"]
        for d in delegating
    ):
        section.notes.append("THE DELEGATING RUNS DID NOT ALL COUNT THE SAME: " + str(delegating))
    added = first["transitions"] - baseline_one["transitions"]
    section.add(
        "state transitions a delegation adds to its parent",
        added,
        "transitions",
        f"goal ≤ {GOALS['transitions']}; {first['transitions']} vs {baseline_one['transitions']} "
        "with a plain call",
    )
    section.add(
        "  Lambda invocations it adds to the parent",
        first["lambda_tasks"] - baseline_one["lambda_tasks"],
        "invocations",
        f"{first['lambda_tasks']} vs {baseline_one['lambda_tasks']} Lambda tasks: "
        "the Await that starts the child",
    )
    while_running = sum(d["parent_invocations_while_child_runs"] for d in delegating)
    scheduled = sum(d["parent_tasks_scheduled_while_child_runs"] for d in delegating)
    section.add(
        "parent Lambda invocations while its child runs",
        while_running,
        "invocations",
        f"goal {GOALS['invocations_while_child_runs']}; over {RUNS} children of "
        f"{median([d['child_seconds'] for d in delegating]) * 1000:.0f} ms (median); "
        f"{scheduled} Lambda tasks in the parents' histories meanwhile",
    )
    section.add(
        "2 concurrent delegations add to the parent",
        concurrent["transitions"] - baseline_two["transitions"],
        "transitions",
        f"{concurrent['transitions']} vs {baseline_two['transitions']} with 2 parallel plain calls "
        f"(AwaitAll, one Await per child); "
        f"{concurrent['lambda_tasks'] - baseline_two['lambda_tasks']} Lambda invocations",
    )
    to_step = [d["end_to_step_ms"] for d in delegating]
    to_model = [d["end_to_model_ms"] for d in delegating if d["end_to_model_ms"] is not None]
    section.add(
        "child's end → parent's next Step starts",
        median(to_step),
        "ms",
        f"median of {RUNS}: " + ", ".join(f"{v:.0f}" for v in to_step),
        digits=0,
    )
    if to_model:
        section.add(
            "child's end → parent's next model call",
            median(to_model),
            "ms",
            f"median of {len(to_model)}: " + ", ".join(f"{v:.0f}" for v in to_model),
            digits=0,
        )

    costs = [per_thousand(p["usage"].cost(functions)) for p in priced]
    cost = {service: median([c[service] for c in costs]) for service in costs[0]}
    tree = priced[0]
    section.add(
        "AWS cost of 1,000 coordinator + 2 children runs",
        sum(cost.values()),
        "USD",
        f"median of {RUNS}; the coordinator's 2 steps delegate to both children at once, each child "
        "does 2 steps with 1 lookup",
        digits=3,
    )
    for service, usd in cost.items():
        section.add(f"  {service}", usd, "USD", digits=3)
    section.add(
        "  state transitions (the tree)",
        sum(tree["transitions"].values()),
        "transitions",
        "coordinator {}, children {}".format(*_split(list(tree["transitions"].values()))),
    )
    section.add(
        "  Lambda invocations (the tree)",
        sum(tree["invocations"].values()),
        "invocations",
        ", ".join(f"{k.removesuffix('Function')} {v}" for k, v in tree["invocations"].items()),
    )
    section.add(
        "  DynamoDB requests (the tree)",
        tree["requests"],
        "requests",
        f"{tree['failed']} failed ({', '.join(f'{k} ×{v}' for k, v in tree['failures'].items()) or 'none'}); "
        f"{tree['rru']:.1f} RRU, {tree['wru']:.0f} WRU "
        f"({tree['wru_table']:.0f} table + {tree['wru_index']:.0f} index)",
    )
    section.notes.append(
        "states the delegating parent entered: " + ", ".join(f"{k} ×{v}" for k, v in first["entered"].items())
    )
    section.notes.append(
        f"Lambda billed time assumed = local wall time + {MODEL_CALL_SECONDS:g} s per model call + "
        f"{TOOL_CALL_SECONDS:g} s per tool request (as bench/canonical.py); the tree made "
        f"{tree['model_calls']} model calls and {tree['tool_requests']} tool requests"
    )
    if recorder.errors:
        section.notes.append(f"METERING ERRORS: {len(recorder.errors)}: {recorder.errors[:2]}")
    section.details = {
        "delegating": delegating,
        "baseline_one": baseline_one,
        "concurrent": concurrent,
        "baseline_two": baseline_two,
        "usd_per_1000": cost,
        "priced": [
            {k: v for k, v in p.items() if k != "usage"} | {"lambdas": p["usage"].lambdas} for p in priced
        ],
    }
    return section


def _plain_tree(env: Local, recorder: Recorder, agent_id: str) -> dict[str, Any]:
    """A coordinator + 2 children run, counted on the coordinator's execution only."""
    with recorder.charging(START):
        run_id = env.start(_calls("ask_a", "ask_b"), 2, agent_id=agent_id)
    parent = _tree(env, recorder, run_id)[0]
    return {
        "run_id": run_id,
        "transitions": transitions(parent["history"]),
        "lambda_tasks": lambda_tasks(parent["history"]),
        "entered": entered_by_state(parent["history"]),
    }
