"""A run's live followers (WebSocket connections) and the follow URLs already used.

Every item lives under the run's tenant-scoped key. A follower's item holds its cursor (`sent`, the
last seq it was sent) and a lease (epoch seconds) that lets exactly one writer send to it at a time;
see stepwise.follow for the protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from pynamodb.exceptions import PutError, UpdateError

from stepwise.core.tables import FollowerItem, bind, condition_failed, tenant_key

CONNECTION = "conn#"
TOKEN = "token#"
# API Gateway closes a WebSocket after two hours whatever happens; a follower item outlives it a little.
FOLLOWER_TTL = timedelta(hours=3)


@dataclass(frozen=True)
class Follower:
    connection_id: str
    sent: int
    connected_at: datetime | None


def use_token(tenant_id: str, run_id: str, nonce: str, expires_at: datetime) -> bool:
    """Record a follow URL's use; False when it was used before (single use is this one write)."""
    bind()
    item = FollowerItem(tenant_key(tenant_id, run_id), TOKEN + nonce, expires_at=expires_at)
    try:
        item.save(condition=FollowerItem.sk.does_not_exist())
    except PutError as exc:
        if condition_failed(exc):
            return False
        raise
    return True


def add(tenant_id: str, run_id: str, connection_id: str, sent: int, lease: float, now: datetime) -> None:
    """A new follower whose lease is already held (by the flush that sends its backlog)."""
    bind()
    FollowerItem(
        tenant_key(tenant_id, run_id),
        CONNECTION + connection_id,
        sent=sent,
        lease=lease,
        connected_at=now,
        expires_at=now + FOLLOWER_TTL,
    ).save()


def of_run(tenant_id: str, run_id: str) -> list[Follower]:
    """Strongly consistent: a writer that appended events and then finds no follower here can rely on
    any later follower's backlog including those events."""
    bind()
    items = FollowerItem.query(
        tenant_key(tenant_id, run_id), FollowerItem.sk.startswith(CONNECTION), consistent_read=True
    )
    return [
        Follower(i.sk.removeprefix(CONNECTION), int(i.sent or 0), i.connected_at)
        for i in items
        if i.sent is not None
    ]


def claim(tenant_id: str, run_id: str, connection_id: str, now: float, until: float) -> int | None:
    """Take the follower's lease until `until`; its cursor, or None when someone else holds it (or the
    follower is gone)."""
    bind()
    item = FollowerItem(tenant_key(tenant_id, run_id), CONNECTION + connection_id)
    try:
        item.update(
            actions=[FollowerItem.lease.set(until)],
            condition=FollowerItem.sent.exists() & (FollowerItem.lease < now),
        )
    except UpdateError as exc:
        if condition_failed(exc):
            return None
        raise
    return int(item.sent)


def release(tenant_id: str, run_id: str, connection_id: str, sent: int) -> None:
    """Move the cursor and free the lease. Conditional on the item existing: a disconnect may have
    removed it meanwhile, and a release must not bring it back."""
    bind()
    item = FollowerItem(tenant_key(tenant_id, run_id), CONNECTION + connection_id)
    try:
        item.update(
            actions=[FollowerItem.sent.set(sent), FollowerItem.lease.set(0)],
            condition=FollowerItem.sent.exists(),
        )
    except UpdateError as exc:
        if not condition_failed(exc):
            raise


def get(tenant_id: str, run_id: str, connection_id: str) -> Follower | None:
    bind()
    key = tenant_key(tenant_id, run_id)
    for item in FollowerItem.query(key, FollowerItem.sk == CONNECTION + connection_id, consistent_read=True):
        return Follower(connection_id, int(item.sent or 0), item.connected_at)
    return None


def remove(tenant_id: str, run_id: str, connection_id: str) -> None:
    bind()
    FollowerItem(tenant_key(tenant_id, run_id), CONNECTION + connection_id).delete()
