"""Run events as clients read them: in order, with no gap and no duplicate, long-polled.

Writers reserve sequence numbers on the log's head before writing, so a reader can briefly see seq N+2
before N+1 lands. A reader therefore only hands out a contiguous prefix; a hole is skipped only once
the writer that reserved it has clearly died (the log is done, or the hole is older than HOLE_GRACE).

A poll reads the head item alone (a few dozen bytes) and queries the log only when the head is past
what the reader has. The head is read strongly consistent: an eventually consistent read can return
a head older than events the reader already holds, and `done` taken from such a head could end a
stream before an event appended after the terminal one (a descendant's, say). A strong read of an item
this small costs one read unit instead of half of one: not worth the reasoning.
"""

from __future__ import annotations

import time

from pydantic import BaseModel, Field

from stepwise.core.schema import utcnow
from stepwise.runs.models import Head, RunEvent
from stepwise.runs.ports import stores

PAGE = 200
POLL_INTERVAL = 0.25
MAX_WAIT = 25.0  # below API Gateway's 30 s integration timeout
HOLE_GRACE = 10.0


class EventPage(BaseModel):
    events: list[RunEvent]
    next: int
    done: bool
    wait: float = Field(
        default=0.0, description="The seconds this read could wait: the `wait` asked for, capped at 25"
    )


def capped_wait(wait: float) -> float:
    """The wait a read uses: a larger one is clamped to MAX_WAIT (API Gateway would cut it off)."""
    return min(max(wait, 0.0), MAX_WAIT)


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


def page(tenant_id: str, run_id: str, after: int, head: Head) -> EventPage:
    """What the log holds after `after`, read against `head`."""
    events: list[RunEvent] = []
    if head.last_seq > after:
        events = _contiguous(stores().events.after(tenant_id, run_id, after, PAGE), after, head.done)
    nxt = events[-1].seq if events else after
    if nxt < head.last_seq and len(events) < PAGE and _abandoned(head):
        # Reserved long ago and never written, with nothing after them: their writer died.
        nxt = head.last_seq
    return EventPage(events=events, next=nxt, done=head.done and nxt >= head.last_seq)


def _abandoned(head: Head) -> bool:
    return head.moved_at is not None and (utcnow() - head.moved_at).total_seconds() > HOLE_GRACE


def read(tenant_id: str, run_id: str, after: int = 0, wait: float = 0.0, *, known: bool = False) -> EventPage:
    """Events with seq > after; when there are none yet, wait up to `wait` seconds for some. `known`:
    the caller has read this tenant's run already, so a log with no event yet needs no proof of it."""
    deadline = time.monotonic() + capped_wait(wait)
    while True:
        head = stores().events.head(tenant_id, run_id)
        if head is None:
            # No event yet. The head's key carries the tenant, so once it exists it proves the run is
            # this tenant's; until then the run item answers (404 for another tenant's id).
            if not known:
                stores().runs.get(tenant_id, run_id)
                known = True
            found = EventPage(events=[], next=after, done=False)
        else:
            found = page(tenant_id, run_id, after, head)
        if found.events or found.done or time.monotonic() >= deadline:
            return found
        time.sleep(POLL_INTERVAL)
