"""The MCP door against the API: what `POST /v1/mcp` adds to the same run, in DynamoDB requests and
Lambda invocations.

One agent holds the script (an MCP tool takes only `{message, session_id?}`), so the three clients run
exactly the same run: a tool call, then the answer.
- API: `POST /v1/agents/{id}/runs`, then `GET /v1/runs/{id}/events?wait=25` until `done` (a client
  reading the log, as it would), then `GET /v1/runs/{id}` for the output.
- MCP, blocking: one `tools/call` that waits for the end (progress.settle on the log's long-poll).
- MCP, task: `tools/call` with `params.task` (answered at once), then `tasks/result` (waits for the end).
Counted: what the client's requests cost (their invocations, the authorizer's included, and every
DynamoDB request made in them), apart from the run's own engine (Step Functions and its functions),
which is the same in all three and reported as a check. Medians of REPEATS runs after a warm-up. A
client's `initialize` and `notifications/initialized` come once per connection, not per run: counted
separately.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from bench.harness import TOOL_NAME, Local, Section, local, lookup_tool, median
from bench.meter import Recorder

REPEATS = 5
WAIT = 25  # the API client's long-poll, as long as the events route allows
SCRIPT = [{"tool_calls": [{"name": TOOL_NAME, "arguments": {"q": "door"}}]}, {"text": "done (door)"}]
GOAL_EXTRA_REQUESTS = 2
VERSION = {"mcp-protocol-version": "2025-11-25"}
HELLO = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}


def _rpc(env: Local, method: str, params: dict[str, Any]) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    # As a client sends it after initialize: the version decides whether tasks exist.
    status, _, answer = env.stack.invoke_api("POST", "/v1/mcp", body, headers=VERSION)
    if status not in (200, 202) or (isinstance(answer, dict) and "error" in answer):
        raise RuntimeError(f"{method}: {status} {answer}")
    return answer


def _api(env: Local, agent_id: str) -> str:
    status, _, accepted = env.stack.invoke_api("POST", f"/v1/agents/{agent_id}/runs", {"message": "bench"})
    if status != 202:
        raise RuntimeError(f"run not accepted: {status} {accepted}")
    run_id = str(accepted["run_id"])
    after = 0
    while True:
        _, _, page = env.stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after={after}&wait={WAIT}")
        after = int(page["next"])
        if page["done"]:
            break
    env.stack.invoke_api("GET", f"/v1/runs/{run_id}")
    return run_id


def _blocking(env: Local, name: str) -> str:
    answer = _rpc(env, "tools/call", {"name": name, "arguments": {"message": "bench"}})
    return str(answer["result"]["structuredContent"]["run_id"])


def _task(env: Local, name: str) -> str:
    created = _rpc(env, "tools/call", {"name": name, "arguments": {"message": "bench"}, "task": {}})
    task_id = str(created["result"]["task"]["taskId"])
    _rpc(env, "tasks/result", {"taskId": task_id})
    return task_id


def run() -> Section:
    from stepwise.protocols.mcp_server import tool_name

    section = Section("MCP door: what POST /v1/mcp adds to a run (local counts)")
    env = local()
    recorder = Recorder(env)
    tools = [lookup_tool(env.tool.url)]
    door = {"enabled": True}
    agent_id = env.create_agent({"name": "bench-mcp", "mcp": door, "tools": tools, "script": SCRIPT})
    name = tool_name("bench-mcp", agent_id)
    clients = {
        "API (start, events long-poll, get)": lambda: _api(env, agent_id),
        "MCP tools/call, blocking": lambda: _blocking(env, name),
        "MCP tools/call as a task, tasks/result": lambda: _task(env, name),
    }
    env.wait_execution(_api(env, agent_id))  # warm-up: the first run pays the imports

    # A long-poll's ticks: strongly consistent GetItems of the run-events table (the log's head, and an
    # active run's context item), as many as the wait lasts: timing, not translation.
    events_table = env.stack.resolver.physical.get("RunEventsTable", "RunEventsTable")
    counted: dict[str, list[dict[str, Any]]] = {label: [] for label in clients}
    with recorder.installed():
        for _ in range(REPEATS):
            for label, client in clients.items():
                requests, invocations = len(recorder.requests), len(recorder.invocations)
                with recorder.charging(label):
                    run_id = client()
                env.wait_execution(run_id)
                mine = [r for r in recorder.requests[requests:] if r.root == label]
                engine = [r for r in recorder.requests[requests:] if r.root != label]
                called = [i for i in recorder.invocations[invocations:] if i.root == label]
                polls = [r for r in mine if r.operation == "GetItem" and r.tables == (events_table,)]
                counted[label].append(
                    {
                        "requests": len(mine),
                        "fixed": len(mine) - len(polls),
                        "operations": Counter(f"{r.function} {r.operation}" for r in mine),
                        "engine": len(engine),
                        "invocations": Counter(i.function for i in called),
                        "held_seconds": max((i.seconds for i in called), default=0.0),
                    }
                )
        mark, invoked = len(recorder.requests), len(recorder.invocations)
        with recorder.charging("handshake"):
            _rpc(env, "initialize", HELLO)
            env.stack.invoke_api("POST", "/v1/mcp", {"jsonrpc": "2.0", "method": "notifications/initialized"})
        handshake_requests = len(recorder.requests) - mark
        handshake_invocations = len(recorder.invocations) - invoked

    base = counted["API (start, events long-poll, get)"]
    base_requests = median([c["requests"] for c in base])
    base_fixed = median([c["fixed"] for c in base])
    base_invocations = median([sum(c["invocations"].values()) for c in base])
    for label, runs in counted.items():
        n_requests = median([c["requests"] for c in runs])
        n_invocations = median([sum(c["invocations"].values()) for c in runs])
        n_fixed = median([c["fixed"] for c in runs])
        typical = min(runs, key=lambda c: abs(sum(c["invocations"].values()) - n_invocations))
        section.add(
            f"{label}: DynamoDB requests",
            n_requests,
            "requests",
            f"{n_requests - base_requests:+g} vs the API (goal ≤ +{GOAL_EXTRA_REQUESTS}); engine "
            f"{median([c['engine'] for c in runs]):g}",
            digits=0,
        )
        section.add(
            f"{label}: DynamoDB requests but the wait's ticks",
            n_fixed,
            "requests",
            f"{n_fixed - base_fixed:+g} vs the API (goal ≤ +{GOAL_EXTRA_REQUESTS}); the ticks (the log's "
            "head every 0.25 s) follow the run's duration",
            digits=0,
        )
        section.add(
            f"{label}: Lambda invocations",
            n_invocations,
            "invocations",
            f"{n_invocations - base_invocations:+g} vs the API; "
            + ", ".join(f"{f} ×{n}" for f, n in sorted(typical["invocations"].items())),
            digits=0,
        )
        section.add(
            f"{label}: longest client request",
            median([c["held_seconds"] for c in runs]),
            "s",
            "how long one invocation is held while the run works",
            digits=2,
        )
    section.add(
        "MCP handshake per connection (initialize + initialized)",
        handshake_invocations,
        "invocations",
        f"{handshake_requests} DynamoDB requests; once per client connection, not per run",
        digits=0,
    )
    section.notes.append(
        "The door's own reads: the agent once more (tools/call checks `mcp.enabled` before start reads it), "
        "and settle's first look (the log's head, the run, its open waits); the rest is waiting, the log's "
        "head every 0.25 s, which varies with timing in all three. The authorizer reads the key once per "
        "request, so fewer requests also save reads."
    )
    section.notes.append(
        "While an MCP client waits it makes no invocation beyond its one held request (blocking call, "
        "tasks/result); the wait reads the log's head every 0.25 s inside it, as the events long-poll does."
    )
    section.details = {
        label: [{**c, "operations": dict(c["operations"]), "invocations": dict(c["invocations"])} for c in rs]
        for label, rs in counted.items()
    }
    json.dumps(section.details)  # the results file must be able to hold them
    return section
