"""Webhook deliveries and signing secrets (WebhooksTable).

A delivery is created once under its webhook id (a conditional put: the same event enqueued twice is
one delivery), then moved by the worker that holds its lease: `claim` counts an attempt and leases it,
`settle` records how it went. Both are conditional, so two copies of one SQS message (SQS delivers at
least once) never make the same attempt twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pynamodb.exceptions import DoesNotExist, PutError, UpdateError
from pynamodb.expressions.update import Action

from stepwise.core import config
from stepwise.core.schema import utcnow
from stepwise.core.tables import WebhookDeliveryItem, WebhookSecretItem, bind, condition_failed, tenant_key
from stepwise.webhooks.models import Attempt, Delivery, DeliveryRecord

SECRET_SK = "secret"
HISTORY = 20  # attempts kept on a delivery, the most recent


def _to_record(item: WebhookDeliveryItem) -> DeliveryRecord:
    return DeliveryRecord(
        webhook_id=item.sk,
        run_id=item.run_id,
        event=item.event,
        url=item.url,
        body=item.body,
        status=item.status,
        attempts=int(item.attempts or 0),
        last_status_code=int(item.last_status_code) if item.last_status_code is not None else None,
        last_error=item.last_error,
        created_at=item.created_at,
        next_attempt_at=item.next_attempt_at,
        delivered_at=item.delivered_at,
        gives_up_at=item.gives_up_at,
        history=[Attempt.model_validate(a) for a in item.history or []],
        lease_until=int(item.lease_until) if item.lease_until is not None else None,
        headers=dict(item.headers or {}),
    )


def create(tenant_id: str, record: DeliveryRecord) -> bool:
    """Record a new delivery; False when one with its id exists already (nothing is changed then)."""
    bind()
    expires = record.created_at + timedelta(days=config.runtime().events_ttl_days)
    item = WebhookDeliveryItem(
        tenant_key(tenant_id, record.run_id),
        record.webhook_id,
        run_id=record.run_id,
        event=record.event,
        url=record.url,
        body=record.body,
        status=record.status,
        attempts=0,
        created_at=record.created_at,
        gives_up_at=record.gives_up_at,
        next_attempt_at=record.next_attempt_at,
        headers=record.headers or None,
        expires_at=expires,
    )
    try:
        item.save(condition=WebhookDeliveryItem.sk.does_not_exist())
    except PutError as exc:
        if condition_failed(exc):
            return False
        raise
    return True


def get(tenant_id: str, run_id: str, webhook_id: str) -> DeliveryRecord | None:
    bind()
    try:
        return _to_record(
            WebhookDeliveryItem.get(tenant_key(tenant_id, run_id), webhook_id, consistent_read=True)
        )
    except DoesNotExist:
        return None


def for_run(tenant_id: str, run_id: str) -> list[Delivery]:
    """The run's deliveries, oldest first (webhook ids sort by the time of what they report)."""
    bind()
    items = WebhookDeliveryItem.query(tenant_key(tenant_id, run_id), consistent_read=True)
    return sorted((_to_record(i).view() for i in items), key=lambda d: (d.created_at, d.webhook_id))


def claim(
    tenant_id: str, run_id: str, webhook_id: str, now: datetime, lease_seconds: int
) -> DeliveryRecord | None:
    """Count the next attempt and lease it to the caller until `now + lease_seconds`; None when the
    delivery is settled, leased by another worker, or not due yet (`get` tells which)."""
    bind()
    item = WebhookDeliveryItem(tenant_key(tenant_id, run_id), webhook_id)
    epoch = int(now.timestamp())
    condition = (
        WebhookDeliveryItem.sk.exists()
        & WebhookDeliveryItem.status.is_in("pending", "retrying")
        # A second's slack: SQS brings a hidden message back on the second, not before it.
        & (WebhookDeliveryItem.next_attempt_at <= now + timedelta(seconds=1))
        & (WebhookDeliveryItem.lease_until.does_not_exist() | (WebhookDeliveryItem.lease_until < epoch))
    )
    try:
        item.update(
            actions=[
                WebhookDeliveryItem.attempts.add(1),
                WebhookDeliveryItem.lease_until.set(epoch + lease_seconds),
            ],
            condition=condition,
        )
    except UpdateError as exc:
        if condition_failed(exc):
            return None
        raise
    return _to_record(item)  # update() refreshed the item with what DynamoDB holds now


@dataclass(frozen=True)
class Outcome:
    attempt: Attempt
    status: str  # delivered | retrying | failed
    next_attempt_at: datetime | None = None


def settle(tenant_id: str, record: DeliveryRecord, outcome: Outcome) -> bool:
    """Record the attempt the caller leased and where the delivery stands after it; the lease ends.
    False when the lease was lost meanwhile (another worker claimed the next attempt: its word counts)."""
    bind()
    item = WebhookDeliveryItem(tenant_key(tenant_id, record.run_id), record.webhook_id)
    history: list[dict[str, Any]] = [a.model_dump(mode="json") for a in record.history]
    history = [*history, outcome.attempt.model_dump(mode="json")][-HISTORY:]
    actions: list[Action] = [
        WebhookDeliveryItem.status.set(outcome.status),
        WebhookDeliveryItem.history.set(history),
        WebhookDeliveryItem.lease_until.remove(),
        WebhookDeliveryItem.last_error.set(outcome.attempt.error)
        if outcome.attempt.error
        else WebhookDeliveryItem.last_error.remove(),
    ]
    if outcome.attempt.status_code is not None:
        actions.append(WebhookDeliveryItem.last_status_code.set(outcome.attempt.status_code))
    if outcome.status == "delivered":
        actions.append(WebhookDeliveryItem.delivered_at.set(outcome.attempt.at))
    if outcome.next_attempt_at is not None:
        actions.append(WebhookDeliveryItem.next_attempt_at.set(outcome.next_attempt_at))
    else:
        actions.append(WebhookDeliveryItem.next_attempt_at.remove())
    try:
        item.update(actions=actions, condition=WebhookDeliveryItem.attempts == record.attempts)
    except UpdateError as exc:
        if condition_failed(exc):
            return False
        raise
    return True


def fail_unqueued(tenant_id: str, run_id: str, webhook_id: str, error: str) -> None:
    """A delivery whose message never reached the queue: failed, so its listing does not claim it waits."""
    bind()
    item = WebhookDeliveryItem(tenant_key(tenant_id, run_id), webhook_id)
    item.update(
        actions=[
            WebhookDeliveryItem.status.set("failed"),
            WebhookDeliveryItem.last_error.set(error),
            WebhookDeliveryItem.next_attempt_at.remove(),
        ],
        condition=WebhookDeliveryItem.status == "pending",
    )


# --- Secrets --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredSecret:
    current: list[bytes]
    created_at: datetime
    previous: list[bytes] | None
    previous_until: datetime | None


def secret(tenant_id: str) -> StoredSecret | None:
    bind()
    try:
        item = WebhookSecretItem.get(tenant_id, SECRET_SK, consistent_read=True)
    except DoesNotExist:
        return None
    return StoredSecret(
        current=[bytes(p) for p in item.current],
        created_at=item.created_at,
        previous=[bytes(p) for p in item.previous] if item.previous else None,
        previous_until=item.previous_until,
    )


def has_secret(tenant_id: str) -> bool:
    bind()
    try:
        WebhookSecretItem.get(tenant_id, SECRET_SK, consistent_read=True, attributes_to_get=["sk"])
    except DoesNotExist:
        return False
    return True


def rotate_secret(
    tenant_id: str, ciphertext: list[bytes], kms_key_id: str, keep_previous: timedelta
) -> StoredSecret:
    """Make `ciphertext` the tenant's secret; the one it replaces (if any) goes on signing until
    `keep_previous` from now. One write either way: the first secret is a conditional put, a rotation
    one update that moves the current secret aside as it sets the new one, so two rotations at once
    cannot lose a secret that one of them showed."""
    bind()
    now = utcnow()
    while True:
        item = WebhookSecretItem(
            tenant_id, SECRET_SK, current=ciphertext, created_at=now, kms_key_id=kms_key_id
        )
        try:
            item.save(condition=WebhookSecretItem.sk.does_not_exist())
            return StoredSecret(current=ciphertext, created_at=now, previous=None, previous_until=None)
        except PutError as exc:
            if not condition_failed(exc):
                raise
        until = now + keep_previous
        try:
            item.update(
                actions=[
                    WebhookSecretItem.previous.set(WebhookSecretItem.current),
                    WebhookSecretItem.previous_until.set(until),
                    # pynamodb types the value as attributes; the list's BinaryAttribute serializes bytes.
                    WebhookSecretItem.current.set(ciphertext),  # type: ignore[arg-type]
                    WebhookSecretItem.created_at.set(now),
                    WebhookSecretItem.kms_key_id.set(kms_key_id),
                ],
                condition=WebhookSecretItem.sk.exists(),
            )
        except UpdateError as exc:
            if condition_failed(exc):
                continue  # deleted in between (nothing deletes it today): create it instead
            raise
        return StoredSecret(current=ciphertext, created_at=now, previous=None, previous_until=until)
