"""Webhook triggers in the local stack: how fast the public intake answers, how soon the run starts,
and what DynamoDB work an accepted delivery costs.

DELIVERIES signed Standard Webhooks requests, one after another, through the local gateway to
TriggerIntakeFunction; the local poller (Lambda's SQS event source mapping) hands each queued delivery
to TriggerWorkerFunction, which starts the agent's run. Timed per delivery: request → 202 (the intake's
whole answer) and request → run started (when the worker's start of the target returned: the run is
recorded and its execution launched). Counted per accepted delivery, every DynamoDB request the two
functions made before the start (the goal: at most 4), the start's own, and the worker's bookkeeping
after it, with their write units (index writes included). In AWS the queue hop adds SQS's and Lambda's
polling (typically tens of milliseconds) between 202 and the start.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from datetime import UTC, datetime
from typing import Any

from bench.harness import Section, local
from bench.meter import Recorder

DELIVERIES = 20
DEADLINE = 30.0
FUNCTIONS = ("TriggerIntakeFunction", "TriggerWorkerFunction")


def _p95(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.95 * len(values)) - 1)]


def run() -> Section:
    from standardwebhooks.webhooks import Webhook

    from stepwise.api import intake_app
    from stepwise.triggers import targets, worker

    section = Section("Webhook triggers (local stack: the intake, moto SQS, the local poller, the worker)")
    env = local()
    agent_id = env.create_agent({"name": "bench-triggers", "script": [{"text": "ok"}]})
    body = {"type": "webhook", "target": {"agent_id": agent_id}, "message": "order {{id}}: {{$event}}"}
    status, _, trigger = env.stack.invoke_api("POST", "/v1/triggers", body)
    if status != 201:
        raise RuntimeError(f"could not create the trigger: {status} {trigger}")
    signer = Webhook(trigger["secret"])
    recorder = Recorder(env)
    started: dict[str, float] = {}
    before_start: dict[str, int] = {}
    arrived = threading.Event()
    original = targets.start
    handle = worker.handle
    intake_handle = intake_app.handle
    inside: list[tuple[float, float]] = []  # (wall ms, this thread's CPU ms) inside the intake's handler

    def measured(event: dict[str, Any], context: Any) -> dict[str, Any]:
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return intake_handle(event, context)
        finally:
            inside.append(((time.perf_counter() - wall) * 1000, (time.thread_time() - cpu) * 1000))

    def charged(event: dict[str, Any], context: Any) -> dict[str, Any]:
        # The local poller was handed the invoke function when the stack started, before the recorder
        # wrapped it: charge the worker's requests to it here.
        with recorder.charging("TriggerWorkerFunction"):
            return handle(event, context)

    def timed(s: targets.Start) -> str:
        delivery = str(s.metadata["delivery_id"])
        before_start[delivery] = len(_ours(recorder.requests))
        try:
            return original(s)
        finally:
            started[delivery] = time.perf_counter()
            arrived.set()

    to_202: list[float] = []
    to_start: list[float] = []
    pre: list[int] = []
    total: list[int] = []
    wru: list[float] = []
    targets.start = timed
    worker.handle = charged
    intake_app.handle = measured
    try:
        with recorder.installed():
            for n in range(DELIVERIES):
                raw = json.dumps({"id": n, "amount": 1200 + n}).encode()
                msg_id = f"msg_bench_{time.time_ns()}"
                now = datetime.now(UTC)
                headers = {
                    "webhook-id": msg_id,
                    "webhook-timestamp": str(int(now.timestamp())),
                    "webhook-signature": signer.sign(msg_id, now, raw.decode()),
                }
                mark = len(recorder.requests)
                arrived.clear()
                began = time.perf_counter()
                status, _, accepted = env.stack.invoke_api(
                    "POST", trigger["url"], key=None, raw=raw, headers=headers
                )
                answered = time.perf_counter()
                if status != 202:
                    raise RuntimeError(f"the intake answered {status}: {accepted}")
                delivery = accepted["delivery_id"]
                if not arrived.wait(DEADLINE) or delivery not in started:
                    raise TimeoutError(f"delivery {delivery} did not start within {DEADLINE}s")
                _settled(env, trigger["trigger_id"], delivery)
                to_202.append((answered - began) * 1000)
                to_start.append((started[delivery] - began) * 1000)
                mine = _ours(recorder.requests[mark:])
                pre.append(before_start[delivery] - len(_ours(recorder.requests[:mark])))
                total.append(len(mine))
                wru.append(sum(r.wru for r in mine))
    finally:
        targets.start = original
        worker.handle = handle
        intake_app.handle = intake_handle

    section.add("request → 202, median", statistics.median(to_202), "ms", note="goal < 50 ms")
    section.add("request → 202, p95", _p95(to_202), "ms")
    section.add("intake handler, wall, median", statistics.median(w for w, _ in inside), "ms")
    section.add(
        "intake handler, CPU, median",
        statistics.median(c for _, c in inside),
        "ms",
        note="this thread's CPU time: what the machine's load does not inflate",
    )
    section.add("request → run started, median", statistics.median(to_start), "ms")
    section.add("request → run started, p95", _p95(to_start), "ms")
    section.add(
        "DynamoDB requests per accepted delivery before the start",
        max(pre),
        digits=0,
        note="goal ≤ 4: GetItem trigger, TransactWrite delivery+key, GetItem delivery, GetItem trigger",
    )
    section.add(
        "DynamoDB requests per delivery, start and bookkeeping included", statistics.median(total), digits=0
    )
    section.add("write units per delivery (intake + worker + run start)", statistics.median(wru))
    section.details = {
        "deliveries": DELIVERIES,
        "to_202_ms": to_202,
        "to_start_ms": to_start,
        "before_start": pre,
    }
    return section


def _ours(requests: list[Any]) -> list[Any]:
    return [r for r in requests if r.function in FUNCTIONS]


def _settled(env: Any, trigger_id: str, delivery_id: str) -> None:
    """Wait for the worker's bookkeeping after the start, so the next delivery's counts are its own."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        _, _, body = env.stack.invoke_api("GET", f"/v1/triggers/{trigger_id}/deliveries?limit=5")
        if any(d["delivery_id"] == delivery_id and d["status"] == "started" for d in body["deliveries"]):
            return
        time.sleep(0.01)
    raise TimeoutError(f"delivery {delivery_id} was not recorded started")
