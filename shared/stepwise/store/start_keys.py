"""Which run a keyed start made (stepwise.runs.ports.StartKeyStore), one small item per key in the
idempotency table: a conditional put claims the key for a new run id, a conditional update moves it to
another when that run could not start. Both read the item only when their condition fails, which is
also how a write botocore retried after its answer was lost finds the id it wrote itself."""

from __future__ import annotations

import hashlib
from datetime import timedelta

from pynamodb.exceptions import PutError, UpdateError

from stepwise.core.schema import utcnow
from stepwise.core.tables import StartKeyItem, bind, condition_failed, tenant_key

# As long as Powertools keeps the request's record (stepwise.runs.start.IDEMPOTENCY_HOURS).
KEPT = timedelta(hours=24)


def _id(tenant_id: str, key: str) -> str:
    return tenant_key(tenant_id, "start#" + hashlib.sha256(key.encode()).hexdigest())


def _held(item_id: str) -> str:
    return StartKeyItem.get(item_id, consistent_read=True).run_id


def claim(tenant_id: str, key: str, run_id: str) -> str:
    bind()
    item = StartKeyItem(_id(tenant_id, key), run_id=run_id, expiration=utcnow() + KEPT)
    try:
        item.save(condition=StartKeyItem.id.does_not_exist())
    except PutError as exc:
        if not condition_failed(exc):
            raise
        return _held(item.id)
    return run_id


def move(tenant_id: str, key: str, old: str, new: str) -> str:
    bind()
    item = StartKeyItem(_id(tenant_id, key))
    try:
        item.update(
            actions=[StartKeyItem.run_id.set(new), StartKeyItem.expiration.set(utcnow() + KEPT)],
            condition=StartKeyItem.run_id == old,
        )
    except UpdateError as exc:
        if not condition_failed(exc):
            raise
        return _held(item.id)
    return new
