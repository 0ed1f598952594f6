"""POST /v1/triggers/{trigger_id}/in: the public intake of webhook triggers (stepwise.triggers.intake).
Served by TriggerIntakeFunction, whose rights are its table, its queue and its secrets' decryption
alone; in the API's resolver too, for the spec."""

import base64
from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise.api.auth import PUBLIC
from stepwise.api.params import TriggerId
from stepwise.api.responses import json_response, responses
from stepwise.triggers import intake
from stepwise.triggers.models import TriggerDeliveryAccepted

router = APIGatewayHttpRouter()

_BODY: dict[str, Any] = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {"anyOf": [{"type": "object"}, {"type": "array"}], "description": "The sender's event"}
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
