"""The append-only run event log and its head.

Sequence numbers come from a counter on the log's own head item (seq 0), so they are monotonic across
every Lambda that writes events for the run, and a reservation is one small write with no index
behind it. Readers poll the same head and query the log only when it moved past what they have.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from pynamodb.exceptions import DoesNotExist, UpdateError

from stepwise.core import config
from stepwise.core.errors import Conflict
from stepwise.core.schema import utcnow
from stepwise.core.tables import HEAD_SEQ, RunEventItem, RunHeadItem, bind, condition_failed, tenant_key
from stepwise.runs.models import TERMINAL_EVENTS, Appended, EventType, Head, RunEvent

# Reservations tried when a lost answer's range is lost to two later writers; each try needs its own fault.
RESERVE_TRIES = 3


def append(tenant_id: str, run_id: str, events: list[tuple[EventType, dict[str, Any]]]) -> Appended:
    if not events:
        return Appended(events=[], followed=False)
    bind()
    now = utcnow()
    expires = now + timedelta(days=config.runtime().events_ttl_days)
    key = tenant_key(tenant_id, run_id)
    head = RunHeadItem(key, HEAD_SEQ)
    # One atomic ADD hands this batch its seqs; `done` is set by the batch that ends with the terminal
    # event. The update returns the whole head, `followers` included: no read to learn whether anyone
    # follows. A log that is done takes nothing more, so it ends with exactly one terminal event: a
    # step still in flight when its run was cancelled used to append its tool_result after
    # run_cancelled and set `done` back to false, so followers waited on a run that had ended (issue
    # 30's soak); a descendant's wait mirrored into a root that has ended is dropped the same way (the
    # descendant's own log keeps it). What is said after the end is not narrated; its usage still
    # counts (stepwise.runs.late).
    # The token makes the reservation idempotent: botocore retries a request whose answer was lost (a
    # timeout), and the retry of an applied ADD reserved a second range, leaving a hole that readers
    # wait HOLE_GRACE on. The head keeps the last two tokens, each with the last_seq its range ended
    # at, and a reservation is refused while its token is either of them. So the retry fails its
    # condition, and the append finds its own range on the head even when one other writer reserved
    # after it, a terminal one included (a map's items, a cancel, a parent and its children's mirrored
    # waits append to one log at once). Those events used to be dropped.
    # Past two writers the range is unknown: the events take a fresh one, and the lost range stays a
    # hole that readers pass once it is HOLE_GRACE old, as they pass a dead writer's.
    for _ in range(RESERVE_TRIES):
        token = uuid.uuid4().hex
        try:
            head.update(
                actions=[
                    # Read before this update's own changes (DynamoDB evaluates every operand so; moto
                    # runs SET before ADD and in order, so they stay first).
                    RunHeadItem.previous_reservation.set(RunHeadItem.reservation | ""),
                    RunHeadItem.previous_last_seq.set(RunHeadItem.last_seq | 0),
                    RunHeadItem.last_seq.add(len(events)),
                    RunHeadItem.done.set(events[-1][0] in TERMINAL_EVENTS),
                    RunHeadItem.moved_at.set(now),
                    RunHeadItem.reservation.set(token),
                    RunHeadItem.expires_at.set(expires),
                ],
                condition=(RunHeadItem.done.does_not_exist() | (RunHeadItem.done == False))  # noqa: E712
                & (RunHeadItem.reservation.does_not_exist() | (RunHeadItem.reservation != token))
                & (
                    RunHeadItem.previous_reservation.does_not_exist()
                    | (RunHeadItem.previous_reservation != token)
                ),
            )
            last = int(head.last_seq)
            break
        except UpdateError as exc:
            if not condition_failed(exc):
                raise
            failed = exc
            head = RunHeadItem.get(key, HEAD_SEQ, consistent_read=True)
            if head.reservation == token:
                last = int(head.last_seq)
                break
            if head.previous_reservation == token:  # one writer reserved after ours: ours ended before
                last = int(head.previous_last_seq)
                break
            if head.done:  # `done` never goes back to false: the log had ended before this batch
                return Appended(events=[], followed=False)
            head = RunHeadItem(key, HEAD_SEQ)  # our ADD was applied and overtaken twice: reserve again
    else:
        raise failed  # overtaken on every try: the caller's retry appends them
    first = last - len(events) + 1
    written = [
        RunEvent(seq=first + i, type=etype, data=data, at=now) for i, (etype, data) in enumerate(events)
    ]
    with RunEventItem.batch_write() as batch:
        for event in written:
            batch.save(
                RunEventItem(key, event.seq, type=event.type, data=event.data, at=now, expires_at=expires)
            )
    return Appended(events=written, followed=bool(head.followers), push=head.push or None)


def followed(tenant_id: str, run_id: str) -> Head:
    """Count a new follower on the head (creating it if the run has no event yet); the head after."""
    bind()
    head = RunHeadItem(tenant_key(tenant_id, run_id), HEAD_SEQ)
    expires = utcnow() + timedelta(days=config.runtime().events_ttl_days)
    head.update(
        actions=[
            RunHeadItem.followers.add(1),
            RunHeadItem.last_seq.set(RunHeadItem.last_seq | 0),
            RunHeadItem.done.set(RunHeadItem.done | False),
            RunHeadItem.expires_at.set(expires),
        ]
    )
    return _head(head)


def push_configs(tenant_id: str, run_id: str) -> dict[str, Any]:
    """The run's A2A push notification configs, by id (none before the run's first event)."""
    bind()
    try:
        item = RunHeadItem.get(tenant_key(tenant_id, run_id), HEAD_SEQ, consistent_read=True)
    except DoesNotExist:
        return {}
    return dict(item.push or {})


PUSH_ATTEMPTS = 5


def change_push(
    tenant_id: str, run_id: str, change: Callable[[dict[str, Any]], dict[str, Any]]
) -> dict[str, Any]:
    """Read the configs, apply `change`, write them back only if nobody changed them meanwhile (the
    head's `push_rev`); the head is created for a run with no event yet, as `followed` does."""
    bind()
    key = tenant_key(tenant_id, run_id)
    for _ in range(PUSH_ATTEMPTS):
        try:
            current = RunHeadItem.get(key, HEAD_SEQ, consistent_read=True)
            configs, rev = dict(current.push or {}), current.push_rev
        except DoesNotExist:
            configs, rev = {}, None
        changed = change(configs)
        expected = RunHeadItem.push_rev.does_not_exist() if rev is None else RunHeadItem.push_rev == rev
        head = RunHeadItem(key, HEAD_SEQ)
        try:
            head.update(
                actions=[
                    RunHeadItem.push.set(changed) if changed else RunHeadItem.push.remove(),
                    RunHeadItem.push_rev.set(int(rev or 0) + 1),
                    RunHeadItem.last_seq.set(RunHeadItem.last_seq | 0),
                    RunHeadItem.done.set(RunHeadItem.done | False),
                    RunHeadItem.expires_at.set(utcnow() + timedelta(days=config.runtime().events_ttl_days)),
                ],
                condition=expected,
            )
        except UpdateError as exc:
            if condition_failed(exc):
                continue
            raise
        return changed
    raise Conflict("the push notification configs kept changing; retry", code="conflict")


def _head(item: RunHeadItem) -> Head:
    return Head(last_seq=int(item.last_seq or 0), done=bool(item.done), moved_at=item.moved_at)


def head(tenant_id: str, run_id: str) -> Head | None:
    """The log's head, None before the run's first event. Strongly consistent: a reader that saw an
    event must never be told afterwards that the log ends before it (see stepwise.runs.eventlog)."""
    bind()
    try:
        item = RunHeadItem.get(tenant_key(tenant_id, run_id), HEAD_SEQ, consistent_read=True)
    except DoesNotExist:
        return None
    return _head(item)


def after(tenant_id: str, run_id: str, seq: int, limit: int) -> list[RunEvent]:
    bind()
    items = RunEventItem.query(
        tenant_key(tenant_id, run_id),
        RunEventItem.seq > max(seq, HEAD_SEQ),
        limit=limit,
        consistent_read=True,
    )
    return [RunEvent(seq=int(i.seq), type=i.type, data=i.data, at=i.at) for i in items]
