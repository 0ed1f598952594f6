"""TriggersTable: one partition per trigger (pk = the trigger id) holding the trigger ("trigger"), its
deliveries ("dlv#<delivery id>", ULIDs, so a reverse query is newest first) and its dedupe markers
("key#<sha256>"). The intake knows only the trigger id, so that is the key; the tenant is the trigger's
`tenant_id`, checked on every authenticated read (another tenant's trigger is a 404 like a missing one)
and indexed sparsely for a tenant's list."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Any

from pynamodb.exceptions import DeleteError, DoesNotExist, PutError, TransactWriteError, UpdateError
from pynamodb.transactions import TransactWrite

from stepwise.core import config
from stepwise.core.errors import NotFound
from stepwise.core.schema import utcnow
from stepwise.core.tables import (
    TriggerAddressItem,
    TriggerDeliveryItem,
    TriggerItem,
    TriggerKeyItem,
    bind,
    condition_failed,
    connection,
)
from stepwise.triggers.models import Trigger, TriggerDelivery, TriggerRefusals

SK = "trigger"
PAGE = 50


def not_found(trigger_id: str) -> NotFound:
    return NotFound(f"no trigger {trigger_id}", code="trigger_not_found")


def to_model(item: TriggerItem) -> Trigger:
    trigger = Trigger.model_validate(item.doc)
    trigger.refused = TriggerRefusals(
        bad_signature=int(item.refused_signature or 0),
        stale=int(item.refused_stale or 0),
        too_large=int(item.refused_too_large or 0),
    )
    return shown(trigger)


def shown(trigger: Trigger) -> Trigger:
    """The trigger as the API shows it: a webhook trigger with its public intake path."""
    if trigger.type == "webhook":
        trigger.url = f"/v1/triggers/{trigger.trigger_id}/in"
    return trigger


def create(tenant_id: str, trigger: Trigger, secret: list[bytes] | None) -> None:
    bind()
    item = TriggerItem(trigger.trigger_id, SK, tenant_id=tenant_id, doc=trigger.stored(), secret=secret)
    item.save(condition=TriggerItem.pk.does_not_exist())


def find(trigger_id: str) -> TriggerItem | None:
    """The trigger's item whoever owns it (the public intake), or None."""
    bind()
    try:
        return TriggerItem.get(trigger_id, SK, consistent_read=True)
    except DoesNotExist:
        return None


def get_item(tenant_id: str, trigger_id: str) -> TriggerItem:
    item = find(trigger_id)
    if item is None or item.tenant_id != tenant_id:
        raise not_found(trigger_id)
    return item


def get(tenant_id: str, trigger_id: str) -> Trigger:
    return to_model(get_item(tenant_id, trigger_id))


def list_for(tenant_id: str) -> list[Trigger]:
    """The tenant's triggers, oldest first (trigger ids sort by creation time)."""
    bind()
    return [to_model(item) for item in TriggerItem.by_tenant.query(tenant_id) if item.tenant_id == tenant_id]


def save(tenant_id: str, trigger: Trigger) -> None:
    """Replace the trigger's document; only while it is still this tenant's."""
    bind()
    actions: list[Any] = [TriggerItem.doc.set(trigger.stored())]
    if trigger.watch_expires_at is not None:
        actions.append(TriggerItem.watch_expires_at.set(trigger.watch_expires_at))
    try:
        TriggerItem(trigger.trigger_id, SK).update(
            actions=actions, condition=TriggerItem.tenant_id == tenant_id
        )
    except UpdateError as exc:
        if condition_failed(exc):
            raise not_found(trigger.trigger_id) from exc
        raise


def rotate(tenant_id: str, trigger: Trigger, secret: list[bytes], previous: list[bytes] | None) -> None:
    bind()
    actions: list[Any] = [
        TriggerItem.doc.set(trigger.stored()),
        TriggerItem.secret.set(secret),  # type: ignore[arg-type]
        TriggerItem.previous_until.set(trigger.previous_secret_valid_until)
        if trigger.previous_secret_valid_until
        else TriggerItem.previous_until.remove(),
        TriggerItem.previous_secret.set(previous)  # type: ignore[arg-type]
        if previous
        else TriggerItem.previous_secret.remove(),
    ]
    try:
        TriggerItem(trigger.trigger_id, SK).update(
            actions=actions, condition=TriggerItem.tenant_id == tenant_id
        )
    except UpdateError as exc:
        if condition_failed(exc):
            raise not_found(trigger.trigger_id) from exc
        raise


def delete(tenant_id: str, trigger_id: str) -> None:
    """Remove the trigger; its deliveries and markers expire with their TTL (nothing can reach them: the
    intake and the lists start from the trigger item)."""
    bind()
    try:
        TriggerItem(trigger_id, SK).delete(condition=TriggerItem.tenant_id == tenant_id)
    except DeleteError as exc:
        if condition_failed(exc):
            raise not_found(trigger_id) from exc
        raise


def start_cursor(trigger_id: str, cursor: str) -> None:
    """The mailbox position reading starts from, unless reading has started already."""
    bind()
    try:
        TriggerItem(trigger_id, SK).update(
            actions=[TriggerItem.cursor.set(cursor)],
            condition=TriggerItem.pk.exists() & TriggerItem.cursor.does_not_exist(),
        )
    except UpdateError as exc:
        if not condition_failed(exc):
            raise


def advance_cursor(trigger_id: str, cursor: str) -> None:
    """Where the next read starts. Two readers racing may leave the older position: the next read then
    overlaps, and the messages' dedupe markers keep that from starting anything twice."""
    bind()
    try:
        TriggerItem(trigger_id, SK).update(
            actions=[TriggerItem.cursor.set(cursor)], condition=TriggerItem.pk.exists()
        )
    except UpdateError as exc:
        if not condition_failed(exc):
            raise


def watched_before(moment: datetime) -> list[TriggerItem]:
    """Mailbox triggers whose watch ends before `moment` (a Scan: the daily renewal sweep only)."""
    bind()
    return list(TriggerItem.scan(filter_condition=TriggerItem.watch_expires_at < moment))


# --- Inbound addresses (email triggers) --------------------------------------------------------------

ADDRESS_SK = "address"


def claim_address(tenant_id: str, trigger_id: str, address: str) -> bool:
    """Make `address` the trigger's; False when another trigger has it."""
    bind()
    item = TriggerAddressItem(f"addr#{address}", ADDRESS_SK, trigger_id=trigger_id, owner=tenant_id)
    try:
        item.save(condition=TriggerAddressItem.pk.does_not_exist())
    except PutError as exc:
        if condition_failed(exc):
            return False
        raise
    return True


def release_address(trigger_id: str, address: str) -> None:
    """Free `address`, only while it is still this trigger's."""
    bind()
    try:
        TriggerAddressItem(f"addr#{address}", ADDRESS_SK).delete(
            condition=TriggerAddressItem.trigger_id == trigger_id
        )
    except DeleteError as exc:
        if not condition_failed(exc):
            raise


def address_owner(address: str) -> tuple[str, str] | None:
    """(tenant id, trigger id) of the trigger that claimed `address`, or None."""
    bind()
    try:
        item = TriggerAddressItem.get(f"addr#{address}", ADDRESS_SK)
    except DoesNotExist:
        return None
    return str(item.owner), str(item.trigger_id)


def count_refusal(trigger_id: str, reason: str) -> None:
    """One more refused request of `reason` on the trigger (ADD: no read; nothing if it is gone)."""
    bind()
    counter = {
        "bad_signature": TriggerItem.refused_signature,
        "stale": TriggerItem.refused_stale,
        "too_large": TriggerItem.refused_too_large,
    }[reason]
    try:
        TriggerItem(trigger_id, SK).update(actions=[counter.add(1)], condition=TriggerItem.pk.exists())
    except UpdateError as exc:
        if not condition_failed(exc):
            raise


# --- Deliveries -----------------------------------------------------------------------------------


def _expires(now: datetime) -> datetime:
    return now + timedelta(days=config.trigger_queue().deliveries_ttl_days)


def key_hash(dedupe_key: str) -> str:
    return hashlib.sha256(dedupe_key.encode()).hexdigest()


def delivery_item(
    trigger_id: str,
    delivery_id: str,
    status: str,
    now: datetime,
    *,
    dedupe_key: str | None = None,
    payload: bytes | None = None,
    reason: str | None = None,
    duplicate_of: str | None = None,
) -> TriggerDeliveryItem:
    return TriggerDeliveryItem(
        trigger_id,
        f"dlv#{delivery_id}",
        delivery_id=delivery_id,
        status=status,
        received_at=now,
        dedupe_key=dedupe_key,
        payload=payload,
        reason=reason,
        duplicate_of=duplicate_of,
        attempts=0,
        expires_at=_expires(now),
    )


def record(item: TriggerDeliveryItem, dedupe_key: str) -> bool:
    """Write the delivery and its dedupe marker together (one transaction); False, writing nothing, when
    the marker exists already: a repeat."""
    bind()
    marker = TriggerKeyItem(
        item.pk, f"key#{key_hash(dedupe_key)}", delivery_id=item.delivery_id, expires_at=item.expires_at
    )
    try:
        with TransactWrite(connection=connection()) as tx:
            tx.save(marker, condition=TriggerKeyItem.sk.does_not_exist())
            tx.save(item)
    except TransactWriteError as exc:
        reasons = exc.cancellation_reasons or []
        if reasons and reasons[0] is not None and reasons[0].code == "ConditionalCheckFailed":
            return False
        raise
    return True


def original(trigger_id: str, dedupe_key: str) -> str | None:
    """The delivery that first carried `dedupe_key`."""
    bind()
    try:
        return str(
            TriggerKeyItem.get(trigger_id, f"key#{key_hash(dedupe_key)}", consistent_read=True).delivery_id
        )
    except DoesNotExist:
        return None


def put(item: TriggerDeliveryItem) -> None:
    """A delivery that starts nothing (refused, or a repeat), listed for the record."""
    bind()
    try:
        item.save(condition=TriggerDeliveryItem.sk.does_not_exist())
    except PutError as exc:
        if not condition_failed(exc):
            raise


def delivery(trigger_id: str, delivery_id: str) -> TriggerDeliveryItem | None:
    bind()
    try:
        return TriggerDeliveryItem.get(trigger_id, f"dlv#{delivery_id}", consistent_read=True)
    except DoesNotExist:
        return None


def settle(
    trigger_id: str,
    delivery_id: str,
    status: str,
    *,
    attempts: int,
    run_id: str | None = None,
    reason: str | None = None,
) -> None:
    """Record what became of a delivery (the worker's one write per attempt)."""
    bind()
    actions: list[Any] = [
        TriggerDeliveryItem.status.set(status),
        TriggerDeliveryItem.attempts.set(attempts),
        TriggerDeliveryItem.updated_at.set(utcnow()),
    ]
    if run_id is not None:
        actions.append(TriggerDeliveryItem.run_id.set(run_id))
    actions.append(TriggerDeliveryItem.reason.set(reason) if reason else TriggerDeliveryItem.reason.remove())
    try:
        TriggerDeliveryItem(trigger_id, f"dlv#{delivery_id}").update(
            actions=actions, condition=TriggerDeliveryItem.sk.exists()
        )
    except UpdateError as exc:
        if not condition_failed(exc):  # expired meanwhile: nothing to record it on
            raise


def to_delivery(item: TriggerDeliveryItem) -> TriggerDelivery:
    return TriggerDelivery(
        delivery_id=item.delivery_id,
        status=item.status,
        received_at=item.received_at,
        dedupe_key=item.dedupe_key,
        run_id=item.run_id,
        duplicate_of=item.duplicate_of,
        reason=item.reason,
        attempts=int(item.attempts or 0),
        updated_at=item.updated_at,
    )


def deliveries(
    trigger_id: str, *, limit: int = PAGE, before: str | None = None
) -> tuple[list[TriggerDelivery], str | None]:
    """A page of the trigger's deliveries, newest first, and the token of the next page."""
    bind()
    # One condition on the sort key: up to and including the token's delivery, which is then dropped.
    condition = (
        TriggerDeliveryItem.sk.between("dlv#", f"dlv#{before}")
        if before
        else TriggerDeliveryItem.sk.startswith("dlv#")
    )
    items = TriggerDeliveryItem.query(
        trigger_id, range_key_condition=condition, scan_index_forward=False, limit=limit + 2
    )
    found = [to_delivery(item) for item in items if item.delivery_id != before][: limit + 1]
    token = found[limit - 1].delivery_id if len(found) > limit else None
    return found[:limit], token
