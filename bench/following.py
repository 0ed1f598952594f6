"""Following a run live: what a waiting follower costs, by long-poll and over the follow WebSocket.

Counted locally (moto, at botocore, dynamodb_ops.Recorder): the DynamoDB requests of one long-poll of
a run that waits on an approval (each tick of stepwise.runs.eventlog reads the log's head item, nothing
else), the requests and @connections posts of one append with no follower and with one, and the Lambda
invocations while a socket client waits (none). The AWS figures per 1,000 runs are computed from those
counts and the public on-demand prices below (us-east-1, arm64), for a client that follows a run for
30 s and one that waits 5 minutes on an approval; "before" is the issue's figure for the 1 GB API
function polling the run item and the log every 0.25 s.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bench import pricing
from bench.approvals import SCRIPT
from bench.dynamodb_ops import Recorder
from bench.harness import Section, local, lookup_tool

LAMBDA_GB_SECOND = pricing.LAMBDA_GB_SECOND["arm64"]
LAMBDA_REQUEST = pricing.LAMBDA_REQUEST
DDB_READ_UNIT = pricing.DYNAMODB_RRU  # a strongly consistent read of ≤ 4 KB is one unit
DDB_WRITE_UNIT = pricing.DYNAMODB_WRU
WS_MESSAGE = pricing.WEBSOCKET_MESSAGE  # per 32 KB
WS_CONNECTION_MINUTE = pricing.WEBSOCKET_CONNECTION_MINUTE
EVENTS_MEMORY_GB = 0.25
READ_OPERATIONS = ("GetItem", "Query", "BatchGetItem", "Scan")
POLL_SECONDS = 3.0  # the measured long-poll
QUIET_SECONDS = 1.0
BEFORE = {"30 s": 0.43, "5 min": 4.0}  # $ per 1,000 runs, the figures for the 1 GB API function
# One follow: the URL, the authorizer, $connect, the backlog, $disconnect, each a short invocation.
FOLLOW_INVOCATIONS = 5
FOLLOW_INVOCATION_SECONDS = 0.1


@contextmanager
def management_calls() -> Iterator[Counter[str]]:
    """Counts @connections requests (post_to_connection, ...) while installed."""
    from botocore.client import BaseClient

    counted: Counter[str] = Counter()
    original = BaseClient._make_api_call
    lock = threading.Lock()

    def call(client: Any, operation: str, params: dict[str, Any]) -> Any:
        if client.meta.service_model.service_name == "apigatewaymanagementapi":
            with lock:
                counted[operation] += 1
        return original(client, operation, params)

    BaseClient._make_api_call = call
    try:
        yield counted
    finally:
        BaseClient._make_api_call = original


def run() -> Section:
    from websockets.sync.client import connect

    from stepwise.runs import events
    from stepwise_local.stack import DEFAULT_TENANT

    section = Section("Following a run live: long-poll and WebSocket (local counts, AWS prices)")
    env = local()
    recorder = Recorder(env)
    agent_id = env.create_agent(
        {"name": "bench-follow", "tools": [{**lookup_tool(env.tool.url), "permission": "ask"}]}
    )
    with management_calls() as posts, recorder.installed():
        run_id = env.start(SCRIPT, len(SCRIPT), agent_id=agent_id)
        env.wait_status(run_id, "waiting")
        _, _, page = env.stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after=0&wait=5")
        last = int(page["next"])

        mark = len(recorder.requests)
        with recorder.charging("EventsFunction"):  # the gateway calls it past the recorder's seam
            env.stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after={last}&wait={POLL_SECONDS}")
        poll = recorder.requests[mark:]
        ticks = Counter((r.function, r.operation) for r in poll)

        mark = len(recorder.requests)
        with recorder.charging("append, no follower"):
            events.emit(DEFAULT_TENANT, run_id, "compaction", {"bench": True})
        alone = Counter(r.operation for r in recorder.requests[mark:])

        _, _, issued = env.stack.invoke_api("POST", f"/v1/runs/{run_id}/follow?after={last + 1}")
        with connect(issued["url"], open_timeout=10) as socket:
            before_quiet = dict(env.stack.lambdas.invocations)
            time.sleep(QUIET_SECONDS)  # connected, nothing to send: nothing may run
            quiet = sum(env.stack.lambdas.invocations.values()) - sum(before_quiet.values())
            mark, posted = len(recorder.requests), posts["PostToConnection"]
            with recorder.charging("append, one follower"):
                events.emit(DEFAULT_TENANT, run_id, "compaction", {"bench": True})
            received = json.loads(socket.recv(timeout=10))
            followed = Counter(r.operation for r in recorder.requests[mark:])
            followed_posts = posts["PostToConnection"] - posted
        env.stack.invoke_api("POST", f"/v1/runs/{run_id}/approve", {"approved": True})
        view = env.wait_run(run_id)
        _, _, logged = env.stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after=0&wait=5")

    per_tick = sum(ticks.values())
    section.add(
        "DynamoDB requests of a 3 s long-poll of a waiting run",
        per_tick,
        "requests",
        ", ".join(f"{f}: {op} ×{n}" for (f, op), n in sorted(ticks.items())),
        digits=0,
    )
    section.add(
        "DynamoDB requests per append, no follower",
        sum(alone.values()),
        "requests",
        ", ".join(f"{op} ×{n}" for op, n in sorted(alone.items())),
        digits=0,
    )
    section.add(
        "DynamoDB requests per append, one follower",
        sum(followed.values()),
        "requests",
        ", ".join(f"{op} ×{n}" for op, n in sorted(followed.items())) + f"; {followed_posts} post",
        digits=0,
    )
    section.add(
        "Lambda invocations while a socket client waits",
        quiet,
        "invocations",
        f"over {QUIET_SECONDS:g} s, connected",
        digits=0,
    )
    if received.get("seq") != last + 2:
        section.notes.append(f"UNEXPECTED: the follower received {received}")

    n_events = len(logged["events"])
    reads_per_second = per_tick / POLL_SECONDS
    extra = sum(followed.values()) - sum(alone.values())  # per append, per follower
    extra_reads = sum(followed[op] - alone[op] for op in READ_OPERATIONS)
    extra_writes = extra - extra_reads
    for label, seconds in (("30 s", 30.0), ("5 min", 300.0)):
        lambda_cost = seconds * EVENTS_MEMORY_GB * LAMBDA_GB_SECOND + LAMBDA_REQUEST * max(seconds / 25, 1)
        long_poll = lambda_cost + seconds * reads_per_second * DDB_READ_UNIT
        socket_cost = (
            n_events * WS_MESSAGE
            + seconds / 60 * WS_CONNECTION_MINUTE
            + FOLLOW_INVOCATIONS
            * (LAMBDA_REQUEST + FOLLOW_INVOCATION_SECONDS * EVENTS_MEMORY_GB * LAMBDA_GB_SECOND)
            + n_events * (extra_writes * DDB_WRITE_UNIT + extra_reads * DDB_READ_UNIT)
        )
        section.add(
            f"follow for {label}: long-poll on the 256 MB function",
            long_poll * 1000,
            "$/1k runs",
            f"before: ${BEFORE[label]:.2f} (1 GB API function)",
            digits=3,
        )
        section.add(
            f"follow for {label}: WebSocket",
            socket_cost * 1000,
            "$/1k runs",
            f"{n_events} events; per event {extra_writes} extra writes, {extra_reads} reads (≤ 1 unit)",
            digits=3,
        )
    section.notes.append(
        f"the run ended {view['status']} with {n_events} events; extra DynamoDB requests per append and "
        f"follower: {extra}; every run pays one Query per append for finding no follower"
    )
    section.details = {
        "poll": {f"{f} {op}": n for (f, op), n in ticks.items()},
        "append_alone": dict(alone),
        "append_followed": dict(followed),
        "quiet_invocations": quiet,
        "events": n_events,
    }
    return section
