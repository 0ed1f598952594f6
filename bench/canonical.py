"""The canonical run, end to end and priced: 5 model steps, 4 tool calls (one per tool-using step), the
third of which waits for an approval, then a text answer.

Everything is counted on the real ASL in moto, from what happened, not from state names:
- state transitions: bench/transitions.py's rule over the execution history;
- Lambda: every invocation the run caused (Step Functions' tasks, async invocations, the two API
  requests the client makes: POST …/runs and POST …/approve), from bench/meter.py. Billed duration =
  the invocation's local wall time + MODEL_CALL_SECONDS per model call it made + TOOL_CALL_SECONDS per
  tool request that arrived while it was the newest invocation running (the scripted model and the
  loopback tool answer at once; a hosted model and a real tool do not). Memory and architecture per
  function come from template.yaml;
- DynamoDB: every request, failed ones included, with read and write units (indexes included);
- API Gateway: the client's HTTP API requests (our polling for "waiting" is not counted).
Prices: bench/pricing.py. Following the run live is measured and priced apart (bench/following.py).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from bench.dynamodb_ops import breakdown, totals
from bench.harness import TOOL_NAME, Local, Section, local, lookup_tool, median
from bench.meter import Invocation, Recorder, round_trips
from bench.pricing import (
    LEGACY_DYNAMODB,
    MODEL_CALL_SECONDS,
    TOOL_CALL_SECONDS,
    Usage,
    functions_from_template,
    per_thousand,
)
from bench.transitions import lambda_tasks, transitions

RUNS = 3  # counts must agree; costs are the median (local durations vary)
ASK_TOOL = "lookup_ask"
SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [{"name": TOOL_NAME, "arguments": {"q": "canon-1"}}]},
    {"tool_calls": [{"name": TOOL_NAME, "arguments": {"q": "canon-2"}}]},
    {"tool_calls": [{"name": ASK_TOOL, "arguments": {"q": "canon-3"}}]},
    {"tool_calls": [{"name": TOOL_NAME, "arguments": {"q": "canon-4"}}]},
    {"text": "done (canonical)"},
]
START, APPROVE = "API (POST …/runs)", "API (POST …/approve)"
POLLING = "bench polling (not counted)"
GOALS = {"transitions": 14, "usd_per_1000": 0.55, "round_trips": 6}  # issues 10 and 28

# A step's AWS latency, estimated from its sequential DynamoDB round trips (measured below) and:
DYNAMODB_MS = 5.0  # per request. "For most atomic operations, such as GetItem and PutItem, you can
# expect an average latency in single-digit milliseconds" (AWS re:Post Knowledge Center,
# https://repost.aws/knowledge-center/dynamodb-high-latency): the middle of that range.
LAMBDA_INVOKE_MS = 20.0  # a warm invocation's overhead. "Warm start: <20ms (reused container)"
# (https://alexmayhew.dev/blog/lambda-tax-cold-starts): its upper bound.
SFN_TRANSITION_MS = 25.0  # per state transition of a Standard workflow: ASSUMED. No AWS document or
# published measurement of it was found to cite in this session; the figure is a placeholder, named.
TRANSITIONS_PER_STEP = 2  # Step (Task) and Route (Choice): statemachine/agent_run.asl.json
# The round-trip run: each request waits this long before it is sent (moto answers in process, under
# the GIL, so requests issued together would rarely overlap in time without it), and the scripted model
# takes MODEL_SECONDS to answer (what overlaps a model call is off the step's critical path).
MODEL_SECONDS = 0.2


def billed_seconds(invocations: list[Invocation], tool_arrivals: list[float]) -> dict[int, float]:
    """Each invocation's assumed billed duration: local wall time, plus the model's and the tools'."""
    out = {i.id: i.seconds + i.model_calls * MODEL_CALL_SECONDS for i in invocations}
    for t in tool_arrivals:
        running = [i for i in invocations if i.began <= t <= i.ended]
        if running:
            out[max(running, key=lambda i: i.began).id] += TOOL_CALL_SECONDS
    return out


def _one(env: Local, recorder: Recorder, agent_id: str) -> dict[str, Any]:
    marks = (len(recorder.requests), len(recorder.invocations), len(env.tool.arrivals))
    with recorder.charging(START):
        run_id = env.start(SCRIPT, len(SCRIPT), agent_id=agent_id)
    with recorder.charging(POLLING):
        env.wait_status(run_id, "waiting")
    with recorder.charging(APPROVE):
        status, _, answered = env.stack.invoke_api("POST", f"/v1/runs/{run_id}/approve", {"approved": True})
    if status != 200:
        raise RuntimeError(f"approve of {run_id}: {status} {answered}")
    env.wait_execution(run_id)
    with recorder.charging(POLLING):
        view = env.wait_run(run_id)
        events = len(env.events(run_id))
    history = env.history(run_id)
    requests = recorder.since(marks[0], exclude=(POLLING,))
    invocations = recorder.invocations_since(marks[1], exclude=(POLLING,))
    billed = billed_seconds(invocations, env.tool.arrivals[marks[2] :])

    usage = Usage(transitions=transitions(history), http_api_requests=2)
    counted = totals(requests)
    usage.rru, usage.wru = counted["rru"], counted["wru"]
    local_s: Counter[str] = Counter()
    for i in invocations:
        usage.add_lambda(i.function, 1, billed[i.id])
        local_s[i.function] += i.seconds
    return {
        "run_id": run_id,
        "status": view["status"],
        "steps": int(view["steps"]),
        "usage": usage,
        "transitions": usage.transitions,
        "history_events": len(history),
        "run_events": events,
        "lambda_tasks": lambda_tasks(history),
        "invocations": dict(Counter(i.function for i in invocations)),
        "model_calls": sum(i.model_calls for i in invocations),
        "tool_requests": len(env.tool.arrivals) - marks[2],
        "local_seconds": dict(local_s),
        "billed_seconds": {f: s for f, (_, s) in usage.lambdas.items()},
        **counted,
        **breakdown(requests),
    }


def run() -> Section:
    section = Section("Canonical run (5 steps, 4 calls, 1 approval): counted on moto and priced")
    env = local()
    from stepwise_local.cfn_yaml import load_template
    from stepwise_local.stack import TEMPLATE

    functions = functions_from_template(load_template(TEMPLATE))
    recorder = Recorder(env)
    with recorder.installed():
        agent_id = env.create_agent(
            {
                "name": "bench-canonical",
                "tools": [
                    lookup_tool(env.tool.url),
                    {**lookup_tool(env.tool.url), "name": ASK_TOOL, "permission": "ask"},
                ],
            }
        )
        runs = [_one(env, recorder, agent_id) for _ in range(RUNS)]
        trips = _round_trips(env, recorder, agent_id)

    bad = [r for r in runs if r["status"] != "succeeded"]
    if bad:
        section.notes.append(f"RUNS THAT DID NOT SUCCEED: {[(r['run_id'], r['status']) for r in bad]}")
    keys = (
        "transitions",
        "history_events",
        "lambda_tasks",
        "requests",
        "failed",
        "rru",
        "wru",
        "model_calls",
    )
    if any(r[k] != runs[0][k] for r in runs for k in keys):
        section.notes.append(
            "THE RUNS DID NOT ALL COUNT THE SAME: " + "; ".join(str({k: r[k] for k in keys}) for r in runs)
        )
    one = runs[0]
    costs = [per_thousand(r["usage"].cost(functions)) for r in runs]
    cost = {service: median([c[service] for c in costs]) for service in costs[0]}
    total = sum(cost.values())

    section.add("state transitions", one["transitions"], "transitions", f"goal ≤ {GOALS['transitions']}")
    section.add("history events", one["history_events"], "events")
    section.add(
        "run events", one["run_events"], "events", "what a client following it receives (bench/following.py)"
    )
    invocations = sum(one["invocations"].values())
    section.add(
        "Lambda invocations",
        invocations,
        "invocations",
        ", ".join(f"{k.removesuffix('Function')} {v}" for k, v in one["invocations"].items())
        + f"; {one['lambda_tasks']} by Step Functions tasks",
    )
    section.add(
        "model calls / tool requests", f"{one['model_calls']} / {one['tool_requests']}", "", "seen in the run"
    )
    section.add(
        "DynamoDB requests",
        one["requests"],
        "requests",
        f"{one['reads']} reads, {one['writes']} writes; {one['failed']} failed: "
        + (", ".join(f"{k} ×{v}" for k, v in one["failures"].items()) or "none"),
    )
    section.add("  read units", one["rru"], "RRU", f"{one['items_read']} items read", digits=1)
    section.add(
        "  write units",
        one["wru"],
        "WRU",
        f"{one['wru_table']:.0f} table + {one['wru_index']:.0f} index",
        digits=0,
    )
    section.add(
        "AWS cost of 1,000 canonical runs", total, "USD", f"goal ≤ {GOALS['usd_per_1000']:.2f}", digits=3
    )
    for service, usd in cost.items():
        section.add(f"  {service}", usd, "USD", digits=3)
    legacy = (one["rru"] * LEGACY_DYNAMODB["rru"] + one["wru"] * LEGACY_DYNAMODB["wru"]) * 1000
    section.notes.append(
        "DynamoDB at the pre-2024-11 on-demand prices ($1.25 / $0.25 per million): "
        f"{legacy:.3f} USD per 1,000 runs"
    )
    gb_s = {f: functions[f].memory_mb / 1024 * s for f, s in one["billed_seconds"].items()}
    section.notes.append(
        f"Lambda billed time assumed = local wall time + {MODEL_CALL_SECONDS:g} s per model call + "
        f"{TOOL_CALL_SECONDS:g} s per tool request; GB-s per run: "
        + ", ".join(
            f"{f.removesuffix('Function')} {gb:.2f} ({functions[f].memory_mb} MB, "
            f"local {one['local_seconds'][f]:.2f} s)"
            for f, gb in gb_s.items()
        )
    )
    for op, outcomes in sorted(one["by_operation"].items()):
        section.notes.append(f"DynamoDB {op}: " + ", ".join(f"{o} ×{n}" for o, n in sorted(outcomes.items())))
    for table, row in sorted(one["by_table"].items()):
        section.notes.append(
            f"DynamoDB {table}: {row['requests']} requests, {row['rru']:.1f} RRU, {row['wru']:.0f} WRU"
        )
    if one["index_wru"]:
        section.notes.append(
            "index writes: " + ", ".join(f"{k} {v:.0f} WRU" for k, v in sorted(one["index_wru"].items()))
        )
    section.notes.append(
        "not priced: the model's tokens, CloudWatch logs and metrics, X-Ray, data transfer, storage"
    )
    _report_round_trips(section, trips)
    section.details = {
        "script": SCRIPT,
        "assumptions": {"model_call_seconds": MODEL_CALL_SECONDS, "tool_call_seconds": TOOL_CALL_SECONDS},
        "usd_per_1000": cost,
        "round_trips": trips,
        "runs": [
            {k: v for k, v in r.items() if k != "usage"} | {"lambdas": r["usage"].lambdas} for r in runs
        ],
    }
    return section


def _round_trips(env: Local, recorder: Recorder, agent_id: str) -> dict[str, Any]:
    """One more canonical run (not priced): each Step invocation's DynamoDB requests and the round
    trips they made, read from their timing (bench.meter.round_trips)."""
    marks = (len(recorder.requests), len(recorder.invocations))
    recorder.request_latency, recorder.model_latency = DYNAMODB_MS / 1000, MODEL_SECONDS
    try:
        with recorder.charging(START):
            run_id = env.start(SCRIPT, len(SCRIPT), agent_id=agent_id)
        with recorder.charging(POLLING):
            env.wait_status(run_id, "waiting")
        with recorder.charging(APPROVE):
            env.stack.invoke_api("POST", f"/v1/runs/{run_id}/approve", {"approved": True})
        env.wait_execution(run_id)
    finally:
        recorder.request_latency = recorder.model_latency = 0.0
    steps = sorted(
        (i for i in recorder.invocations[marks[1] :] if i.function == "StepFunction"), key=lambda i: i.began
    )
    out = []
    for number, invocation in enumerate(steps, 1):
        requests = [r for r in recorder.requests[marks[0] :] if r.invocation == invocation.id]
        groups = round_trips(requests, invocation.model_spans, invocation.thread)
        critical = [g for g in groups if not g.behind_model]
        out.append(
            {
                "step": number,
                "requests": len(requests),
                "round_trips": len(critical),
                "behind_model": len(groups) - len(critical),
                "trips": [
                    "+".join(f"{r.operation}:{_table(r.tables)}" for r in g.requests)
                    + (" (behind the model)" if g.behind_model else "")
                    for g in groups
                ],
            }
        )
    return {"run_id": run_id, "steps": out}


def _table(tables: tuple[str, ...]) -> str:
    return tables[0].split("-")[-1] if tables else ""


STEP_ROLES = {
    1: "first step (prepares the run, one call)",
    2: "tool step (one call)",
    3: "step whose call asks approval",
    4: "after the approval (the approved call, the model, one call)",
    5: "final answer",
}


def aws_latency_ms(round_trips: int) -> float:
    """A step's AWS latency less the model's and the tools': its round trips, its Lambda invocation,
    its transitions (the model above)."""
    return round_trips * DYNAMODB_MS + LAMBDA_INVOKE_MS + TRANSITIONS_PER_STEP * SFN_TRANSITION_MS


def _report_round_trips(section: Section, trips: dict[str, Any]) -> None:
    steps = trips["steps"]
    tool = next((s for s in steps if s["step"] == 2), None)
    if tool is None:
        section.notes.append(f"ROUND TRIPS NOT MEASURED: the run had {len(steps)} Step invocations")
        return
    section.add(
        "a tool step's DynamoDB requests", tool["requests"], "requests", "step 2 of the canonical run"
    )
    section.add(
        "a tool step's sequential DynamoDB round trips",
        tool["round_trips"],
        "round trips",
        f"goal ≤ {GOALS['round_trips']}; {tool['behind_model']} more behind the model call",
    )
    section.add(
        "a tool step's estimated AWS latency, less model and tool",
        aws_latency_ms(tool["round_trips"]),
        "ms",
        f"{tool['round_trips']} × {DYNAMODB_MS:g} ms DynamoDB + {LAMBDA_INVOKE_MS:g} ms Lambda invoke + "
        f"{TRANSITIONS_PER_STEP} × {SFN_TRANSITION_MS:g} ms transitions (assumed)",
    )
    section.add(
        "  of which DynamoDB, as if its requests were one after another",
        tool["requests"] * DYNAMODB_MS,
        "ms",
        f"{tool['requests']} × {DYNAMODB_MS:g} ms: what the same requests cost in sequence",
    )
    for s in steps:
        role = STEP_ROLES.get(s["step"], f"step {s['step']}")
        section.notes.append(
            f"round trips, {role}: {s['requests']} requests in {s['round_trips']} round trips"
            f" (+{s['behind_model']} behind the model): " + " | ".join(s["trips"])
        )
    section.notes.append(
        f"round trips are read from timing: each request waited {DYNAMODB_MS:g} ms before it was sent, "
        f"the scripted model took {MODEL_SECONDS:g} s; requests that overlap form one round trip"
    )
