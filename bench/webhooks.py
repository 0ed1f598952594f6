"""Webhook deliveries in the local stack: what queueing costs the run's ending, and how long a delivery
takes to reach its receiver.

RUNS runs with a webhook on a loopback receiver. For each: the time `enqueue` took inside the ending
(one conditional PutItem and one SendMessage, against moto), and the latency from the delivery's record
(the moment the ending queued it) and from the run's finished_at to the receiver's arrival, through
moto's SQS, the local poller (Lambda's event source mapping) and WebhookFunction. In AWS the same path
adds SQS's and Lambda's own polling (typically tens of milliseconds) and the network to the receiver.
"""

from __future__ import annotations

import statistics
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bench.harness import Section, local

RUNS = 20
DEADLINE = 30.0


class Receiver:
    """Answers 204 to every POST and notes each one's webhook-id and wall-clock arrival."""

    def __init__(self) -> None:
        self.arrivals: dict[str, float] = {}
        lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                arrived = time.time()
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with lock:
                    owner.arrivals.setdefault(self.headers["webhook-id"], arrived)
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        threading.Thread(target=self.server.serve_forever, daemon=True, name="bench-webhooks").start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _p95(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.95 * len(values)) - 1)]


def run() -> Section:
    from stepwise.runs import ending

    section = Section("Webhook deliveries (local stack: moto SQS, the local poller, WebhookFunction)")
    env = local()
    receiver = Receiver()
    enqueue_ms: list[float] = []
    original = ending.enqueue

    def timed(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            enqueue_ms.append((time.perf_counter() - began) * 1000)

    ending.enqueue = timed  # type: ignore[assignment]
    try:
        env.stack.invoke_api("POST", "/v1/webhooks/secret")
        agent_id = env.create_agent({"name": "bench-webhooks", "webhook": {"url": receiver.url}})
        from_queued: list[float] = []
        from_finished: list[float] = []
        attempts: list[int] = []
        for _ in range(RUNS):
            run_id = env.start([{"text": "done"}], 1, agent_id=agent_id)
            view = env.wait_run(run_id)
            delivery = _delivered(env, run_id)
            arrived = receiver.arrivals[delivery["webhook_id"]]
            from_queued.append((arrived - datetime.fromisoformat(delivery["created_at"]).timestamp()) * 1000)
            from_finished.append((arrived - datetime.fromisoformat(view["finished_at"]).timestamp()) * 1000)
            attempts.append(int(delivery["attempts"]))
    finally:
        ending.enqueue = original  # type: ignore[assignment]
        receiver.close()

    section.add("enqueue in the run's ending, median", statistics.median(enqueue_ms), "ms")
    section.add("queued → receiver, median", statistics.median(from_queued), "ms")
    section.add("queued → receiver, p95", _p95(from_queued), "ms")
    section.add("run finished → receiver, median", statistics.median(from_finished), "ms")
    section.add("attempts per delivery", max(attempts), note="a receiver answering 204 at once")
    section.details = {"runs": RUNS, "queued_ms": from_queued, "enqueue_ms": enqueue_ms}
    return section


def _delivered(env: Any, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE
    while True:
        _, _, body = env.stack.invoke_api("GET", f"/v1/runs/{run_id}/webhooks")
        done = [d for d in body["deliveries"] if d["status"] == "delivered"]
        if done:
            return dict(done[0])
        if time.monotonic() > deadline:
            raise TimeoutError(f"no delivery of {run_id} within {DEADLINE}s: {body}")
        time.sleep(0.01)
