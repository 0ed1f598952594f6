"""Email triggers through Amazon SES: mail to an address at the operator's domain starts the run of the
trigger that claimed the address.

The operator's receipt rule (README, "Triggers") stores each message in the storage bucket under
`inbound/ses/` and then publishes to the SNS topic of STEPWISE_SES_TOPIC_ARN, which posts to the public
route `POST /v1/integrations/ses`. There (`accept`) the SNS signature is verified, the topic must be
ours and the object must be under our prefix; each recipient that is a trigger's address becomes one
delivery of that trigger, deduplicated by SES's message id, and is queued. Nothing is parsed there.

The worker (`load`) reads the stored message, takes it apart (stepwise.triggers.mail), and refuses one
from the trigger's own address or an automated one. Its attachments are written as uploads and go to
the run as run attachments, so the run keeps the message's files whatever happens to the stored copy.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import httpx

from stepwise.core import config, s3, safejson
from stepwise.core.errors import Forbidden, Unauthorized, Unavailable
from stepwise.core.observability import logger
from stepwise.core.schema import utcnow
from stepwise.net.outbound import OutboundRefused
from stepwise.net.ssrf import guarded_client
from stepwise.triggers import intake, sns, store
from stepwise.triggers.mail import Email, parse
from stepwise.triggers.models import MailAccepted

PREFIX = "inbound/ses/"  # where the receipt rule's S3 action stores messages in the storage bucket
MAX_MESSAGE = 40 * 1024 * 1024  # bytes: SES stores messages of up to 40 MB in S3


def _refused(reason: str) -> Unauthorized:
    return Unauthorized(reason, code="bad_signature")


def accept(raw: bytes, *, now: datetime | None = None) -> MailAccepted:
    """Verify one SNS post and queue a delivery per trigger address among the message's recipients."""
    try:
        message = safejson.loads(raw)
    except ValueError:
        raise _refused("the body is not an SNS message") from None
    if not isinstance(message, dict):
        raise _refused("the body is not an SNS message")
    try:
        sns.verify(message)
    except sns.CertificateUnavailable as exc:
        raise Unavailable(exc.message, code="certificate_unavailable") from None
    except sns.Refused as exc:
        raise _refused(exc.message) from None
    settings = config.inbound_mail()
    if not settings.ses_topic_arn or message.get("TopicArn") != settings.ses_topic_arn:
        raise Forbidden("the message is not from the inbound mail topic", code="unknown_topic")
    kind = str(message["Type"])
    if kind == "SubscriptionConfirmation":
        _confirm(str(message["SubscribeURL"]), str(message["SigningCertURL"]))
        return MailAccepted(type=kind)
    if kind != "Notification":
        return MailAccepted(type=kind)
    return _notification(json.loads(str(message["Message"])), now or utcnow(), kind)


def _confirm(url: str, cert_url: str) -> None:
    """Subscribe: GET the SubscribeURL. It is signed, and must be on the certificate's SNS host too."""
    subscribe, cert = httpx.URL(url), httpx.URL(cert_url)
    if (subscribe.scheme, subscribe.host, subscribe.port) != (cert.scheme, cert.host, cert.port):
        raise Forbidden("SubscribeURL is not on the SNS host that signed it", code="unknown_topic")
    try:
        with guarded_client(timeout=5, max_response_bytes=64 * 1024) as client:
            client.get(url).raise_for_status()
    except (OutboundRefused, httpx.HTTPError) as exc:
        logger.warning("SNS subscription not confirmed", extra={"error": str(exc)})
        raise


def _notification(ses: dict[str, Any], now: datetime, kind: str) -> MailAccepted:
    answer = MailAccepted(type=kind)
    if ses.get("notificationType") != "Received":
        return answer
    receipt, mail = ses.get("receipt") or {}, ses.get("mail") or {}
    action = receipt.get("action") or {}
    key, message_id = str(action.get("objectKey") or ""), str(mail.get("messageId") or "")
    if action.get("type") != "S3" or action.get("bucketName") != s3.bucket() or not key.startswith(PREFIX):
        raise Forbidden("the message is not stored where the receipt rule stores mail", code="unknown_topic")
    for recipient in receipt.get("recipients") or []:
        owner = store.address_owner(str(recipient).lower())
        if owner is None:
            answer.ignored += 1
            continue
        tenant_id, trigger_id = owner
        stored = {"key": key, "recipient": str(recipient).lower(), "message_id": message_id}
        delivery_id, duplicate = intake.record_event(tenant_id, trigger_id, f"mail:{message_id}", stored, now)
        (answer.deduplicated if duplicate else answer.deliveries).append(delivery_id)
    return answer


def load(stored: Mapping[str, Any]) -> Email:
    """The stored message of a delivery, taken apart. FileNotFoundError when it is gone."""
    client = s3.s3_client()
    try:
        found = client.get_object(Bucket=s3.bucket(), Key=str(stored["key"]))
    except client.exceptions.NoSuchKey:
        raise FileNotFoundError(stored["key"]) from None
    body = found["Body"]
    try:
        raw = body.read(MAX_MESSAGE + 1)
    finally:
        body.close()
    return parse(raw[:MAX_MESSAGE])
