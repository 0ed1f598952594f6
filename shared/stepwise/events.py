"""Run events as clients read them: in order, with no gap and no duplicate, long-polled.

Writers reserve sequence numbers before writing, so a reader can briefly see seq N+2 before N+1 lands.
A reader therefore only hands out a contiguous prefix; a hole is skipped only once the writer that
reserved it has clearly died (the run is over, or the hole is older than HOLE_GRACE).
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel

from stepwise.models import EventType, RunEvent, utcnow
from stepwise.store import events as store
from stepwise.store import runs

TERMINAL_EVENTS = frozenset({"run_completed", "run_failed", "run_cancelled"})
PAGE = 200
POLL_INTERVAL = 0.25
MAX_WAIT = 25.0  # below API Gateway's 30 s integration timeout
HOLE_GRACE = 10.0


class EventPage(BaseModel):
    events: list[RunEvent]
    next: int
    done: bool


def emit(tenant_id: str, run_id: str, etype: EventType, data: dict[str, Any] | None = None) -> RunEvent:
    return store.append(tenant_id, run_id, [(etype, data or {})])[0]


def emit_many(tenant_id: str, run_id: str, events: list[tuple[EventType, dict[str, Any]]]) -> list[RunEvent]:
    return store.append(tenant_id, run_id, events)


def _contiguous(events: list[RunEvent], after: int, run_done: bool) -> list[RunEvent]:
    out: list[RunEvent] = []
    expected = after + 1
    for event in events:
        if event.seq != expected:
            stale = (utcnow() - event.at).total_seconds() > HOLE_GRACE
            if not (run_done or stale):
                break
        out.append(event)
        expected = event.seq + 1
    return out


def _finished(tenant_id: str, run_id: str, upto: int) -> bool:
    """The log is complete once its final event is terminal and the reader has reached it. (A run's
    status turns terminal a moment before its terminal event lands, so status alone is not enough.)"""
    final = store.last(tenant_id, run_id)
    return final is not None and final.type in TERMINAL_EVENTS and upto >= final.seq


def read(tenant_id: str, run_id: str, after: int = 0, wait: float = 0.0) -> EventPage:
    """Events with seq > after; when there are none yet, wait up to `wait` seconds for some."""
    deadline = time.monotonic() + min(max(wait, 0.0), MAX_WAIT)
    while True:
        run = runs.get(tenant_id, run_id)  # read first: events written before it count as final
        events = _contiguous(store.after(tenant_id, run_id, after, PAGE), after, run.done)
        nxt = events[-1].seq if events else after
        done = run.done and _finished(tenant_id, run_id, nxt)
        if events or done or time.monotonic() >= deadline:
            return EventPage(events=events, next=nxt, done=done)
        time.sleep(POLL_INTERVAL)
