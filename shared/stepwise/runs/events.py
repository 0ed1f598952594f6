"""Run events: written to the log (and pushed to the run's live followers), read in order with no gap
and no duplicate (stepwise.runs.eventlog).

Inside a step, a run's events are held in an outbox and appended together (one reservation and one
batch write for several events) at the points where someone watching would otherwise wait: before
the model is called, before tools run, and when the step ends. Text chunks and the terminal event go
out at once. Every append costs the same two requests in a row whatever it carries, and a step used
to make four or more of them. An append can go in the background (`flush(background=True)`),
overlapping the Step's next requests; appends still go out in order, and the block's end waits for
the last.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from stepwise.core.observability import logger
from stepwise.runs.eventlog import HOLE_GRACE, MAX_WAIT, PAGE, POLL_INTERVAL, EventPage, read
from stepwise.runs.models import TERMINAL_EVENTS, EventType, RunEvent
from stepwise.runs.ports import stores

__all__ = [
    "HOLE_GRACE",
    "MAX_WAIT",
    "PAGE",
    "POLL_INTERVAL",
    "TERMINAL_EVENTS",
    "EventPage",
    "batched",
    "emit",
    "emit_many",
    "flush",
    "read",
]

LIVE = frozenset({"chunk", *TERMINAL_EVENTS})  # appended as soon as they are emitted, outbox or not


@dataclass
class _Outbox:
    tenant_id: str
    run_id: str
    pending: list[tuple[EventType, dict[str, Any]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)  # guards `pending`
    # Appends go out one after another in the order they were asked for (each reserves the next
    # seqs): `order` is held while one is asked for, `writing` is the one still in flight.
    order: threading.RLock = field(default_factory=threading.RLock)
    writing: Future[None] | None = None

    def _take(self) -> list[tuple[EventType, dict[str, Any]]]:
        with self.lock:  # tool calls of one batch run on several threads
            pending, self.pending = self.pending, []
        return pending

    def write(self) -> None:
        """Append what is pending now, after any append still in flight; raises what either raised."""
        with self.order:
            pending = self._take()
            writing, self.writing = self.writing, None
            if writing is not None:
                writing.result()
            if pending:
                emit_many(self.tenant_id, self.run_id, pending)

    def start(self) -> None:
        """Append what is pending now in the background, after any append still in flight: the Step
        goes on (its next requests overlap this one's two) and the next `write` waits for it."""
        from stepwise.core import concurrently

        with self.order:
            pending = self._take()
            if not pending:
                return
            before = self.writing

            def append() -> None:
                if before is not None:
                    before.result()  # the earlier append's seqs first; its failure is this one's too
                emit_many(self.tenant_id, self.run_id, pending)

            self.writing = concurrently.submit(append)


_outbox: ContextVar[_Outbox | None] = ContextVar("stepwise_outbox", default=None)


@contextmanager
def batched(tenant_id: str, run_id: str) -> Iterator[None]:
    """Hold the run's events emitted inside until `flush` or the end of the block. A block that
    fails still appends what it emitted (those things happened), unless the append fails too: the
    block's own error is the one that matters then."""
    box = _Outbox(tenant_id, run_id)
    token = _outbox.set(box)
    try:
        yield
    except BaseException:
        try:
            box.write()
        except Exception:  # noqa: BLE001 - whatever the append raised, the step's own error must surface
            logger.exception("events of a failed step could not be appended", extra={"run_id": run_id})
        raise
    else:
        box.write()
    finally:
        _outbox.reset(token)


def flush(*, background: bool = False) -> None:
    """Append what the current outbox holds (nothing without one). In the `background`, the append
    overlaps what the Step does next; the next `flush()` (and the end of the block) waits for it, so
    a flush that must land before something happens (tools acting) is a plain `flush()` there."""
    box = _outbox.get()
    if box is not None:
        if background:
            box.start()
        else:
            box.write()


def emit(tenant_id: str, run_id: str, etype: EventType, data: dict[str, Any] | None = None) -> None:
    box = _outbox.get()
    if box is None or (box.tenant_id, box.run_id) != (tenant_id, run_id):
        emit_many(tenant_id, run_id, [(etype, data or {})])
        return
    with box.lock:
        box.pending.append((etype, data or {}))
    if etype in LIVE:
        box.write()


def emit_many(tenant_id: str, run_id: str, events: list[tuple[EventType, dict[str, Any]]]) -> list[RunEvent]:
    appended = stores().events.append(tenant_id, run_id, events)
    if appended.followed:
        stores().followers.push(tenant_id, run_id)
    pushes = stores().pushes
    if appended.push and pushes is not None:  # an A2A task with push configs: its new state goes to them
        pushes.notify(tenant_id, run_id, appended.events, appended.push)
    return appended.events
