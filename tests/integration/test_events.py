"""The event log as clients read it: long-poll and Server-Sent Events, resumable, no gap, no duplicate."""

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from stepwise.core import ids
from stepwise.runs import events
from stepwise_local.stack import DEFAULT_TENANT, LocalStack
from tests.eventually import eventually
from tests.integration.support import answer_lost_once, tool, wait_for_run


def finished_run(stack: LocalStack) -> dict[str, Any]:
    _, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "events"})
    _, _, accepted = stack.invoke_api("POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "x"})
    run = wait_for_run(stack, accepted["run_id"])
    # the terminal event lands just after the status: wait for the log to say done
    after = 0

    def done() -> bool:
        nonlocal after
        page = stack.invoke_api("GET", f"/v1/runs/{run['run_id']}/events?after={after}&wait=5")[2]
        after = page["next"]
        return bool(page["done"])

    eventually(done, timeout=30, what="the log to say done")
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
    after = 0

    def done() -> bool:
        nonlocal after
        status, _, page = stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after={after}&wait=10")
        assert status == 200
        seqs.extend(e["seq"] for e in page["events"])
        after = page["next"]
        return bool(page["done"])

    eventually(done, timeout=60, what="the log to say done")

    assert seqs == list(range(1, len(seqs) + 1))  # contiguous, in order, each once
    _, _, page = stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after={after}&wait=1")
    assert page == {"events": [], "next": after, "done": True, "wait": 1.0}  # the wait it used, echoed


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


# --- The step's outbox ----------------------------------------------------------------------------


def _appends(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    from stepwise.store import events as log

    batches: list[list[str]] = []
    real = log.append

    def append(tenant_id: str, run_id: str, events: list[tuple[Any, dict[str, Any]]]) -> Any:
        batches.append([etype for etype, _ in events])
        return real(tenant_id, run_id, events)

    monkeypatch.setattr(log, "append", append)
    return batches


def test_a_steps_events_are_appended_together_at_its_flush_points_and_in_order(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    batches = _appends(monkeypatch)
    run_id = ids.new_id("run")
    with events.batched(DEFAULT_TENANT, run_id):
        events.emit(DEFAULT_TENANT, run_id, "step_started", {"step": 1})
        events.emit(DEFAULT_TENANT, run_id, "tool_call", {"tool_call_id": "c1"})
        assert batches == []  # held
        events.flush()
        events.emit(DEFAULT_TENANT, "run_other", "tool_call", {})  # another run's: not held
        events.emit(DEFAULT_TENANT, run_id, "tool_result", {"tool_call_id": "c1"})
        events.emit(DEFAULT_TENANT, run_id, "chunk", {"text": "hi"})  # text goes out at once
        events.emit(DEFAULT_TENANT, run_id, "step_completed", {"step": 1})
    assert batches == [
        ["step_started", "tool_call"],
        ["tool_call"],
        ["tool_result", "chunk"],
        ["step_completed"],
    ]
    page = events.read(DEFAULT_TENANT, run_id, after=0)
    assert [(e.seq, e.type) for e in page.events] == [
        (1, "step_started"),
        (2, "tool_call"),
        (3, "tool_result"),
        (4, "chunk"),
        (5, "step_completed"),
    ]


def test_a_failed_step_still_appends_what_it_emitted(stack: LocalStack) -> None:
    run_id = ids.new_id("run")
    with pytest.raises(RuntimeError), events.batched(DEFAULT_TENANT, run_id):
        events.emit(DEFAULT_TENANT, run_id, "tool_call", {"tool_call_id": "c1"})
        raise RuntimeError("the step crashed")
    assert [e.type for e in events.read(DEFAULT_TENANT, run_id, after=0).events] == ["tool_call"]


def test_a_run_appends_its_events_at_the_flush_points_of_its_steps(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the model, before tools run (none here: an unknown tool is answered at the gate), when
    the step ends; text at once; and the log is whole before the run's status says it ended."""
    batches = _appends(monkeypatch)
    script = [{"tool_calls": [{"name": "missing", "arguments": {}}]}, {"text": "done"}]
    # The agent has a tool (else the model gets none to call); the script calls one it lacks.
    body = {"name": "outbox", "tools": [tool("other", "http://127.0.0.1:9/other")]}
    _, _, agent = stack.invoke_api("POST", "/v1/agents", body)
    _, _, accepted = stack.invoke_api(
        "POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "x", "script": script}
    )
    wait_for_run(stack, accepted["run_id"])
    eventually(  # the terminal event lands just after the status
        lambda: any("run_completed" in b for b in batches), timeout=10, what="the terminal event"
    )
    assert batches[:3] == [
        ["run_started", "step_started"],
        ["step_completed", "tool_call", "tool_result"],
        ["step_started"],
    ]
    assert batches[3:] == [["chunk"], ["step_completed"], ["run_completed"]]


def test_a_reservation_retried_after_its_answer_was_lost_takes_no_second_range(stack: LocalStack) -> None:
    """Issue 30's soak: botocore retries an UpdateItem whose answer timed out; the retried ADD on the
    head reserved a second range of seqs, so the log had a hole readers waited HOLE_GRACE on."""
    from stepwise.store import events as log

    tenant, run_id = DEFAULT_TENANT, ids.new_id("run")
    log.append(tenant, run_id, [("run_started", {})])
    with answer_lost_once("UpdateItem", "RunEventsTable") as lost:
        second = log.append(tenant, run_id, [("step_started", {}), ("run_completed", {})])

    assert lost, "the fault was not injected"
    assert [e.seq for e in second.events] == [2, 3]
    head = log.head(tenant, run_id)
    assert head is not None and (head.last_seq, head.done) == (3, True)
    assert [e.seq for e in log.after(tenant, run_id, 0, 10)] == [1, 2, 3]


def _append_with_lost_answer(
    tenant: str,
    run_id: str,
    batch: list[tuple[Any, dict[str, Any]]],
    *,
    before_retry: Sequence[tuple[Any, dict[str, Any]]] = (),
    after_retry: Sequence[tuple[Any, dict[str, Any]]] = (),
    reservations: int = 1,
) -> list[tuple[int, dict[str, Any]]]:
    """Append `batch` to the run's log while its reservation is applied and its answer lost (the
    first `reservations` of them: the append's own fresh tries count too). Other writers append one
    event each of `before_retry` between the applied try and botocore's retry, and of `after_retry`
    between the retry (which fails its condition) and the append's read of the head. Returns the
    (seq, data) the append was told."""
    from botocore.exceptions import ReadTimeoutError
    from moto.core.botocore_stubber import BotocoreStubber

    from stepwise.store import events as log

    original = BotocoreStubber.__call__
    tries: list[str] = []
    others: list[str] = []  # set while the other writers append: their requests pass untouched

    def call(stubber: Any, event_name: str, request: Any, **kwargs: Any) -> Any:
        ours = ".UpdateItem" in str(request.headers.get("X-Amz-Target", "")) and run_id.encode() in (
            request.body or b""
        )
        if not ours or others or len(tries) >= 2 * reservations:
            return original(stubber, event_name, request, **kwargs)
        tries.append(str(request.url))
        response = original(stubber, event_name, request, **kwargs)
        others.append("appending")
        try:
            for event in before_retry if len(tries) % 2 else after_retry:
                log.append(tenant, run_id, [event])
        finally:
            others.clear()
        if len(tries) % 2:
            raise ReadTimeoutError(endpoint_url=str(request.url))  # applied, the answer lost
        return response

    BotocoreStubber.__call__ = call  # type: ignore[method-assign]
    try:
        appended = log.append(tenant, run_id, batch)
    finally:
        BotocoreStubber.__call__ = original  # type: ignore[method-assign]
    assert len(tries) == 2 * reservations, "the fault was not injected"
    return [(e.seq, e.data) for e in appended.events]


def _whole_log(tenant: str, run_id: str) -> list[tuple[int, str, dict[str, Any]]]:
    from stepwise.runs import eventlog

    page = eventlog.read(tenant, run_id, known=True)
    assert page.done
    return [(e.seq, e.type, e.data) for e in page.events]


def test_a_reservation_overtaken_after_its_answer_was_lost_finds_its_range(stack: LocalStack) -> None:
    """The retry of an applied reservation fails its condition (the head holds its token); then another
    writer reserves before the append reads the head (a map's items append at once). The head's
    previous token and last_seq still give its range: the events used to be dropped."""
    from stepwise.store import events as log

    tenant, run_id = DEFAULT_TENANT, ids.new_id("run")
    log.append(tenant, run_id, [("run_started", {})])
    mine = _append_with_lost_answer(
        tenant, run_id, [("node_completed", {"index": 3})], after_retry=[("node_completed", {"index": 4})]
    )
    log.append(tenant, run_id, [("run_completed", {})])

    assert mine == [(2, {"index": 3})]
    assert _whole_log(tenant, run_id) == [
        (1, "run_started", {}),
        (2, "node_completed", {"index": 3}),
        (3, "node_completed", {"index": 4}),
        (4, "run_completed", {}),
    ]


def test_a_reservation_whose_answer_was_lost_behind_a_cancel_keeps_its_events(stack: LocalStack) -> None:
    """Issue 30's soak: a step's reservation was applied and its answer lost, and the run's cancel
    appended `run_cancelled` before botocore's retry. The retry fails on the ended log, the head's
    previous token is the step's own: its events are written in the range it took, before the end,
    where they were dropped and left a hole."""
    from stepwise.store import events as log

    tenant, run_id = DEFAULT_TENANT, ids.new_id("run")
    log.append(tenant, run_id, [("run_started", {})])
    mine = _append_with_lost_answer(
        tenant,
        run_id,
        [("tool_result", {"n": 1}), ("step_completed", {})],
        before_retry=[("run_cancelled", {})],
    )

    assert mine == [(2, {"n": 1}), (3, {})]
    assert [(seq, etype) for seq, etype, _ in _whole_log(tenant, run_id)] == [
        (1, "run_started"),
        (2, "tool_result"),
        (3, "step_completed"),
        (4, "run_cancelled"),
    ]


def test_a_reservation_overtaken_twice_takes_a_fresh_range(stack: LocalStack) -> None:
    """Two writers after it, and the head no longer holds the token: the range is unknown, so the
    events take a fresh one, and the lost range is a hole readers pass once the log is done."""
    from stepwise.store import events as log

    tenant, run_id = DEFAULT_TENANT, ids.new_id("run")
    log.append(tenant, run_id, [("run_started", {})])
    mine = _append_with_lost_answer(
        tenant,
        run_id,
        [("node_completed", {"index": 3})],
        after_retry=[("node_completed", {"index": 4}), ("node_completed", {"index": 5})],
    )
    log.append(tenant, run_id, [("run_completed", {})])

    assert mine == [(5, {"index": 3})]  # seq 2 went to the try whose answer was lost
    assert _whole_log(tenant, run_id) == [
        (1, "run_started", {}),
        (3, "node_completed", {"index": 4}),
        (4, "node_completed", {"index": 5}),
        (5, "node_completed", {"index": 3}),
        (6, "run_completed", {}),
    ]


def test_a_batch_overtaken_on_every_try_raises_for_its_callers_retry(stack: LocalStack) -> None:
    """Three reservations in a row applied, their answers lost and each overtaken twice: the append
    stops trying and raises, so the step's own retry appends the events; nothing is written under
    a range it does not know."""
    from pynamodb.exceptions import UpdateError

    from stepwise.store import events as log

    tenant, run_id = DEFAULT_TENANT, ids.new_id("run")
    log.append(tenant, run_id, [("run_started", {})])
    others = [("node_completed", {"index": 4}), ("node_completed", {"index": 5})]
    with pytest.raises(UpdateError):
        _append_with_lost_answer(
            tenant, run_id, [("node_completed", {"index": 3})], after_retry=others, reservations=3
        )
    log.append(tenant, run_id, [("run_completed", {})])

    # seqs 2, 5 and 8 went to the three tries whose answers were lost
    assert [(seq, etype) for seq, etype, _ in _whole_log(tenant, run_id)] == [
        (1, "run_started"),
        (3, "node_completed"),
        (4, "node_completed"),
        (6, "node_completed"),
        (7, "node_completed"),
        (9, "node_completed"),
        (10, "node_completed"),
        (11, "run_completed"),
    ]
    assert all(data != {"index": 3} for _, _, data in _whole_log(tenant, run_id))


def test_reservations_made_at_once_on_one_log_get_distinct_seqs(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local stack answers each DynamoDB request under its lock: moto turned the stored item into
    an update's ALL_NEW answer after its write, outside the lock, so a reservation could be told a later
    writer's last_seq; two batches then shared seqs and one overwrote the other (a workflow map's items
    lost a `node_completed` about one full test run in ten). Serializing an item is made slow here, so
    that another writer gets in wherever it can."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from moto.dynamodb.models.dynamo_type import Item

    from stepwise.store import events as log

    to_json = Item.to_json

    def slow_to_json(self: Any) -> dict[str, Any]:
        time.sleep(0.002)
        return to_json(self)

    monkeypatch.setattr(Item, "to_json", slow_to_json)
    tenant, run_id = DEFAULT_TENANT, ids.new_id("run")
    threads, each = 4, 5

    def append_many(thread: int) -> list[int]:
        return [
            log.append(tenant, run_id, [("chunk", {"t": thread, "i": i})]).events[0].seq for i in range(each)
        ]

    with ThreadPoolExecutor(threads) as pool:
        told = [seq for seqs in pool.map(append_many, range(threads)) for seq in seqs]

    assert sorted(told) == list(range(1, threads * each + 1))
    stored = log.after(tenant, run_id, 0, threads * each + 1)
    assert sorted((e.data["t"], e.data["i"]) for e in stored) == [
        (t, i) for t in range(threads) for i in range(each)
    ]
