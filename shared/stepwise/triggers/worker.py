"""TriggerWorkerFunction: each SQS message names one recorded delivery; start its target's run.

The run id is derived from the trigger and the delivery's dedupe key (or its delivery id), so a message
SQS delivers twice, a re-queue by a repeated request, or a retry after a crash between the start and
its bookkeeping all find the run recorded (RunExists) and start nothing more: exactly one run.

Before the start this reads the delivery and the trigger (two GetItems); after it, one UpdateItem
records the outcome. What cannot succeed by retrying (the trigger deleted or disabled, the agent gone
or paused, a template that renders an invalid message or user id, the tenant suspended) is `refused`
with why. Anything else is retried: the message is hidden for a backoff (RETRY_BASE doubled per
attempt, up to RETRY_CEILING) and reported failed, so SQS hands it back; after TRIGGER_MAX_ATTEMPTS
receives the delivery is `failed` and the queue's redrive policy moves the message to the dead-letter
queue.
"""

from __future__ import annotations

import json
from datetime import UTC
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from pydantic import BaseModel, ValidationError

from stepwise.core import aws, config
from stepwise.core.errors import ApiError, Conflict, Forbidden, ModelNotAllowed, NotFound, Unprocessable
from stepwise.core.ids import derived_id
from stepwise.core.observability import logger
from stepwise.runs.models import AgentPaused, RunExists
from stepwise.triggers import intake, mail, store, targets, templates
from stepwise.triggers.models import EMAIL_TYPES, SessionByKey, Trigger

RETRY_BASE = 10  # seconds before the second attempt; doubled each time
RETRY_CEILING = 900  # seconds: no backoff is longer
FINAL = frozenset({"started", "refused", "failed", "deduplicated"})
# Conflicts a retry cannot resolve: a by-key session that is another user's or another agent's.
SETTLED_CONFLICTS = frozenset({"session_user_mismatch", "session_agent_mismatch"})


class Message(BaseModel):
    tenant_id: str
    trigger_id: str
    delivery_id: str


class RetryLater(Exception):
    def __init__(self, seconds: int) -> None:
        super().__init__(f"next attempt in {seconds} s")
        self.seconds = seconds


def backoff(attempts: int) -> int:
    return int(min(RETRY_CEILING, RETRY_BASE * 2 ** max(0, attempts - 1)))


def intent(trigger: Trigger, key: str) -> str:
    """The run's trigger id: the delivery, as a schedule's is its tick (the effects ledger keys on it)."""
    return f"{trigger.type}:{trigger.trigger_id}/{key}"


def session_id(tenant_id: str, trigger: Trigger, agent_id: str, key: str) -> str:
    """One key, one session: its id derived from the trigger, the agent and the rendered key (timed at
    the trigger's creation, so a trigger's sessions sort together)."""
    return derived_id(
        "ses", trigger.created_at, "trigger-session", tenant_id, trigger.trigger_id, agent_id, key
    )


def _refused(why: str) -> tuple[str, str]:
    return "refused", why


def handle_message(message: Message, attempts: int) -> int | None:
    """Start the delivery's run. None when done with it; seconds until it should come back otherwise."""
    tenant_id, trigger_id, delivery_id = message.tenant_id, message.trigger_id, message.delivery_id
    delivery = store.delivery(trigger_id, delivery_id)
    if delivery is None or delivery.status in FINAL:
        return None  # expired, or a repeat of a message already dealt with
    item = store.find(trigger_id)
    if item is None or item.tenant_id != tenant_id:
        store.settle(trigger_id, delivery_id, "refused", attempts=attempts, reason="trigger_deleted")
        return None
    trigger = store.to_model(item)
    if not trigger.enabled:
        store.settle(trigger_id, delivery_id, "refused", attempts=attempts, reason="trigger_disabled")
        return None
    key = delivery.dedupe_key or f"delivery:{delivery_id}"
    raw, headers = intake.unpack(delivery.payload or b"")
    body = intake.parse(raw.encode())
    files: list[mail.Part] = []
    if trigger.type == "gmail" and isinstance(body, dict) and body.get("kind") == "push":
        return _fan_out(tenant_id, trigger, item.cursor, delivery_id, attempts)
    if trigger.type in EMAIL_TYPES:
        try:
            email = _email(tenant_id, trigger, body)
        except FileNotFoundError:
            store.settle(trigger_id, delivery_id, "refused", attempts=attempts, reason="message_gone")
            return None
        except Exception as exc:  # noqa: BLE001 - a mailbox or storage failure is retried
            return _retry(trigger_id, delivery_id, attempts, exc)
        skip = mail.skip_reason(email, trigger.address, allow_automated=trigger.allow_automated)
        if skip is not None:
            store.settle(trigger_id, delivery_id, "refused", attempts=attempts, reason=skip)
            return None
        body, raw, files = email.event(), json.dumps(email.event()), email.attachments
    received = delivery.received_at.astimezone(UTC)
    meta = {
        "$event": raw,
        "$headers": headers,
        "$delivery_id": delivery_id,
        "$trigger_id": trigger_id,
        "$received_at": received.isoformat(),
    }
    run_id = derived_id("run", received, "trigger", tenant_id, trigger_id, key)
    try:
        start = _start_of(tenant_id, trigger, body, meta, run_id, key, delivery_id)
        targets.start(start, files)
    except RunExists:
        logger.info("trigger delivery was started before", extra={"run_id": run_id})
    except (NotFound, ModelNotAllowed, AgentPaused, Forbidden, Unprocessable, ValidationError) as exc:
        # Retrying cannot help: the agent is gone or paused, the operator's bounds or the tenant's
        # suspension refuse it, or the templates render something a run does not accept.
        why = f"{exc.code}: {exc.message}" if isinstance(exc, ApiError) else _invalid(exc)
        store.settle(trigger_id, delivery_id, "refused", attempts=attempts, reason=why)
        return None
    except Conflict as exc:
        if exc.code not in SETTLED_CONFLICTS:
            return _retry(trigger_id, delivery_id, attempts, exc)
        # The by-key session is another user's or another agent's: the key will not change.
        store.settle(
            trigger_id, delivery_id, "refused", attempts=attempts, reason=f"{exc.code}: {exc.message}"
        )
        return None
    except Exception as exc:  # noqa: BLE001 - any other failure is retried; the last attempt re-raises
        return _retry(trigger_id, delivery_id, attempts, exc)
    store.settle(trigger_id, delivery_id, "started", attempts=attempts, run_id=run_id)
    return None


def _email(tenant_id: str, trigger: Trigger, stored: Any) -> mail.Email:
    """The message a delivery of an email trigger names, from where its intake left it."""
    if not isinstance(stored, dict):
        raise FileNotFoundError("the delivery names no message")
    if trigger.type == "gmail":
        from stepwise.triggers import gmail  # the OAuth and Gmail calls: mailbox deliveries only

        return gmail.load(tenant_id, trigger, stored)
    from stepwise.triggers import ses  # only email deliveries need S3 and MIME parsing

    return ses.load(stored)


def _fan_out(
    tenant_id: str, trigger: Trigger, cursor: str | None, delivery_id: str, attempts: int
) -> int | None:
    """A Gmail push: the mailbox's new messages become deliveries of their own (each starts one run)."""
    from stepwise.triggers import gmail

    try:
        created = gmail.fan_out(tenant_id, trigger, cursor)
    except Unprocessable as exc:
        store.settle(
            trigger.trigger_id, delivery_id, "refused", attempts=attempts, reason=f"{exc.code}: {exc.message}"
        )
        return None
    except Exception as exc:  # noqa: BLE001 - the mailbox unreachable or a token refused: retried
        return _retry(trigger.trigger_id, delivery_id, attempts, exc)
    # `started` with no run of its own: what it started are the message deliveries it names.
    why = f"new messages: {', '.join(created)}" if created else "no new messages"
    store.settle(trigger.trigger_id, delivery_id, "started", attempts=attempts, reason=why[:500])
    return None


def _retry(trigger_id: str, delivery_id: str, attempts: int, exc: Exception) -> int:
    """Record the failed attempt; the backoff before the next, or raise after the last."""
    why = f"{type(exc).__name__}: {exc}"[:500]
    if attempts >= config.trigger_queue().max_attempts:
        logger.error("trigger delivery failed for good", extra={"trigger_id": trigger_id, "error": why})
        store.settle(trigger_id, delivery_id, "failed", attempts=attempts, reason=why)
        raise exc  # reported failed: past maxReceiveCount the queue moves it to the dead-letter queue
    logger.warning("trigger delivery will be retried", extra={"trigger_id": trigger_id, "error": why})
    store.settle(trigger_id, delivery_id, "retrying", attempts=attempts, reason=why)
    return backoff(attempts)


def _invalid(exc: ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return "invalid_rendered_input: not valid"
    where = ".".join(str(p) for p in errors[0]["loc"]) or "input"
    return f"invalid_rendered_{where}: {errors[0]['msg']}"


def _start_of(
    tenant_id: str,
    trigger: Trigger,
    body: Any,
    meta: dict[str, Any],
    run_id: str,
    key: str,
    delivery_id: str,
) -> targets.Start:
    message = templates.render(trigger.message, body, meta)
    if not message.strip():
        raise Unprocessable("the message template rendered nothing for this event", code="empty_message")
    user_id = templates.render(trigger.user_id, body, meta).strip() or None if trigger.user_id else None
    session: str | None = None
    if isinstance(trigger.session, SessionByKey):
        rendered = templates.render(trigger.session.by_key, body, meta).strip()
        if not rendered:
            raise Unprocessable(
                "the session key template rendered nothing for this event", code="empty_session_key"
            )
        session = session_id(
            tenant_id, trigger, str(trigger.target.agent_id or trigger.target.workflow_id), rendered
        )
    return targets.Start(
        tenant_id=tenant_id,
        target=trigger.target,
        message=message,
        run_id=run_id,
        trigger_id=intent(trigger, key),
        session_id=session,
        user_id=user_id,
        metadata={"trigger": trigger.type, "trigger_id": trigger.trigger_id, "delivery_id": delivery_id},
    )


def _hide(receipt_handle: str, seconds: int) -> None:
    aws.client("sqs").change_message_visibility(
        QueueUrl=config.trigger_queue().queue_url, ReceiptHandle=receipt_handle, VisibilityTimeout=seconds
    )


def _record(record: SQSRecord) -> None:
    attempts = int(record.attributes.approximate_receive_count or 1)
    delay = handle_message(Message.model_validate_json(record.body), attempts)
    if delay is not None:
        _hide(record.receipt_handle, delay)
        raise RetryLater(delay)


def handle(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The SQS batch; messages to retry are reported as failures (already hidden for their backoff)."""
    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
    return dict(
        process_partial_response(event=event, record_handler=_record, processor=processor, context=context)
    )
