"""What following a run live costs: a client that watches a run for FOLLOW_SECONDS (5 minutes: a run
that waits on an approval), priced per 1,000 runs.

Today's path is measured: during a run that waits for an approval (so no event arrives), one
GET /v1/runs/{id}/events?after=N&wait=MEASURE_WAIT, as the CLI sends it, is metered (bench/meter.py):
which functions it holds and for how long, and the DynamoDB requests and read units its polling makes
per second. pricing.follow_usage then prices a 5-minute follow at the CLI's own wait (stepwise.cli.follow
.WAIT), one more request per event that ends a poll early (the canonical run's event count).

The push path (an API Gateway WebSocket the steps post events to) is priced from parameters, as
nothing here runs it yet: one POST for the signed URL (an API request as measured here), one
connection for the whole follow (billed per started minute), one message per event. When the push
path lands, measure its per-event reads and connect-time writes and pass them in.
"""

from __future__ import annotations

import time
from typing import Any

from bench.dynamodb_ops import totals
from bench.harness import TOOL_NAME, Section, local, lookup_tool
from bench.meter import Recorder
from bench.pricing import LongPoll, WebSocketPush, follow_usage, functions_from_template, per_thousand

FOLLOW_SECONDS = 300.0
MEASURE_WAIT = 3.0  # seconds of one measured long poll (the rates are per second of it)
EVENTS = (
    25  # events a followed run emits: the canonical run's 23 (bench/canonical.py, "run events"), rounded up
)
GOAL = 0.05  # USD per 1,000 runs followed for 5 minutes (issue 10)
FOLLOW = "bench follow (measured)"
POLLING = "bench polling (not counted)"


def run() -> Section:
    section = Section("Following a run live for 5 minutes (long poll measured; push priced)")
    env = local()
    from stepwise.cli.follow import WAIT
    from stepwise.local.cfn_yaml import load_template
    from stepwise.local.stack import TEMPLATE

    functions = functions_from_template(load_template(TEMPLATE))
    recorder = Recorder(env)
    with recorder.installed():
        agent_id = env.create_agent(
            {"name": "bench-follow", "tools": [{**lookup_tool(env.tool.url), "permission": "ask"}]}
        )
        script = [{"tool_calls": [{"name": TOOL_NAME, "arguments": {"q": "f"}}]}, {"text": "done"}]
        with recorder.charging(POLLING):
            run_id = env.start(script, len(script), agent_id=agent_id)
            env.wait_status(run_id, "waiting")
            after = env.stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after=0")[2]["next"]
        marks = len(recorder.requests), len(recorder.invocations)
        began = time.perf_counter()
        with recorder.charging(FOLLOW):
            status, _, page = env.stack.invoke_api(
                "GET", f"/v1/runs/{run_id}/events?after={after}&wait={MEASURE_WAIT:g}"
            )
        held = time.perf_counter() - began
        requests = recorder.since(marks[0])
        invocations = [i for i in recorder.invocations_since(marks[1]) if i.root == FOLLOW]
        with recorder.charging(POLLING):
            env.stack.invoke_api("POST", f"/v1/runs/{run_id}/approve", {"approved": True})
            env.wait_execution(run_id)
    if status != 200 or page["events"]:
        section.notes.append(
            f"THE MEASURED POLL WAS NOT A QUIET ONE: {status}, {len(page.get('events', []))} events"
        )
    mine = [r for r in requests if r.root == FOLLOW]
    counted = totals(mine)
    held_by = max(invocations, key=lambda i: i.seconds) if invocations else None
    others = [i for i in invocations if i is not held_by]
    poll = LongPoll(
        function=held_by.function if held_by else "ApiFunction",
        authorizer=others[0].function if others else None,
        authorizer_seconds=others[0].seconds if others else 0.0,
        wait_seconds=float(WAIT),
        rru_per_second=counted["rru"] / held,
        wru_per_second=counted["wru"] / held,
    )
    with recorder.installed():
        api_seconds = _short_request(env, recorder, run_id)
    push = WebSocketPush(url_function=poll.function, url_seconds=api_seconds)

    section.add(
        f"measured long poll (wait={MEASURE_WAIT:g} s)",
        held,
        "s",
        f"holds {poll.function} ({functions[poll.function].memory_mb} MB)"
        + (
            f"; authorizer {poll.authorizer} {poll.authorizer_seconds * 1000:.0f} ms"
            if poll.authorizer
            else ""
        )
        + (" (cached: not invoked)" if not poll.authorizer else ""),
        digits=2,
    )
    section.add(
        "  DynamoDB while it waits",
        counted["requests"] / held,
        "requests/s",
        f"{poll.rru_per_second:.1f} RRU/s; " + ", ".join(f"{k} ×{v}" for k, v in _ops(mine).items()),
        digits=1,
    )
    rows: dict[str, dict[str, float]] = {}
    for name, path in (("long poll (today)", poll), ("WebSocket push (priced, not built)", push)):
        usage = follow_usage(path, FOLLOW_SECONDS, EVENTS)
        cost = per_thousand(usage.cost(functions))
        rows[name] = cost
        total = sum(cost.values())
        section.add(
            f"5-minute follow, {name}",
            total,
            "USD / 1,000",
            f"goal ≤ {GOAL:.2f}; " + ", ".join(f"{k} {v:.3f}" for k, v in cost.items() if v),
            digits=3,
        )
    section.notes.append(
        f"long poll: the CLI waits {WAIT} s per request, {EVENTS} events each end one early; "
        f"the API function is held the whole {FOLLOW_SECONDS:.0f} s, its polling reading DynamoDB "
        "at the measured rate"
    )
    section.notes.append(
        f"push: 1 POST for the URL ({api_seconds * 1000:.0f} ms of {push.url_function}, as a GET of the run "
        f"measures), {FOLLOW_SECONDS / 60:.0f} connection-minutes, {EVENTS} messages of ≤ 32 KB; per-event "
        "reads and the steps' posting calls are parameters (0 here) until the path exists"
    )
    section.details = {
        "measured": {
            "held_seconds": held,
            "requests": counted,
            "invocations": [vars(i) for i in invocations],
        },
        "long_poll": vars(poll),
        "push": vars(push),
        "usd_per_1000": rows,
        "follow_seconds": FOLLOW_SECONDS,
        "events": EVENTS,
    }
    return section


def _short_request(env: Any, recorder: Recorder, run_id: str) -> float:
    """Wall seconds of the API function answering one short request (GET of a run), its own invocation."""
    mark = len(recorder.invocations)
    with recorder.charging(FOLLOW):
        env.stack.invoke_api("GET", f"/v1/runs/{run_id}")
    api = [i for i in recorder.invocations_since(mark) if i.root == FOLLOW]
    return max((i.seconds for i in api), default=0.0)


def _ops(requests: list[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in requests:
        out[r.operation] = out.get(r.operation, 0) + 1
    return out
