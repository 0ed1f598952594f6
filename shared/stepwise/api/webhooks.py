"""/v1/webhooks/secret and /v1/runs/{run_id}/webhooks (stepwise.webhooks)."""

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise.api.context import tenant
from stepwise.api.params import RunId
from stepwise.api.responses import json_response, responses
from stepwise.store import runs
from stepwise.webhooks import keys, store
from stepwise.webhooks.models import DeliveryList, WebhookSecret

router = APIGatewayHttpRouter()
WEBHOOKS = ["webhooks"]


@router.post(
    "/v1/webhooks/secret",
    summary="Create or rotate the webhook secret",
    description="A new `whsec_` secret that signs the tenant's webhook deliveries (Standard Webhooks: "
    "`webhook-id`, `webhook-timestamp`, `webhook-signature`). Shown only in this response. The secret it "
    "replaces keeps signing beside it until `previous_valid_until` (24 hours), so receivers can switch.",
    responses=responses(201, "The new secret, shown once (created: creations answer 201)"),
    tags=WEBHOOKS,
)
def rotate_secret() -> Response[WebhookSecret]:
    return json_response(keys.rotate(tenant(router)).model_dump(mode="json"), 201)


@router.get(
    "/v1/runs/<run_id>/webhooks",
    summary="List a run's webhook deliveries",
    description="Each delivery with its status (`pending`, `retrying`, `delivered`, `failed`), how many "
    "attempts it took and what the last one got back; `history` lists the recent attempts. Failed "
    "attempts are retried with backoff for 24 hours.",
    responses=responses(200, "The run's deliveries", 404),
    tags=WEBHOOKS,
)
def list_deliveries(run_id: RunId) -> Response[DeliveryList]:
    tenant_id = tenant(router)
    runs.target(tenant_id, run_id)  # 404 for a run that is not this tenant's
    deliveries = store.for_run(tenant_id, run_id)
    return json_response({"deliveries": [d.model_dump(mode="json") for d in deliveries]})
