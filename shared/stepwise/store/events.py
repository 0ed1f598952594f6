"""The append-only run event log. Sequence numbers come from a counter on the run item, so they are
monotonic across every Lambda that writes events for the run."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from stepwise import config
from stepwise.models import EventType, RunEvent, utcnow
from stepwise.store import runs
from stepwise.store.tables import RunEventItem, bind, tenant_key


def append(tenant_id: str, run_id: str, events: list[tuple[EventType, dict[str, Any]]]) -> list[RunEvent]:
    if not events:
        return []
    bind()
    first = runs.reserve_seqs(tenant_id, run_id, len(events))
    now = utcnow()
    expires = now + timedelta(days=config.runtime().events_ttl_days)
    written = [
        RunEvent(seq=first + i, type=etype, data=data, at=now) for i, (etype, data) in enumerate(events)
    ]
    key = tenant_key(tenant_id, run_id)
    with RunEventItem.batch_write() as batch:
        for event in written:
            batch.save(
                RunEventItem(key, event.seq, type=event.type, data=event.data, at=now, expires_at=expires)
            )
    return written


def after(tenant_id: str, run_id: str, seq: int, limit: int) -> list[RunEvent]:
    bind()
    items = RunEventItem.query(
        tenant_key(tenant_id, run_id),
        RunEventItem.seq > seq,
        limit=limit,
        consistent_read=True,
    )
    return [RunEvent(seq=int(i.seq), type=i.type, data=i.data, at=i.at) for i in items]


def last(tenant_id: str, run_id: str) -> RunEvent | None:
    bind()
    for i in RunEventItem.query(
        tenant_key(tenant_id, run_id),
        RunEventItem.seq > 0,  # seq 0 is the run's context (stepwise.store.run_context)
        scan_index_forward=False,
        limit=1,
        consistent_read=True,
    ):
        return RunEvent(seq=int(i.seq), type=i.type, data=i.data, at=i.at)
    return None
