"""WebhookFunction: one attempt per queued delivery, and the next one scheduled through SQS.

Each SQS message names a delivery. The worker claims the delivery's next attempt (a conditional update
with a lease: a second copy of the message, which SQS may deliver, finds it taken), signs the stored
body for this attempt's timestamp and POSTs it through the SSRF guard. A 2xx delivers it. Anything else
records the attempt and hides the message for the backoff (ChangeMessageVisibility), then reports it
failed to Lambda (ReportBatchItemFailures), so SQS hands it back when the next attempt is due; no
function waits in between. Past the delivery's 24 h window, or for a destination the guard refuses,
the delivery is failed and its message deleted.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from pydantic import BaseModel

from stepwise.core import aws, config, observability
from stepwise.core.observability import logger
from stepwise.core.schema import utcnow
from stepwise.net.outbound import OutboundRefused
from stepwise.net.ssrf import BlockedDestination, guarded_client
from stepwise.tools.http_tool import USER_AGENT
from stepwise.webhooks import keys, retry, signing, store
from stepwise.webhooks.models import FINAL_STATUSES, Attempt, DeliveryRecord

ATTEMPT_TIMEOUT = 15.0  # seconds for one whole attempt: connect, send, the receiver's status line
LEASE_SECONDS = 60  # longer than an attempt, shorter than the queue's visibility timeout
REPLY_LIMIT = 64 * 1024  # bytes of a reply read (only its status matters)


class Message(BaseModel):
    tenant_id: str
    run_id: str
    webhook_id: str


@dataclass(frozen=True)
class Sent:
    attempt: Attempt
    permanent: bool = False  # retrying cannot help (a destination the SSRF guard refuses)

    @property
    def ok(self) -> bool:
        return self.attempt.status_code is not None and 200 <= self.attempt.status_code < 300


Post = Callable[[DeliveryRecord, list[str]], Sent]


class RetryLater(Exception):
    """The message comes back in `seconds` (already hidden for that long)."""

    def __init__(self, seconds: int) -> None:
        super().__init__(f"next attempt in {seconds} s")
        self.seconds = seconds


def post(record: DeliveryRecord, secrets: list[str]) -> Sent:
    """One signed POST of the delivery's body. Never raises for what the receiver or the network does."""
    started, at = time.monotonic(), utcnow()

    def took() -> int:
        return int((time.monotonic() - started) * 1000)

    if not secrets:
        error = "webhook_secret_missing: the tenant has no webhook secret (POST /v1/webhooks/secret)"
        return Sent(Attempt(at=at, duration_ms=0, error=error))
    content = record.body.encode()
    headers = {
        **record.headers,
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        **signing.headers(secrets, record.webhook_id, int(time.time()), content),
    }
    try:
        # No redirects: Standard Webhooks counts a 3xx as a failure, and a moved receiver is misconfigured.
        with (
            guarded_client(
                timeout=ATTEMPT_TIMEOUT, max_response_bytes=REPLY_LIMIT, follow_redirects=False
            ) as client,
            client.stream("POST", record.url, headers=headers, content=content) as response,
        ):
            code = response.status_code
    except BlockedDestination as exc:
        return Sent(Attempt(at=at, duration_ms=took(), error=f"{exc.code}: {exc.message}"), permanent=True)
    except OutboundRefused as exc:
        return Sent(Attempt(at=at, duration_ms=took(), error=f"{exc.code}: {exc.message}"))
    except httpx.TimeoutException:
        return Sent(
            Attempt(at=at, duration_ms=took(), error=f"timeout: no answer within {ATTEMPT_TIMEOUT:g} s")
        )
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        return Sent(Attempt(at=at, duration_ms=took(), error=f"unreachable: {type(exc).__name__}: {exc}"))
    return Sent(Attempt(at=at, duration_ms=took(), status_code=code))


def attempt(message: Message, *, send: Post = post, now: datetime | None = None) -> int | None:
    """Make the delivery's next attempt if it is due and nobody else is making it. Seconds until its
    message should come back, or None when it is done with (delivered, failed, or gone)."""
    now = now or utcnow()
    record = store.claim(message.tenant_id, message.run_id, message.webhook_id, now, LEASE_SECONDS)
    if record is None:
        return _not_ours(message, now)
    observability.bind(run_id=message.run_id, webhook_id=message.webhook_id, attempt=record.attempts)
    sent = send(record, keys.signing_secrets(message.tenant_id))
    finished = utcnow()
    delay: int | None = None
    if sent.ok:
        outcome = store.Outcome(sent.attempt, "delivered")
    elif sent.permanent:
        outcome = store.Outcome(sent.attempt, "failed")
    else:
        delay = retry.next_delay(record.attempts, finished, record.gives_up_at)
        if delay is None:
            outcome = store.Outcome(sent.attempt, "failed")
        else:
            outcome = store.Outcome(sent.attempt, "retrying", finished + timedelta(seconds=delay))
    if not store.settle(message.tenant_id, record, outcome):
        logger.warning("webhook attempt outlived its lease; another worker's attempt counts")
        return None
    latency = int((finished - record.created_at).total_seconds() * 1000) if sent.ok else None
    observability.webhook_attempted(outcome.status, attempts=record.attempts, latency_ms=latency)
    return delay


def _not_ours(message: Message, now: datetime) -> int | None:
    """The claim failed: settled (done), or another worker's lease, or not due (this is a second copy
    of the message). Come back when it might be ours, so a worker that died holding it is replaced."""
    current = store.get(message.tenant_id, message.run_id, message.webhook_id)
    if current is None or current.status in FINAL_STATUSES:
        return None
    due = current.next_attempt_at or now
    if current.lease_until is not None:
        due = max(due, datetime.fromtimestamp(current.lease_until, tz=now.tzinfo))
    return max(retry.MIN_DELAY, math.ceil((due - now).total_seconds()))


def _hide(receipt_handle: str, seconds: int) -> None:
    aws.client("sqs").change_message_visibility(
        QueueUrl=config.webhook_queue().queue_url, ReceiptHandle=receipt_handle, VisibilityTimeout=seconds
    )


def _record(record: SQSRecord) -> None:
    delay = attempt(Message.model_validate_json(record.body))
    if delay is not None:
        _hide(record.receipt_handle, delay)
        raise RetryLater(delay)


def handle(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The SQS batch; the messages to come back later are reported as failures (and hidden already)."""
    # A batch where every delivery waits for a retry is normal, not an error for Lambda to log.
    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
    return dict(
        process_partial_response(event=event, record_handler=_record, processor=processor, context=context)
    )
