"""The A2A door's cost: the same scripted run through `/v1/agents/{id}/runs` (started, then followed on
the events long-poll and read, as a client would) and through `POST /a2a/{id}` (SendMessage blocking;
SendStreamingMessage), metered in the local stack (bench/meter.py: every DynamoDB request, every Lambda
invocation).

Split by who pays: the client's side (the requests made inside the invocations the client's calls
caused, the gateway's) and the run's own side (the Step and Await functions', Step Functions' own
thread). The door must add nothing to the run's own side unless the task has push notification configs
(then: one delivery per state change, measured too), and a client waiting on a blocking send or a stream
is one invocation however long it waits. Figures are medians over RUNS sequential runs.
"""

from __future__ import annotations

import json
import statistics
import threading
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bench.harness import Section, local
from bench.meter import Recorder

RUNS = 5
CLIENT = "client"
SCRIPT = [{"text": "all done"}]


class Sink:
    """A push notification receiver answering 204."""

    def __init__(self) -> None:
        self.count = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.count += 1
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/push"
        threading.Thread(target=self.server.serve_forever, daemon=True, name="bench-a2a-push").start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _rpc(env: Any, agent_id: str, method: str, params: dict[str, Any]) -> Any:
    call = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    status, _, body = env.stack.invoke_api("POST", f"/a2a/{agent_id}", call)
    if status != 200:
        raise RuntimeError(f"{method}: HTTP {status} {body}")
    return body


def _message(text: str) -> dict[str, Any]:
    return {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}


def _via_api(env: Any, agent_id: str, keyed: bool = False) -> str:
    # Keyed: with an Idempotency-Key, the retry-safe start the door always makes (from the messageId).
    headers = {"Idempotency-Key": str(uuid.uuid4())} if keyed else None
    status, _, accepted = env.stack.invoke_api(
        "POST", f"/v1/agents/{agent_id}/runs", {"message": "go"}, headers=headers
    )
    if status != 202:
        raise RuntimeError(f"run not accepted: {status} {accepted}")
    run_id = str(accepted["run_id"])
    after = 0
    while True:
        _, _, page = env.stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after={after}&wait=25")
        after = page["next"]
        if page["done"]:
            break
    env.stack.invoke_api("GET", f"/v1/runs/{run_id}")  # the answer, as a client reads it
    return run_id


def _via_send(env: Any, agent_id: str, push: str | None = None) -> str:
    params: dict[str, Any] = {"message": _message("go")}
    if push is not None:
        params["configuration"] = {"taskPushNotificationConfig": {"url": push, "token": "bench"}}
    body = _rpc(env, agent_id, "SendMessage", params)
    task = body["result"]["task"]
    if task["status"]["state"] != "TASK_STATE_COMPLETED":
        raise RuntimeError(f"task not completed: {json.dumps(task)[:300]}")
    return str(task["id"])


def _via_stream(env: Any, agent_id: str) -> str:
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendStreamingMessage",
        "params": {"message": _message("go")},
    }
    status, _, text = env.stack.invoke_api("POST", f"/a2a/{agent_id}", call)
    if status != 200 or "TASK_STATE_COMPLETED" not in str(text):
        raise RuntimeError(f"stream did not complete: {status} {str(text)[:300]}")
    first = next(line for line in str(text).splitlines() if line.startswith("data: "))
    return str(json.loads(first[len("data: ") :])["result"]["task"]["id"])


def _head_read(request: Any) -> bool:
    return bool(request.operation == "GetItem" and request.tables == ("RunEventsTable",))


def _measure(env: Any, recorder: Recorder, path: Any) -> dict[str, Any]:
    client_requests, run_requests, client_calls, run_calls, ticks = [], [], [], [], []
    last: Counter[str] = Counter()
    for _ in range(RUNS):
        requests, invocations = len(recorder.requests), len(recorder.invocations)
        with recorder.charging(CLIENT):
            run_id = path()
        env.wait_execution(run_id)  # the run's own side is complete
        new = recorder.requests[requests:]
        calls = recorder.invocations[invocations:]
        client_requests.append(sum(1 for r in new if r.root == CLIENT))
        # A long-poll tick reads the log's head item alone; how many a wait takes depends on timing.
        ticks.append(sum(1 for r in new if r.root == CLIENT and _head_read(r)))
        run_requests.append(sum(1 for r in new if r.root != CLIENT))
        client_calls.append(sum(1 for c in calls if c.root == CLIENT))
        run_calls.append(sum(1 for c in calls if c.root != CLIENT))
        last = Counter(f"{r.operation} {'/'.join(r.tables)}" for r in new if r.root == CLIENT)
    return {
        "client_operations": dict(sorted(last.items())),  # type: ignore[dict-item]
        "client_requests": statistics.median(client_requests),
        "client_fixed": statistics.median(c - t for c, t in zip(client_requests, ticks, strict=True)),
        "head_reads": statistics.median(ticks),
        "run_requests": statistics.median(run_requests),
        "client_invocations": statistics.median(client_calls),
        "run_invocations": statistics.median(run_calls),
    }


def run() -> Section:
    section = Section("A2A door: what it adds to a run (local counts, medians)")
    env = local()
    env.stack.invoke_api("POST", "/v1/webhooks/secret")  # push deliveries are signed
    agent_id = env.create_agent({"name": "bench-a2a", "script": SCRIPT, "a2a": {"enabled": True}})
    recorder = Recorder(env)
    sink = Sink()
    try:
        with recorder.installed():
            api = _measure(env, recorder, lambda: _via_api(env, agent_id))
            keyed = _measure(env, recorder, lambda: _via_api(env, agent_id, keyed=True))
            send = _measure(env, recorder, lambda: _via_send(env, agent_id))
            stream = _measure(env, recorder, lambda: _via_stream(env, agent_id))
            pushed = _measure(env, recorder, lambda: _via_send(env, agent_id, sink.url))
    finally:
        sink.close()

    section.add(
        "API: client-side DynamoDB requests per run", api["client_requests"], note="start + long-poll + GET"
    )
    section.add("API: client-side Lambda invocations per run", api["client_invocations"])
    section.add("API: the run's own DynamoDB requests", api["run_requests"])
    section.add(
        "API with an Idempotency-Key: client-side DynamoDB requests per run",
        keyed["client_requests"],
        note="the retry-safe start A2A always makes",
    )
    section.add("API: of which head reads (long-poll ticks)", api["head_reads"])
    section.add("API with an Idempotency-Key: requests besides the ticks", keyed["client_fixed"])
    for name, figures in (("A2A SendMessage", send), ("A2A SendStreamingMessage", stream)):
        section.add(f"{name}: client-side DynamoDB requests per run", figures["client_requests"])
        section.add(f"{name}: of which head reads (long-poll ticks)", figures["head_reads"])
        section.add(
            f"{name}: extra requests besides the ticks vs the keyed API",
            figures["client_fixed"] - keyed["client_fixed"],
            note="goal ≤ 2",
        )
        section.add(
            f"{name}: extra client-side requests vs the API",
            figures["client_requests"] - api["client_requests"],
            note="goal ≤ 2",
        )
        section.add(
            f"{name}: extra client-side requests vs the keyed API",
            figures["client_requests"] - keyed["client_requests"],
        )
        section.add(f"{name}: client-side Lambda invocations per run", figures["client_invocations"])
        section.add(
            f"{name}: extra invocations vs the API",
            figures["client_invocations"] - api["client_invocations"],
            note="one invocation waits for the whole run",
        )
        section.add(
            f"{name}: extra run-side requests", figures["run_requests"] - api["run_requests"], note="goal 0"
        )
    section.add(
        "A2A with a push config: extra run-side requests",
        pushed["run_requests"] - api["run_requests"],
        note="per pushed state change: the task read, one delivery record, the worker's claim/settle",
    )
    section.add(
        "A2A with a push config: extra run-side invocations",
        pushed["run_invocations"] - api["run_invocations"],
    )
    section.add(
        "push notifications received by the end",
        sink.count,
        note=f"{RUNS} runs × (working + completed); a last one may still be in the queue",
    )
    section.details = {
        "api": api,
        "keyed": keyed,
        "send": send,
        "stream": stream,
        "pushed": pushed,
        "runs": RUNS,
    }
    return section
