"""Human answers from outside the API: signed approval links and Slack buttons. Both are public
routes: the signed token (or Slack's signature) is the credential, and it names the tenant."""

import time
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.types import (
    OpenAPIResponse,
    OpenAPIResponseContentModel,
    OpenAPIResponseContentSchema,
)
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter
from pydantic import BaseModel

from stepwise.agents import store as agents
from stepwise.api.auth import PUBLIC
from stepwise.api.responses import HTML, json_response, responses
from stepwise.approvals import links, pages
from stepwise.core.config import ConfigError
from stepwise.core.errors import Conflict, Gone, NotFound
from stepwise.core.schema import utcnow
from stepwise.interactions.models import Interaction
from stepwise.runs import answers
from stepwise.store import interactions

router = APIGatewayHttpRouter()
logger = Logger(service="stepwise")
APPROVALS = ["approvals"]

_PAGE: dict[str, OpenAPIResponseContentSchema | OpenAPIResponseContentModel] = {
    HTML: {"schema": {"type": "string"}}
}


def _pages(
    success: str, *outcomes: pages.ResultStatus, errors: tuple[int, ...] = ()
) -> dict[int, OpenAPIResponse]:
    """An HTML route's responses: every answer is a page for the human who followed the link, but
    `errors` (which the page does not catch: an answer too large, the run out of reach) in JSON."""
    documented = responses(
        200,
        success,
        404,
        *errors,
        public=True,
        content=_PAGE,
        described={404: "No such route: the token has characters no link of ours has"},
    )
    by_status: dict[int, list[str]] = {}
    for outcome in outcomes:
        by_status.setdefault(pages.RESULT_HTTP_STATUS[outcome], []).append(outcome.replace("_", " "))
    for status, names in sorted(by_status.items()):
        documented[status] = {"description": f"A page: {' or '.join(names)}", "content": _PAGE}
    return documented


_DECISION_FORM: dict[str, Any] = {
    "required": True,
    "content": {
        "application/x-www-form-urlencoded": {
            "schema": {
                "type": "object",
                "properties": {
                    "decision": {"type": "string", "enum": ["approve", "deny"]},
                    "reason": {"type": "string", "maxLength": pages.MAX_REASON_CHARS},
                },
                "required": ["decision"],
            }
        }
    },
}
_SLACK_FORM: dict[str, Any] = {
    "required": True,
    "content": {
        "application/x-www-form-urlencoded": {
            "schema": {
                "type": "object",
                "properties": {"payload": {"type": "string", "description": "Slack's block_actions JSON"}},
                "required": ["payload"],
            }
        }
    },
}
_SLACK_HEADERS = [
    {"name": name, "in": "header", "required": True, "schema": {"type": "string"}}
    for name in ("X-Slack-Request-Timestamp", "X-Slack-Signature")
]


class SlackReply(BaseModel):
    text: str


def _page(status: pages.ResultStatus, detail: str | None = None, **kwargs: Any) -> Response[str]:
    return Response(
        status_code=pages.RESULT_HTTP_STATUS[status],
        content_type="text/html; charset=utf-8",
        body=pages.result_page(status, detail, **kwargs),
        headers=pages.PAGE_HEADERS,
    )


def _claims(token: str) -> links.LinkClaims | Response[str]:
    try:
        return links.verify(token, links.verifying_secrets(), utcnow())
    except links.ForgedLink as exc:
        logger.warning("forged approval link", extra={"reason": exc.reason})
        return _page("forged")
    except links.ExpiredLink:
        return _page("expired")


def _earlier(interaction: Interaction) -> Response[str] | None:
    """The page for an interaction that can no longer be decided, or None while it is pending."""
    if interaction.status == "answered":
        approved = bool((interaction.answer or {}).get("approved"))
        return _page("already_decided", decided="approved" if approved else "denied")
    if interaction.status != "pending":
        return _page("closed" if interaction.status == "closed" else "expired")
    return None


@router.get(
    "/v1/approvals/<token>",
    summary="Approval page",
    description="Public: the signed token in the link is the credential. Shows the agent, the tool, its "
    "arguments and Approve / Deny buttons; a GET never decides.",
    responses=_pages("The approval page", "already_decided", "expired", "closed", "forged"),
    tags=APPROVALS,
    openapi_extensions=PUBLIC,
)
def approval_page(token: str) -> Response[str]:
    """Shows the request and the buttons. A GET never decides: mail scanners prefetch links."""
    claims = _claims(token)
    if isinstance(claims, Response):
        return claims
    try:
        interaction = interactions.get(claims.tenant_id, claims.interaction_id)
        agent = _asker(claims.tenant_id, interaction.agent_id)
    except NotFound:
        return _page("closed")
    if (page := _earlier(interaction)) is not None:
        return page
    wanted = (router.current_event.query_string_parameters or {}).get("decision")
    return Response(
        status_code=200,
        content_type="text/html; charset=utf-8",
        body=pages.approval_page(
            agent_name=agent.name,
            tool_name=interaction.tool_name,
            arguments=interaction.arguments,
            expires_at=interaction.deadline,
            action_url=f"/v1/approvals/{token}",
            preselected=wanted if wanted in ("approve", "deny") else None,  # type: ignore[arg-type]
        ),
        headers=pages.PAGE_HEADERS,
    )


@router.post(
    "/v1/approvals/<token>",
    summary="Decide an approval",
    description="Public: the form of the approval page. Signed, expiring and single use: a second "
    "decision shows 'already decided' (409), an expired or closed request 410, a forged link 403.",
    responses=_pages(
        "Approved or denied", "error", "already_decided", "expired", "closed", "forged", errors=(413, 503)
    ),
    tags=APPROVALS,
    openapi_extensions={**PUBLIC, "requestBody": _DECISION_FORM},
)
def decide(token: str) -> Response[str]:
    claims = _claims(token)
    if isinstance(claims, Response):
        return claims
    try:
        form = pages.parse_form(router.current_event.decoded_body or "")
    except pages.InvalidForm as exc:
        return _page("error", exc.message)
    approved = form["decision"] == "approve"
    answer = {"approved": approved, "reason": form.get("reason") or None}
    try:
        answers.respond(claims.tenant_id, claims.interaction_id, answer, key=None, by="link")
    except NotFound:
        return _page("closed")
    except Conflict:
        return _earlier(interactions.get(claims.tenant_id, claims.interaction_id)) or _page("already_decided")
    except Gone:
        return _page("expired")
    return _page("approved" if approved else "denied")


@router.post(
    "/v1/integrations/slack/interactions",
    summary="Slack button clicks",
    description="Public: Slack's request signature is the credential (401 when wrong or older than 5 "
    "minutes). 404 when this deployment has no Slack signing secret.",
    responses=responses(
        200,
        "The decision was recorded, or why not",
        400,
        401,
        403,
        404,
        410,
        413,
        503,
        public=True,
        described={401: "Slack's signature is missing, wrong or older than 5 minutes"},
    ),
    tags=APPROVALS,
    openapi_extensions={**PUBLIC, "requestBody": _SLACK_FORM, "parameters": _SLACK_HEADERS},
)
def slack_interaction() -> Response[SlackReply]:
    """A click on an Approve or Deny button. Slack's signature is checked on the raw body first."""
    from stepwise.approvals.channels import slack

    event = router.current_event
    try:
        secret = slack.signing_secret()
    except ConfigError:
        # An unset Slack signing secret disables Slack buttons: anyone can post here, so that is the
        # caller's 404, not a 500 (and an error alarm) per anonymous request.
        logger.warning("a Slack interaction arrived but SLACK_SIGNING_SECRET is not set")
        raise NotFound("Slack interactions are not enabled here", code="slack_not_configured") from None
    raw = event.decoded_body or ""
    slack.verify_signature(
        secret,
        event.headers.get("x-slack-request-timestamp", ""),
        raw.encode(),
        event.headers.get("x-slack-signature", ""),
        time.time(),
    )
    action = slack.parse_interaction(raw)
    claims = links.verify(action.token, links.verifying_secrets(), utcnow())
    interaction = interactions.get(claims.tenant_id, claims.interaction_id)
    answer = {"approved": action.decision == "approve", "reason": None}
    text = "Decision recorded."
    try:
        answers.respond(
            claims.tenant_id, claims.interaction_id, answer, key=None, by=f"slack:{action.user_id}"
        )
    except Conflict:
        text = "This request was already decided."
    except Gone:
        text = "This request has expired."
    else:
        agent = _asker(claims.tenant_id, interaction.agent_id)
        update = slack.decided_message(
            agent_name=agent.name,
            tool_name=interaction.tool_name,
            decision=action.decision,
            user_id=action.user_id,
        )
        if action.response_url:
            try:
                slack.post_webhook(action.response_url, update)
            except slack.ChannelError:
                logger.warning("could not update the Slack message")
    return json_response({"text": text})


def _asker(tenant_id: str, agent_id: str) -> Any:
    """Who asks: the agent, or for a workflow's approval node the workflow (its `name` either way)."""
    if agent_id.startswith("wfl_"):
        from stepwise.workflows import service as workflows

        return workflows.get(tenant_id, agent_id)
    return agents.get(tenant_id, agent_id)
