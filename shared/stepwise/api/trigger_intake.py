"""POST /v1/triggers/{trigger_id}/in: the public intake of webhook triggers (stepwise.triggers.intake),
and POST /v1/integrations/ses, SES's mail through SNS (stepwise.triggers.ses).
Served by TriggerIntakeFunction, whose rights are its table, its queue and its secrets' decryption
alone; in the API's resolver too, for the spec."""

import base64
from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise.api.auth import PUBLIC
from stepwise.api.params import TriggerId
from stepwise.api.responses import json_response, responses
from stepwise.triggers import intake, ses
from stepwise.triggers.models import MailAccepted, TriggerDeliveryAccepted

router = APIGatewayHttpRouter()

_BODY: dict[str, Any] = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {"anyOf": [{"type": "object"}, {"type": "array"}], "description": "The sender's event"}
        }
    },
}

_SNS_BODY: dict[str, Any] = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "description": "An SNS message (SNS sends it as text/plain)",
                "properties": {
                    "Type": {"type": "string"},
                    "MessageId": {"type": "string"},
                    "TopicArn": {"type": "string"},
                    "Message": {"type": "string"},
                    "Signature": {"type": "string"},
                    "SigningCertURL": {"type": "string"},
                },
            }
        }
    },
}


def raw_body(event: dict[str, Any]) -> bytes:
    """The request's bytes exactly as sent: signatures are over them, not over a re-encoding."""
    body = event.get("body") or ""
    return base64.b64decode(body) if event.get("isBase64Encoded") else body.encode()


@router.post(
    "/v1/triggers/<trigger_id>/in",
    summary="Deliver an event to a webhook trigger",
    description="Public: the signature is the credential (`standard-webhooks`: `webhook-id`, "
    "`webhook-timestamp`, `webhook-signature`; `github`: `X-Hub-Signature-256`; `stripe`: "
    "`Stripe-Signature`; `hmac-sha256`: the trigger's `signature_header`). 202 once the delivery is recorded "
    "and queued; a repeat of its id answers 200 `{deduplicated: true}` and starts nothing.",
    responses=responses(
        202,
        "Recorded and queued",
        400,
        401,
        404,
        409,
        413,
        503,
        public=True,
        described={
            400: "The body is not JSON",
            401: "The signature is missing or wrong, or its timestamp is over 5 minutes away",
            409: "The trigger is disabled",
            413: "The body is over 1 MB",
        },
    ),
    tags=["triggers"],
    openapi_extensions={**PUBLIC, "requestBody": _BODY},
)
def deliver_to_trigger(trigger_id: TriggerId) -> Response[TriggerDeliveryAccepted]:
    event = router.current_event
    headers = {k.lower(): v for k, v in (event.headers or {}).items()}
    answer = intake.accept(trigger_id, headers, raw_body(event.raw_event))
    return json_response(answer.body.model_dump(mode="json"), answer.status)


@router.post(
    "/v1/integrations/ses",
    summary="Mail received by SES, from SNS",
    description="Public: the SNS signature is the credential (verified against Amazon's certificate; the "
    "topic must be the inbound mail topic). A subscription confirmation is confirmed; a `Received` "
    "notification becomes one delivery per `ses` trigger among its recipients, deduplicated by SES's "
    "message id, and is queued.",
    responses=responses(
        200,
        "Verified; the deliveries it queued",
        400,
        401,
        403,
        413,
        503,
        public=True,
        described={
            401: "The SNS signature is missing or does not verify",
            403: "Not the inbound mail topic, or not stored where the receipt rule stores mail",
            503: "The signing certificate or the queue cannot be reached now; SNS retries",
        },
    ),
    tags=["triggers"],
    openapi_extensions={**PUBLIC, "requestBody": _SNS_BODY},
)
def receive_ses_mail() -> Response[MailAccepted]:
    answer = ses.accept(raw_body(router.current_event.raw_event))
    return json_response(answer.model_dump(mode="json"))


_PUSH_BODY: dict[str, Any] = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "description": "A Pub/Sub push: `message.data` is Gmail's {emailAddress, historyId}, base64",
                "properties": {"message": {"type": "object"}, "subscription": {"type": "string"}},
            }
        }
    },
}


@router.post(
    "/v1/integrations/gmail/push",
    summary="Gmail's changes, from Pub/Sub",
    description="Public: the push's OIDC token (Authorization: Bearer) is the credential: signed by Google, "
    "issuer accounts.google.com, audience GmailPushAudience. The mailbox's gmail trigger gets one delivery "
    "per push (deduplicated by Pub/Sub's message id); its worker reads the new messages.",
    responses=responses(
        200,
        "Verified; the delivery it queued",
        400,
        401,
        403,
        413,
        503,
        public=True,
        described={
            401: "The OIDC token is missing, not Google's, for another audience, or expired",
            403: "Gmail pushes are not configured here",
            503: "Google's keys or the queue cannot be reached now; Pub/Sub retries",
        },
    ),
    tags=["triggers"],
    openapi_extensions={**PUBLIC, "requestBody": _PUSH_BODY},
)
def receive_gmail_push() -> Response[MailAccepted]:
    from stepwise.triggers import gmail  # PyJWT: this route's alone

    event = router.current_event
    headers = {k.lower(): v for k, v in (event.headers or {}).items()}
    answer = gmail.accept_push(headers.get("authorization"), raw_body(event.raw_event))
    return json_response(answer.model_dump(mode="json"))
