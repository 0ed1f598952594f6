"""Queue a run event for its webhook: record the delivery under its stable id, then put a message on
WebhookQueue. Called where the run's lifecycle writes the event; it sends nothing itself, so the step
that ends or pauses a run spends one small write and one SendMessage on it, whatever the receiver does.

The body is fixed here, once: every attempt sends exactly these bytes (signed afresh each time), and a
receiver that dedupes on `webhook-id` sees one event however often it arrives."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pynamodb.exceptions import PynamoDBException

from stepwise.core import aws, config
from stepwise.core.ids import derived_id
from stepwise.core.observability import logger
from stepwise.core.schema import json_default, rfc3339, utcnow
from stepwise.webhooks import store
from stepwise.webhooks.models import DeliveryRecord, RunTarget
from stepwise.webhooks.retry import WINDOW

# Bytes of one delivery's body. It lives in the delivery's DynamoDB item (400 KB) and receivers cap
# what they accept; a larger event goes out without its output or arguments, marked `truncated`
# (GET /v1/runs/{run_id} has them).
BODY_LIMIT = 128 * 1024
_BULKY = ("output", "arguments")


def webhook_id(tenant_id: str, run_id: str, key: str, at: datetime) -> str:
    """The delivery's id, from what happened (`key`) rather than from when it was enqueued: a step that
    is retried enqueues the same event under the same id."""
    return derived_id("msg", at, tenant_id, run_id, key)


def body(run: RunTarget, event: str, data: dict[str, Any], now: datetime) -> str:
    """The Standard Webhooks payload shape: `{type, timestamp, data}`."""
    inner = {"run_id": run.run_id, "agent_id": run.agent_id, "session_id": run.session_id, **data}
    inner["metadata"] = run.metadata
    text = _dumps(event, now, inner)
    if len(text.encode()) > BODY_LIMIT:
        inner = {k: v for k, v in inner.items() if k not in _BULKY} | {"truncated": True}
        text = _dumps(event, now, inner)
    return text


def _dumps(event: str, now: datetime, data: dict[str, Any]) -> str:
    return json.dumps(
        {"type": event, "timestamp": rfc3339(now), "data": data}, ensure_ascii=False, default=json_default
    )


def enqueue(
    tenant_id: str, run: RunTarget, event: str, data: dict[str, Any], *, key: str, at: datetime
) -> str | None:
    """Queue `event` for the run's webhook if it asks for it; the delivery's id, or None when it does
    not. An event already queued under this `key` is not queued again.

    Never raises for the store or the queue: the run's ending or pause must not fail because its
    webhook could not be queued. Such a delivery is marked failed (the listing says why) and logged."""
    webhook = run.webhook
    if webhook is None or not webhook.wants(event):
        return None
    now = utcnow()
    text = body(run, event, data, now)
    return enqueue_raw(tenant_id, run.run_id, event, webhook.url, text, key=key, at=at, now=now)


def enqueue_raw(
    tenant_id: str,
    run_id: str,
    event: str,
    url: str,
    text: str,
    *,
    key: str,
    at: datetime,
    headers: dict[str, str] | None = None,
    now: datetime | None = None,
) -> str | None:
    """Queue `text` as it is to `url` (with `headers` besides the signature's): for a body in another
    protocol's shape (an A2A push notification is the task, stepwise.protocols.a2a builds it)."""
    now = now or utcnow()
    record = DeliveryRecord(
        webhook_id=webhook_id(tenant_id, run_id, key, at),
        run_id=run_id,
        event=event,
        url=url,
        body=text,
        status="pending",
        attempts=0,
        created_at=now,
        next_attempt_at=now,
        gives_up_at=now + WINDOW,
        headers=headers or {},
    )
    try:
        if not store.create(tenant_id, record):
            return record.webhook_id  # queued before, by an earlier try of this step
    except PynamoDBException:
        logger.exception("webhook delivery not recorded", extra={"run_id": run_id, "event": event})
        return None
    message = {"tenant_id": tenant_id, "run_id": run_id, "webhook_id": record.webhook_id}
    try:
        aws.client("sqs").send_message(
            QueueUrl=config.webhook_queue().queue_url, MessageBody=json.dumps(message)
        )
    except (BotoCoreError, ClientError) as exc:
        logger.exception("webhook delivery not queued", extra={"run_id": run_id, "event": event})
        try:
            store.fail_unqueued(tenant_id, run_id, record.webhook_id, f"could not be queued: {exc}")
        except PynamoDBException:
            logger.exception("webhook delivery could not be marked failed", extra={"run_id": run_id})
    return record.webhook_id
