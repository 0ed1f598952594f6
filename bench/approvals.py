"""An approval, locally: nothing runs while a run waits on it, how long a decision takes to reach the
tool, and what an approved call costs over an allowed one.

The bench tool with `"permission": "ask"` on an agent of its own; a 2-step script (one call, then text).
Each run is started, polled (GET /v1/runs/{id}) until it is "waiting", left alone for QUIET_SECONDS with
no request of ours while every Lambda's invocation count is compared, then approved with
POST /v1/runs/{id}/approve {"approved": true}. Decision → tool is from just before that POST to the
loopback tool server receiving the call (its handler notes the arrival), so it spans the answer's
conditional update, the approval_decided event, SendTaskSuccess, moto's interpreter waking the
AwaitApproval task, and the Resume task's Lambda up to its HTTP request.

Costs compare the approved run with a run of the same script on the bench agent, whose tool is
allowed: state transitions by transitions.py's counting rule, history events, Lambda invocations and
DynamoDB requests and units (bench/meter.py: every request, failed ones included; the approval's share
includes the approve POST, not our polls).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from bench.dynamodb_ops import READS, START, WRITES, Recorder
from bench.harness import (
    TOOL_NAME,
    Local,
    Section,
    local,
    lookup_tool,
    median,
)
from bench.pricing import SFN_TRANSITION
from bench.transitions import entered_by_state, transitions

APPROVAL_RUNS = 3  # median reported
QUIET_SECONDS = 1.0  # left alone while waiting, to show no Lambda runs
SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [{"name": TOOL_NAME, "arguments": {"q": "x"}}]},
    {"text": "done"},
]
POLLING = "bench polling (not counted)"
APPROVE = "API (POST …/approve)"


def _costs(
    env: Local, recorder: Recorder, run_id: str, mark: int, invocations: dict[str, int]
) -> dict[str, Any]:
    history = env.history(run_id)
    counted = recorder.since(mark, exclude=(POLLING,))
    ops = Counter(r.operation for r in counted)
    return {
        "run_id": run_id,
        "transitions": transitions(history),
        "history_events": len(history),
        "lambda_invocations": sum(invocations.values()),
        "invocations": {k: v for k, v in invocations.items() if v},
        "reads": sum(n for op, n in ops.items() if op in READS),
        "writes": sum(n for op, n in ops.items() if op in WRITES),
        "failed": sum(1 for r in counted if r.failed),
        "rru": sum(r.rru for r in counted),
        "wru": sum(r.wru for r in counted),
        "requests_by_function": dict(Counter(r.function for r in counted)),
        "entered": entered_by_state(history),
    }


def _approved_run(env: Local, recorder: Recorder, agent_id: str) -> dict[str, Any]:
    lambdas = env.stack.lambdas
    mark, started = len(recorder.requests), dict(lambdas.invocations)
    with recorder.charging(START):
        run_id = env.start(SCRIPT, len(SCRIPT), agent_id=agent_id)
    with recorder.charging(POLLING):
        env.wait_status(run_id, "waiting")
    quiet_from, tool_from = dict(lambdas.invocations), env.tool.requests
    time.sleep(QUIET_SECONDS)  # no request of ours: anything counted now ran on its own
    quiet = {f: n - quiet_from.get(f, 0) for f, n in lambdas.invocations.items() if n != quiet_from.get(f, 0)}
    tool_while_waiting = env.tool.requests - tool_from

    arrivals = len(env.tool.arrivals)
    decided = time.perf_counter()
    with recorder.charging(APPROVE):
        status, _, answered = env.stack.invoke_api("POST", f"/v1/runs/{run_id}/approve", {"approved": True})
    responded = time.perf_counter()
    if status != 200:
        raise RuntimeError(f"approve of {run_id}: {status} {answered}")
    with recorder.charging(POLLING):
        view = env.wait_run(run_id)
    env.wait_execution(run_id)
    if view["status"] != "succeeded":
        raise RuntimeError(f"approved run {run_id} {view['status']}: {view['error']}")
    if len(env.tool.arrivals) != arrivals + 1:
        raise RuntimeError(f"approved run {run_id} made {len(env.tool.arrivals) - arrivals} tool requests")
    invocations = {f: lambdas.invocations[f] - started.get(f, 0) for f in env.machine_functions}
    return {
        **_costs(env, recorder, run_id, mark, invocations),
        "invocations_while_waiting": quiet,
        "tool_requests_while_waiting": tool_while_waiting,
        "decision_to_tool_ms": (env.tool.arrivals[arrivals] - decided) * 1000,
        "approve_post_ms": (responded - decided) * 1000,
    }


def _allowed_run(env: Local, recorder: Recorder) -> dict[str, Any]:
    """The same script on the bench agent, whose tool is allowed."""
    lambdas = env.stack.lambdas
    mark, started = len(recorder.requests), dict(lambdas.invocations)
    with recorder.charging(START):
        run_id = env.start(SCRIPT, len(SCRIPT))
    with recorder.charging(POLLING):
        view = env.wait_run(run_id)
    env.wait_execution(run_id)
    if view["status"] != "succeeded":
        raise RuntimeError(f"allowed run {run_id} {view['status']}: {view['error']}")
    invocations = {f: lambdas.invocations[f] - started.get(f, 0) for f in env.machine_functions}
    return _costs(env, recorder, run_id, mark, invocations)


def run() -> Section:
    section = Section("Approvals: waiting, decision → tool, cost of an approved call (local)")
    env = local()
    recorder = Recorder(env)
    with recorder.installed():
        agent_id = env.create_agent(
            {"name": "bench-approval", "tools": [{**lookup_tool(env.tool.url), "permission": "ask"}]}
        )
        approved = [_approved_run(env, recorder, agent_id) for _ in range(APPROVAL_RUNS)]
        allowed = _allowed_run(env, recorder)

    ran_while_waiting = sum(sum(r["invocations_while_waiting"].values()) for r in approved)
    section.add(
        "invocations while waiting",
        ran_while_waiting,
        "invocations",
        f"every Lambda ({len(env.stack.lambdas.invocations)}), {QUIET_SECONDS:.0f} s into each of "
        f"{APPROVAL_RUNS} waits"
        + ("" if not ran_while_waiting else f": {[r['invocations_while_waiting'] for r in approved]}"),
    )
    section.add(
        "tool requests while waiting",
        sum(r["tool_requests_while_waiting"] for r in approved),
        "requests",
        "the tool runs only after the approval",
    )
    to_tool = [r["decision_to_tool_ms"] for r in approved]
    section.add(
        "decision → tool request received",
        median(to_tool),
        "ms",
        f"median of {APPROVAL_RUNS}: " + ", ".join(f"{v:.0f}" for v in to_tool),
        digits=0,
    )
    posts = [r["approve_post_ms"] for r in approved]
    section.add(
        "  of which POST /v1/runs/{id}/approve → 200",
        median(posts),
        "ms",
        "records the answer, approval_decided event, SendTaskSuccess: "
        + ", ".join(f"{v:.0f}" for v in posts),
        digits=0,
    )

    same = all(
        r[k] == approved[0][k]
        for r in approved
        for k in ("transitions", "history_events", "lambda_invocations", "reads", "writes", "failed")
    )
    one = approved[0]
    extra_states = Counter(one["entered"]) - Counter(allowed["entered"])
    fewer_states = Counter(allowed["entered"]) - Counter(one["entered"])
    section.add(
        "extra state transitions per approved call",
        one["transitions"] - allowed["transitions"],
        "transitions",
        f"{one['transitions']} vs {allowed['transitions']} for the allowed call; "
        + " ".join([f"+{s}" for s in extra_states.elements()] + [f"−{s}" for s in fewer_states.elements()]),
    )
    section.add(
        "extra history events per approved call",
        one["history_events"] - allowed["history_events"],
        "events",
        f"{one['history_events']} vs {allowed['history_events']}",
    )
    section.add(
        "extra Lambda invocations per approved call",
        one["lambda_invocations"] - allowed["lambda_invocations"],
        "invocations",
        "approved: " + ", ".join(f"{k.removesuffix('Function')} {v}" for k, v in one["invocations"].items()),
    )
    section.add(
        "extra DynamoDB requests per approved call",
        (one["reads"] + one["writes"]) - (allowed["reads"] + allowed["writes"]),
        "requests",
        f"+{one['reads'] - allowed['reads']} reads, +{one['writes'] - allowed['writes']} writes "
        f"({one['failed'] - allowed['failed']:+d} failed); {one['rru'] - allowed['rru']:+.1f} RRU, "
        f"{one['wru'] - allowed['wru']:+.0f} WRU; the approve POST included, our polling not",
    )
    section.add(
        "  Step Functions cost of 1,000 approvals (extra transitions)",
        (one["transitions"] - allowed["transitions"]) * SFN_TRANSITION * 1000,
        "USD",
        "$0.025 per 1,000 transitions",
        digits=3,
    )
    by_function = Counter(one["requests_by_function"])
    by_function.subtract(allowed["requests_by_function"])
    section.notes.append(
        "extra DynamoDB requests by function: "
        + ", ".join(f"{k.removesuffix('Function')} {v:+d}" for k, v in by_function.items() if v)
    )
    if not same:
        section.notes.append("THE APPROVED RUNS DID NOT ALL COUNT THE SAME; the first is shown")
    section.notes.append(
        "states entered, approved run: " + ", ".join(f"{k} ×{v}" for k, v in one["entered"].items())
    )
    section.notes.append(
        "states entered, allowed run:  " + ", ".join(f"{k} ×{v}" for k, v in allowed["entered"].items())
    )
    section.notes.append(
        "decision → tool is local: moto's interpreter wakes the waiting task at once; in AWS add "
        "SendTaskSuccess's and a Lambda's (possibly cold) start."
    )
    section.details = {"approved": approved, "allowed": allowed, "quiet_seconds": QUIET_SECONDS}
    return section
