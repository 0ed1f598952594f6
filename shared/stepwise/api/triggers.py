"""/v1/triggers: create, list, read, change, delete triggers, rotate a webhook trigger's secret, and
list what reached it (stepwise.triggers). The public intake is stepwise.api.trigger_intake."""

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise.api.context import tenant
from stepwise.api.params import TriggerId
from stepwise.api.responses import json_response, responses
from stepwise.core.ids import DELIVERY_ID
from stepwise.triggers import service
from stepwise.triggers.models import (
    Trigger,
    TriggerCreate,
    TriggerCreated,
    TriggerDeliveryList,
    TriggerList,
    TriggerPatch,
    TriggerSecret,
    TriggerSecretRotate,
)

router = APIGatewayHttpRouter()
TRIGGERS = ["triggers"]


@router.post(
    "/v1/triggers",
    summary="Create a trigger",
    description="A trigger starts its `target` (`{agent_id}`) with `message`, a template over the event, "
    "each time an event arrives. `type` `webhook` gets a public `url` and a signing `secret`, shown only in "
    "this response, checked as `verification` says (`standard-webhooks` by default, `github`, `stripe`, "
    "`hmac-sha256` with `signature_header`). `session`: `new`, or `{by_key: template}` for one session "
    "per key. `ses` gets the inbound `address` (at the operator's SesInboundDomain) whose mail starts it. "
    "`gmail` and `outlook` answer 422 `trigger_type_unavailable` for now; a "
    "`{workflow_id}` target 422 `workflow_targets_unavailable`.",
    responses=responses(
        201,
        "The trigger, with its `trigger_id`, and its `url` and `secret` or its `address`",
        400,
        409,
        413,
        described={409: "The address is another trigger's"},
    ),
    tags=TRIGGERS,
)
def create_trigger(body: TriggerCreate) -> Response[TriggerCreated]:
    created = service.create(tenant(router), body)
    return json_response(created.model_dump(mode="json"), 201)


@router.get(
    "/v1/triggers",
    summary="List triggers",
    responses=responses(200, "The tenant's triggers, oldest first"),
    tags=TRIGGERS,
)
def list_triggers() -> Response[TriggerList]:
    found = service.list_for(tenant(router))
    return json_response({"triggers": [t.model_dump(mode="json") for t in found]})


@router.get(
    "/v1/triggers/<trigger_id>",
    summary="Get a trigger",
    description="The trigger (never its secret), with the requests its intake refused, by reason.",
    responses=responses(200, "The trigger", 404),
    tags=TRIGGERS,
)
def get_trigger(trigger_id: TriggerId) -> Response[Trigger]:
    return json_response(service.get(tenant(router), trigger_id).model_dump(mode="json"))


@router.patch(
    "/v1/triggers/<trigger_id>",
    summary="Change a trigger",
    description="Any of `name`, `target`, `message`, `session`, `user_id`, `enabled`, `dedupe_path`. "
    "Deliveries already queued start with the trigger as it is when they are worked.",
    responses=responses(200, "The changed trigger", 400, 404, 413),
    tags=TRIGGERS,
)
def update_trigger(trigger_id: TriggerId, body: TriggerPatch) -> Response[Trigger]:
    return json_response(service.update(tenant(router), trigger_id, body).model_dump(mode="json"))


@router.delete(
    "/v1/triggers/<trigger_id>",
    summary="Delete a trigger",
    description="Its URL answers 404 from now on; queued deliveries start nothing.",
    responses=responses(204, "Deleted", 404, content={}),
    tags=TRIGGERS,
)
def delete_trigger(trigger_id: TriggerId) -> Response[None]:
    service.delete(tenant(router), trigger_id)
    return Response(status_code=204)


@router.post(
    "/v1/triggers/<trigger_id>/secret",
    summary="Rotate a webhook trigger's secret",
    description="A new signing secret (or the one given, e.g. Stripe's), shown only in this response. The "
    "replaced one still verifies until `previous_valid_until` (`previous_valid_seconds`, 24 h by default; "
    "0 revokes it at once).",
    responses=responses(200, "The new secret, shown once", 400, 404, 413),
    tags=TRIGGERS,
)
def rotate_trigger_secret(trigger_id: TriggerId, body: TriggerSecretRotate) -> Response[TriggerSecret]:
    return json_response(service.rotate(tenant(router), trigger_id, body).model_dump(mode="json"))


@router.get(
    "/v1/triggers/<trigger_id>/deliveries",
    summary="List a trigger's deliveries",
    description="What reached the trigger, newest first: `received` (queued), `retrying`, `started` (with "
    "its `run_id`), `deduplicated` (with `duplicate_of`), `refused` (with `reason`) or `failed` (with "
    "`attempts` and the last `reason`). Kept for TriggerDeliveriesTtlDays.",
    responses=responses(200, "A page of deliveries and the `next_token` of the next", 404),
    tags=TRIGGERS,
)
def list_trigger_deliveries(
    trigger_id: TriggerId,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    next_token: Annotated[str | None, Query(pattern=DELIVERY_ID)] = None,
) -> Response[TriggerDeliveryList]:
    found, token = service.deliveries(tenant(router), trigger_id, limit, next_token)
    return json_response({"deliveries": [d.model_dump(mode="json") for d in found], "next_token": token})
