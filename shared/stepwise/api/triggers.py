"""/v1/triggers: create, list, read, change, delete triggers, rotate a webhook trigger's secret, and
list what reached it (stepwise.triggers). The public intake is stepwise.api.trigger_intake."""

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise.api.auth import PUBLIC
from stepwise.api.context import tenant
from stepwise.api.params import TriggerId
from stepwise.api.responses import HTML, json_response, responses
from stepwise.core import config
from stepwise.core.errors import Conflict, NotFound
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
GMAIL_CALLBACK = "/v1/integrations/gmail/oauth/callback"


def _public_url() -> str:
    """The API's origin, which the OAuth callback is under (as MCP servers' callback is)."""
    configured = config.links().public_url
    if configured:
        return configured
    domain = router.current_event.request_context.domain_name
    return f"https://{domain}" if domain else ""


@router.post(
    "/v1/triggers",
    summary="Create a trigger",
    description="A trigger starts its `target` (`{agent_id}`) with `message`, a template over the event, "
    "each time an event arrives. `type` `webhook` gets a public `url` and a signing `secret`, shown only in "
    "this response, checked as `verification` says (`standard-webhooks` by default, `github`, `stripe`, "
    "`hmac-sha256` with `signature_header`). `session`: `new`, or `{by_key: template}` for one session "
    "per key. `ses` gets the inbound `address` (at the operator's SesInboundDomain) whose mail starts it. "
    "`gmail` answers an `authorization_url` a person opens to let it read the mailbox. "
    "`outlook` answers 422 `trigger_type_unavailable` for now; a "
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
    created = service.create(tenant(router), body, callback_url=_public_url() + GMAIL_CALLBACK)
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


_PAGE: dict[str, Any] = {HTML: {"schema": {"type": "string"}}}


@router.get(
    GMAIL_CALLBACK,
    summary="OAuth callback of gmail triggers",
    description="Public: where Google sends the person back with `code` and `state` (single use, valid 10 "
    "minutes; the MCP OAuth store's). The code is exchanged, the mailbox read and watched. An HTML page: "
    "200 connected, 400 denied or refused, 403 a state we never issued, 409 a mailbox another trigger has, "
    "410 a state used or expired.",
    responses={
        **responses(200, "A page: connected", 413, public=True, content=_PAGE),
        **{
            status: {"description": f"A page: {what}", "content": _PAGE}
            for status, what in (
                (400, "denied, or the code refused"),
                (403, "not a state Stepwise issued"),
                (404, "the trigger was deleted"),
                (409, "the mailbox is another trigger's"),
                (410, "the state was used already or expired"),
            )
        },
    },
    tags=TRIGGERS,
    openapi_extensions=PUBLIC,
)
def gmail_oauth_callback() -> Response[str]:
    from stepwise.mcp.authorization import StateRejected, take
    from stepwise.mcp.grants import DynamoGrantStore
    from stepwise.mcp.oauth import OAuthFailure
    from stepwise.triggers import gmail

    query = router.current_event.query_string_parameters or {}
    state, code = query.get("state"), query.get("code")
    if not state:
        return _page(400, "Not connected", "This link has no state, so it cannot be matched to a request.")
    try:
        record = take(DynamoGrantStore(), state)
        if not gmail.is_gmail_state(record):
            return _page(403, "Not connected", "This authorization was not started by a gmail trigger.")
        if not code:
            reason = query.get("error_description") or query.get("error") or "no code was returned"
            return _page(400, "Not connected", f"Google did not authorize: {reason}.")
        trigger = gmail.connect(record, code)
    except StateRejected as exc:
        if exc.problem == "unknown":
            return _page(403, "Not connected", "This authorization was not started by Stepwise.")
        used = "was used already" if exc.problem == "used" else "has expired"
        return _page(410, "Not connected", f"This authorization link {used}: start it again.")
    except OAuthFailure as exc:
        return _page(400, "Not connected", exc.message)
    except NotFound:
        return _page(404, "Not connected", "The trigger was deleted before the authorization completed.")
    except Conflict as exc:
        return _page(409, "Not connected", exc.message)
    return _page(
        200, "Connected", f"{trigger.address} starts its trigger from now on. You can close this page."
    )


def _page(status: int, title: str, message: str) -> Response[str]:
    from stepwise.approvals import pages

    return Response(
        status_code=status,
        content_type=HTML,
        body=pages.notice_page(title, message),
        headers=pages.PAGE_HEADERS,
    )
