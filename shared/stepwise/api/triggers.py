"""/v1/triggers: create, list, read, change, delete triggers, rotate a webhook trigger's secret, and
list what reached it (stepwise.triggers); the gmail and outlook triggers' public OAuth start links and
callbacks (stepwise.api.oauth_flow). The public intake is stepwise.api.trigger_intake."""

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise.api import oauth_flow
from stepwise.api.auth import PUBLIC
from stepwise.api.context import tenant
from stepwise.api.params import TriggerId
from stepwise.api.responses import json_response, responses
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
OUTLOOK_CALLBACK = "/v1/integrations/outlook/oauth/callback"
GMAIL_START = "/v1/integrations/gmail/oauth/start"
OUTLOOK_START = "/v1/integrations/outlook/oauth/start"


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
    created = service.create(tenant(router), body, public_url=_public_url())
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


def _callback_responses() -> dict[int, Any]:
    return {
        **responses(200, "A page: connected", 413, public=True, content=oauth_flow.PAGE),
        **{
            status: {"description": f"A page: {what}", "content": oauth_flow.PAGE}
            for status, what in (
                (400, "denied, or the code refused"),
                (
                    403,
                    "not a state Stepwise issued, or not the browser that opened its start link "
                    f"(`{oauth_flow.NOT_BOUND}`)",
                ),
                (404, "the trigger was deleted"),
                (409, "the mailbox is another trigger's"),
                (410, "the state was used already or expired"),
            )
        },
    }


_START = (
    "Public: the `authorization_url` creating the trigger answers. Opens once (`flow`, valid 10 minutes): "
    "it gives the browser a short-lived HttpOnly cookie that binds the authorization to it, and redirects "
    f"(302) to {{provider}}. Opened again: 410 `{oauth_flow.OPENED}`, and the first browser stays the one "
    "that can complete it. An HTML page for any refusal: 400 no flow, 403 a flow we never issued, 410 "
    "opened already or expired."
)


@router.get(
    GMAIL_START,
    summary="Start a gmail trigger's authorization",
    description=_START.format(provider="Google"),
    responses=oauth_flow.start_responses(),
    tags=TRIGGERS,
    openapi_extensions=PUBLIC,
)
def gmail_oauth_start() -> Response[str]:
    return oauth_flow.start(router.current_event.query_string_parameters or {})


@router.get(
    OUTLOOK_START,
    summary="Start an outlook trigger's authorization",
    description=_START.format(provider="Microsoft"),
    responses=oauth_flow.start_responses(),
    tags=TRIGGERS,
    openapi_extensions=PUBLIC,
)
def outlook_oauth_start() -> Response[str]:
    return oauth_flow.start(router.current_event.query_string_parameters or {})


@router.get(
    GMAIL_CALLBACK,
    summary="OAuth callback of gmail triggers",
    description="Public: where Google sends the person back with `code` and `state` (single use, valid 10 "
    "minutes; the MCP OAuth store's), spent only with the cookie its start link set in the same browser, "
    "which this answer clears. The code is exchanged, the mailbox read and watched. An HTML page: 200 "
    "connected, 400 denied or refused, 403 a state we never issued or a browser without the flow's cookie "
    f"(`{oauth_flow.NOT_BOUND}`: nothing is stored), 409 a mailbox another trigger has, 410 a state used "
    "or expired.",
    responses=_callback_responses(),
    tags=TRIGGERS,
    openapi_extensions=PUBLIC,
)
def gmail_oauth_callback() -> Response[str]:
    return _callback("gmail")


@router.get(
    OUTLOOK_CALLBACK,
    summary="OAuth callback of outlook triggers",
    description="Public: where Microsoft sends the person back with `code` and `state`. The code is "
    "exchanged, the mailbox read, and a change-notification subscription made on its Inbox. An HTML page, "
    "as for gmail.",
    responses=_callback_responses(),
    tags=TRIGGERS,
    openapi_extensions=PUBLIC,
)
def outlook_oauth_callback() -> Response[str]:
    return _callback("outlook")


def _callback(kind: str) -> Response[str]:
    from stepwise.mcp.authorization import StateRejected, take
    from stepwise.mcp.grants import DynamoGrantStore
    from stepwise.mcp.oauth import OAuthFailure
    from stepwise.triggers import gmail, outlook

    query = router.current_event.query_string_parameters or {}
    state, code = query.get("state"), query.get("code")
    if not state:
        return oauth_flow.page(400, "This link has no state, so it cannot be matched to a request.")
    cookies = oauth_flow.cleared(
        _public_url() + (GMAIL_CALLBACK if kind == "gmail" else OUTLOOK_CALLBACK), state
    )
    nonce = oauth_flow.nonce(router.current_event.cookies, state)

    def page(status: int, message: str, **more: Any) -> Response[str]:
        return oauth_flow.page(status, message, cookies=cookies, **more)

    try:
        record = take(DynamoGrantStore(), state, nonce)
        if not gmail.is_state_of(record, kind):
            return page(403, f"This authorization was not started by a {kind} trigger.")
        if not code:
            reason = query.get("error_description") or query.get("error") or "no code was returned"
            return page(400, f"The mailbox was not authorized: {reason}.")
        if kind == "gmail":
            trigger = gmail.connect(record, code)
        else:
            trigger = outlook.connect(record, code, _public_url())
    except StateRejected as exc:
        if exc.problem == "unknown":
            return page(403, "This authorization was not started by Stepwise.")
        if exc.problem == "unbound":
            return oauth_flow.not_bound(cookies)
        used = "was used already" if exc.problem == "used" else "has expired"
        return page(410, f"This authorization link {used}: start it again.")
    except OAuthFailure as exc:
        return page(400, exc.message)
    except NotFound:
        return page(404, "The trigger was deleted before the authorization completed.")
    except Conflict as exc:
        return page(409, exc.message)
    message = f"{trigger.address} starts its trigger from now on. You can close this page."
    return page(200, message, title="Connected")
