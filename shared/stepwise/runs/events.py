"""Run events: written to the log (and pushed to the run's live followers), read in order with no gap
and no duplicate (stepwise.runs.eventlog)."""

from __future__ import annotations

from typing import Any

from stepwise.follow import delivery
from stepwise.runs.eventlog import HOLE_GRACE, MAX_WAIT, PAGE, POLL_INTERVAL, TERMINAL_EVENTS, EventPage, read
from stepwise.runs.models import EventType, RunEvent
from stepwise.store import events as store

__all__ = [
    "HOLE_GRACE",
    "MAX_WAIT",
    "PAGE",
    "POLL_INTERVAL",
    "TERMINAL_EVENTS",
    "EventPage",
    "emit",
    "emit_many",
    "read",
]


def emit(tenant_id: str, run_id: str, etype: EventType, data: dict[str, Any] | None = None) -> RunEvent:
    return emit_many(tenant_id, run_id, [(etype, data or {})])[0]


def emit_many(tenant_id: str, run_id: str, events: list[tuple[EventType, dict[str, Any]]]) -> list[RunEvent]:
    written = store.append(tenant_id, run_id, events)
    if written:
        delivery.push(tenant_id, run_id)
    return written
