"""What the AG-UI door adds to a run: the same scripted run (one tool call, then an answer) started through
`POST /v1/agents/{id}/runs` and followed with the events long-poll, as a client would, and started through
`POST /v1/agents/{id}/ag-ui`, whose one response streams it.

Counted locally (bench/meter.py): every DynamoDB request and Lambda invocation, split into the run's own
(its execution's steps: the same work on both paths) and the client's (what its HTTP requests made the
functions do). The log's head reads of a waiting reader (one per 0.25 s tick of stepwise.runs.eventlog,
on both paths) depend on how long the run takes, so they are shown apart from the rest.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from bench.harness import Section, lookup_tool, script_for
from bench.meter import OUTSIDE, Recorder, Request

API = "API: POST …/runs, then GET …/events long-polls"
DOOR = "AG-UI: POST …/ag-ui"
SCRIPT = script_for([1], "door")
RUNS = 2  # the first of each path warms the functions; the second is counted


def _head_reads(requests: list[Request], events_table: str) -> int:
    return sum(1 for r in requests if r.operation == "GetItem" and r.tables == (events_table,))


def _through_api(env: Any, agent_id: str, session: dict[str, str]) -> str:
    body: dict[str, Any] = {
        "message": "bench door run",
        "script": SCRIPT,
        "max_steps": len(SCRIPT),
        **session,
    }
    _, _, accepted = env.stack.invoke_api("POST", f"/v1/agents/{agent_id}/runs", body)
    run_id = str(accepted["run_id"])
    session["session_id"] = str(accepted["session_id"])  # the next run continues it, like a thread
    after, done = 0, False
    while not done:
        _, _, page = env.stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after={after}&wait=20")
        after, done = int(page["next"]), bool(page["done"])
    return run_id


def _through_door(env: Any, agent_id: str, thread: str) -> tuple[str, int]:
    """The run's id and how many responses the client needed (continuations included)."""
    body: dict[str, Any] = {
        "threadId": thread,
        "runId": str(uuid.uuid4()),
        "messages": [{"id": "u1", "role": "user", "content": "bench door run"}],
    }
    responses = 0
    while True:
        status, _, text = env.stack.invoke_api("POST", f"/v1/agents/{agent_id}/ag-ui", body)
        responses += 1
        if status != 200:
            raise RuntimeError(f"ag-ui: {status} {text}")
        last = text.strip().split("\n\n")[-1]
        if '"stepwise:continue' not in last:
            break
        token = last.split('"id":"', 1)[1].split('"', 1)[0]
        body = {
            **body,
            "runId": str(uuid.uuid4()),
            "messages": [],
            "resume": [{"interruptId": token, "status": "resolved"}],
        }
    first = text.split("\n\n", 1)[0]
    return "run_" + first.split('"runId":"run_', 1)[1].split('"', 1)[0], responses


def run() -> Section:
    from bench.harness import local

    section = Section("AG-UI door: what it adds to a run (local counts)")
    env = local()
    recorder = Recorder(env)
    events_table = env.stack.resolver.physical.get("RunEventsTable", "RunEventsTable")
    api_agent = env.create_agent({"name": "bench-api", "tools": [lookup_tool(env.tool.url)]})
    door_agent = env.create_agent(
        {
            "name": "bench-agui",
            "tools": [lookup_tool(env.tool.url)],
            "script": SCRIPT,
            "max_steps": len(SCRIPT),
        }
    )
    counted: dict[str, dict[str, Any]] = {}
    # Each path's two runs share a conversation (a session, a thread): its first run, then a later one.
    thread, session = f"bench-{uuid.uuid4().hex[:8]}", dict[str, str]()
    with recorder.installed():
        for path in ("api", "door"):
            for attempt in range(RUNS):
                marks = (len(recorder.requests), len(recorder.invocations))
                if path == "api":
                    with recorder.charging(API):
                        run_id = _through_api(env, api_agent, session)
                    responses = 0
                else:
                    with recorder.charging(DOOR):
                        run_id, responses = _through_door(env, door_agent, thread)
                env.wait_execution(run_id)
                requests = recorder.since(marks[0])
                invocations = recorder.invocations_since(marks[1])
                client = [r for r in requests if r.root in (API, DOOR)]
                own = [r for r in requests if r.root in ("", OUTSIDE)]
                counted[path if attempt else f"{path} first"] = {
                    "run": len(own),
                    "client": len(client) - _head_reads(client, events_table),
                    "authorizer": sum(1 for r in client if r.function == "AuthorizerFunction"),
                    "head": _head_reads(client, events_table),
                    "client_ops": Counter(f"{r.operation} {r.tables[0] if r.tables else ''}" for r in client),
                    "client_invocations": sum(1 for i in invocations if i.root in (API, DOOR)),
                    "responses": responses,
                }
    api, door = counted["api"], counted["door"]
    section.add("DynamoDB requests of the run itself, API path", api["run"], "requests", digits=0)
    section.add("DynamoDB requests of the run itself, AG-UI path", door["run"], "requests", digits=0)
    section.add(
        "Client-side DynamoDB requests (head polls apart), API path",
        api["client"],
        "requests",
        _ops(api["client_ops"], events_table),
        digits=0,
    )
    section.add(
        "Client-side DynamoDB requests (head polls apart), AG-UI path",
        door["client"],
        "requests",
        _ops(door["client_ops"], events_table),
        digits=0,
    )
    extra = (door["run"] + door["client"]) - (api["run"] + api["client"])
    section.add(
        "Extra DynamoDB requests per run through the door",
        extra,
        "requests",
        "goal ≤ 2; a later run of a thread, the API client's extra authorizer reads (one per poll) counted",
        digits=0,
    )
    for label, door_run, api_run in (
        ("a later run of a thread", door, api),
        ("the first run of a thread", counted["door first"], counted["api first"]),
    ):
        apart = (door_run["run"] + door_run["client"] - door_run["authorizer"]) - (
            api_run["run"] + api_run["client"] - api_run["authorizer"]
        )
        section.add(
            f"Extra DynamoDB requests, authorizer reads apart, {label}",
            apart,
            "requests",
            "the runId's idempotency record (PutItem, UpdateItem)"
            + ("; the thread's session, missed once (GetItem)" if "first" in label else ""),
            digits=0,
        )
    section.add(
        "Log head reads while waiting, API / AG-UI",
        f"{api['head']} / {door['head']}",
        "",
        "one per 0.25 s tick on either path: the run's duration, not the door",
    )
    section.add(
        "Lambda invocations of the client, API / AG-UI",
        f"{api['client_invocations']} / {door['client_invocations']}",
        "",
        f"API: the start and its long-polls; AG-UI: {door['responses']} streamed response(s), none more "
        "while it waits",
    )
    return section


def _ops(ops: Counter[str], events_table: str) -> str:
    shown = {k: v for k, v in ops.items() if k != f"GetItem {events_table}"}
    return ", ".join(f"{k} ×{v}" for k, v in sorted(shown.items()))
