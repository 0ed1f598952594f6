"""The event log as clients read it: long-poll and Server-Sent Events, resumable, no gap, no duplicate."""

import threading
import time
from typing import Any

from stepwise.local.stack import LocalStack
from tests.integration.support import wait_for_run


def finished_run(stack: LocalStack) -> dict[str, Any]:
    _, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "events"})
    _, _, accepted = stack.invoke_api("POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "x"})
    run = wait_for_run(stack, accepted["run_id"])
    # the terminal event lands just after the status: wait for the log to say done
    stack.invoke_api("GET", f"/v1/runs/{run['run_id']}/events?after=0&wait=5")
    return run


def parse_sse(text: str) -> list[dict[str, str]]:
    events = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "id" in fields:
            events.append(fields)
    return events


def test_long_poll_waits_for_events_and_pages_by_seq(stack: LocalStack) -> None:
    _, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "poller"})
    _, _, accepted = stack.invoke_api("POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "x"})
    run_id = accepted["run_id"]

    seqs: list[int] = []
    after, done = 0, False
    deadline = time.monotonic() + 60
    while not done:
        assert time.monotonic() < deadline
        status, _, page = stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after={after}&wait=10")
        assert status == 200
        seqs += [e["seq"] for e in page["events"]]
        after, done = page["next"], page["done"]

    assert seqs == list(range(1, len(seqs) + 1))  # contiguous, in order, each once
    status, _, page = stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after={after}&wait=1")
    assert page == {"events": [], "next": after, "done": True}


def test_a_long_poll_returns_when_the_first_event_arrives(stack: LocalStack) -> None:
    _, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "waiter"})
    result: dict[str, Any] = {}
    _, _, accepted = stack.invoke_api("POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "x"})

    def poll() -> None:
        started = time.monotonic()
        result["page"] = stack.invoke_api("GET", f"/v1/runs/{accepted['run_id']}/events?after=0&wait=20")[2]
        result["took"] = time.monotonic() - started

    thread = threading.Thread(target=poll)
    thread.start()
    thread.join(30)
    assert result["page"]["events"], result
    assert result["page"]["events"][0]["type"] == "run_started"


def test_sse_carries_seq_as_id_and_resumes_from_last_event_id(stack: LocalStack) -> None:
    run = finished_run(stack)
    path = f"/v1/runs/{run['run_id']}/stream"

    status, headers, body = stack.invoke_api("GET", path)
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = parse_sse(body)
    assert [int(e["id"]) for e in events] == list(range(1, len(events) + 1))
    assert events[0]["event"] == "run_started" and events[-1]["event"] == "run_completed"

    _, _, resumed = stack.invoke_api("GET", path, headers={"Last-Event-ID": "2"})
    assert [int(e["id"]) for e in parse_sse(resumed)] == list(range(3, len(events) + 1))

    status, _, _ = stack.invoke_api("GET", path, headers={"Last-Event-ID": str(len(events))})
    assert status == 204  # finished and fully read: EventSource stops reconnecting

    status, _, body = stack.invoke_api("GET", path, headers={"Last-Event-ID": "not-a-number"})
    assert status == 400 and body["error"]["code"] == "invalid_last_event_id"
