"""The public intake, `POST /v1/triggers/{trigger_id}/in`: verify, record, enqueue, answer.

Nothing here starts a run, so the route answers in milliseconds whatever the target does: it reads the
trigger (one GetItem), checks the signature against its secrets (KMS, cached per process by
ciphertext), writes the delivery with its dedupe marker (one transaction, only if the marker is new)
and sends one SQS message. 202 `{delivery_id, status: "received"}`.

- Over 1 MB: 413, counted. A bad or missing signature, or a signed timestamp over 5 minutes away: 401,
  counted by reason, and listed as a `refused` delivery with why (its body is not kept). A disabled
  trigger: 409 `trigger_disabled`, listed likewise.
- A repeat of a dedupe key (the `webhook-id`, GitHub's delivery id, Stripe's event id, or the
  configured `dedupe_path`): 200 `{deduplicated: true, duplicate_of}`, listed as `deduplicated`, and the
  original is queued again, which costs nothing if it was started and recovers it if the first
  request died between recording it and queueing it (its sender retries because it got no 2xx).
- The queue unreachable: 503; the delivery stays `received` and the sender's retry queues it.
"""

from __future__ import annotations

import json
import time
import zlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from stepwise.core import aws, config, safejson
from stepwise.core.errors import ApiError, Conflict, PayloadTooLarge, Unauthorized, Unavailable
from stepwise.core.ids import new_id
from stepwise.core.observability import logger
from stepwise.core.schema import utcnow
from stepwise.core.tables import TriggerItem
from stepwise.settings import crypto
from stepwise.triggers import store, templates, verify
from stepwise.triggers.models import Trigger, TriggerDeliveryAccepted

MAX_BODY = 1024 * 1024  # bytes: a larger request is refused (413) before anything is read
# What one delivery item may hold of the compressed request (a DynamoDB item is at most 400 KB).
MAX_STORED = 350_000
# Headers never kept with a delivery (templates cannot read them): credentials a sender may add.
DROPPED_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization", "x-api-key"})
_SECRETS: OrderedDict[bytes, str] = OrderedDict()  # ciphertext → secret, this process's
_SECRETS_KEPT = 512


@dataclass(frozen=True)
class Answer:
    status: int
    body: TriggerDeliveryAccepted


def secret_context(trigger_id: str) -> str:
    return f"trigger/{trigger_id}"


def _decrypt(tenant_id: str, trigger_id: str, parts: list[bytes]) -> str:
    """The secret, from this process's cache when these exact ciphertexts were decrypted before (a
    rotation writes new ones, so the cache never serves a replaced secret as current)."""
    key = b"\0".join([tenant_id.encode(), trigger_id.encode(), *parts])
    found = _SECRETS.get(key)
    if found is None:
        found = crypto.decrypt(tenant_id, secret_context(trigger_id), parts)
        _SECRETS[key] = found
        if len(_SECRETS) > _SECRETS_KEPT:
            _SECRETS.popitem(last=False)
    return found


def secrets_of(item: TriggerItem, now: datetime) -> list[str]:
    """The secrets a request may be signed with: the current one, and the replaced one in its overlap."""
    current: list[bytes] = list(item.secret or [])  # type: ignore[arg-type]
    previous: list[bytes] = list(item.previous_secret or [])  # type: ignore[arg-type]
    found = [_decrypt(item.tenant_id, item.pk, current)] if current else []
    if previous and item.previous_until and item.previous_until > now:
        found.append(_decrypt(item.tenant_id, item.pk, previous))
    return found


def dedupe_key(
    trigger: Trigger, verified: verify.Verified, headers: Mapping[str, str], body: Any
) -> str | None:
    """What makes two requests the same event: the configured JSON path, else the sender's id of it."""
    if trigger.dedupe_path:
        value = (
            templates.lookup(body, trigger.dedupe_path.lstrip("$").lstrip(".")) if body is not None else None
        )
        return None if value is None else f"path:{templates.text_of(value)}"
    if verified.event_id:
        return f"id:{verified.event_id}"
    if trigger.verification == "stripe" and isinstance(body, dict) and isinstance(body.get("id"), str):
        return f"id:{body['id']}"
    return None


def pack(raw: bytes, headers: Mapping[str, str]) -> bytes:
    kept = {k: v for k, v in headers.items() if k not in DROPPED_HEADERS}
    text = raw.decode("utf-8", errors="replace")
    packed = zlib.compress(json.dumps({"body": text, "headers": kept}).encode(), 6)
    if len(packed) > MAX_STORED:
        raise PayloadTooLarge(
            f"the request does not fit a delivery record ({MAX_STORED} bytes compressed)",
            code="payload_too_large",
        )
    return packed


def unpack(packed: bytes) -> tuple[str, dict[str, str]]:
    data = json.loads(zlib.decompress(packed))
    return str(data["body"]), dict(data["headers"])


def parse(raw: bytes) -> Any:
    """The body as JSON, or None when it is not JSON (templates then read it only as `{{$event}}`)."""
    try:
        return safejson.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, safejson.TooDeep):
        return None


def _refuse(trigger_id: str, reason: str, exc: ApiError, now: datetime) -> ApiError:
    store.count_refusal(trigger_id, reason)
    store.put(
        store.delivery_item(trigger_id, new_id("dlv"), "refused", now, reason=f"{exc.code}: {exc.message}")
    )
    return exc


def accept(trigger_id: str, headers: Mapping[str, str], raw: bytes, *, now: float | None = None) -> Answer:
    """Verify, record and enqueue one request. `headers` have lower-case names."""
    when = utcnow() if now is None else datetime.fromtimestamp(now, tz=utcnow().tzinfo)
    epoch = time.time() if now is None else now
    if len(raw) > MAX_BODY:
        store.count_refusal(trigger_id, "too_large")  # nothing else: the body is not read
        raise PayloadTooLarge(f"the body is over {MAX_BODY} bytes")
    item = store.find(trigger_id)
    if item is None:
        raise store.not_found(trigger_id)
    trigger = store.to_model(item)
    try:
        verified = verify.verify(
            trigger.verification or "standard-webhooks",
            headers,
            raw,
            secrets_of(item, when),
            epoch,
            signature_header=trigger.signature_header,
        )
    except verify.Refused as refused:
        raise _refuse(
            trigger_id, refused.reason, Unauthorized(refused.message, code=refused.reason), when
        ) from None
    if not trigger.enabled:
        store.put(store.delivery_item(trigger_id, new_id("dlv"), "refused", when, reason="trigger_disabled"))
        raise Conflict("the trigger is disabled; enable it to accept deliveries", code="trigger_disabled")
    delivery_id = new_id("dlv")
    key = dedupe_key(trigger, verified, headers, parse(raw))
    record = store.delivery_item(
        trigger_id, delivery_id, "received", when, dedupe_key=key, payload=pack(raw, headers)
    )
    if not store.record(record, key or f"delivery:{delivery_id}"):
        first = store.original(trigger_id, key or "") or ""
        store.put(
            store.delivery_item(
                trigger_id, delivery_id, "deduplicated", when, dedupe_key=key, duplicate_of=first
            )
        )
        if first:
            enqueue(item.tenant_id, trigger_id, first, quiet=True)
        body = TriggerDeliveryAccepted(
            delivery_id=delivery_id, status="deduplicated", deduplicated=True, duplicate_of=first
        )
        return Answer(200, body)
    enqueue(item.tenant_id, trigger_id, delivery_id)
    return Answer(202, TriggerDeliveryAccepted(delivery_id=delivery_id, status="received"))


def enqueue(tenant_id: str, trigger_id: str, delivery_id: str, *, quiet: bool = False) -> None:
    """One message for the worker. 503 when SQS cannot take it (`quiet`: logged only, for a re-queue)."""
    message = {"tenant_id": tenant_id, "trigger_id": trigger_id, "delivery_id": delivery_id}
    try:
        aws.client("sqs").send_message(
            QueueUrl=config.trigger_queue().queue_url, MessageBody=json.dumps(message)
        )
    except (BotoCoreError, ClientError) as exc:
        logger.exception("trigger delivery not queued", extra={"trigger_id": trigger_id})
        if not quiet:
            raise Unavailable(
                "the delivery was recorded but could not be queued; send it again", code="intake_unavailable"
            ) from exc
