"""What the public OAuth routes of MCP servers and of gmail and outlook triggers share: the start link that
binds an authorization to the browser opening it (stepwise.mcp.authorization.open_flow), the flow's
cookie as the callbacks read and clear it, and the HTML pages all of them answer.

Not a route module: stepwise.api.mcp_servers and stepwise.api.triggers declare the routes
(`/v1/integrations/<kind>/oauth/start` beside each `.../oauth/callback`) and call in here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.shared.cookies import Cookie, SameSite

from stepwise.api.responses import HTML

if TYPE_CHECKING:
    from stepwise.mcp.authorization import FlowCookie

# Stable codes of the binding's refusals, shown on the page (DECISIONS.md: "Binding the OAuth callback").
NOT_BOUND = "oauth_flow_not_bound"  # the callback came without the cookie its start link set
NO_FLOW = "oauth_flow_missing"  # a start link without `flow`
UNKNOWN = "oauth_flow_unknown"  # a flow Stepwise never issued
OPENED = "oauth_flow_opened"  # the start link was opened before (410)
EXPIRED = "oauth_flow_expired"  # the start link's 10 minutes are over (410)

PAGE: dict[str, Any] = {HTML: {"schema": {"type": "string"}}}
logger = Logger(service="stepwise")


def start_responses() -> dict[int, Any]:
    """A start link's answers: a redirect, or a page saying why not (no JSON: a browser opens it)."""
    from stepwise.api.responses import responses

    documented: dict[int, Any] = responses(
        302,
        "To the authorization server (`Location`), with the flow's cookie (`Set-Cookie`)",
        public=True,
        content={},
    )
    for status, what in (
        (400, f"no `flow` (`{NO_FLOW}`)"),
        (403, f"not a flow Stepwise issued (`{UNKNOWN}`)"),
        (410, f"opened already, or its authorization completed (`{OPENED}`), or expired (`{EXPIRED}`)"),
    ):
        documented[status] = {"description": f"A page: {what}", "content": PAGE}
    return documented


def start(query: Mapping[str, str]) -> Response[str]:
    """Open the start link `?flow=` names, once: 302 to the authorization server with the flow's cookie.
    A link opened again is 410 and keeps the first browser's binding."""
    from stepwise.mcp.authorization import StateRejected, open_flow
    from stepwise.mcp.grants import DynamoGrantStore

    flow = query.get("flow")
    if not flow:
        return page(400, "This link has no flow, so it cannot be matched to an authorization.", code=NO_FLOW)
    try:
        opened = open_flow(DynamoGrantStore(), flow)
    except StateRejected as exc:
        # A link opened twice is a link passed on (or a prefetching mail scanner): worth an operator's eye.
        logger.warning("OAuth start link refused", extra={"problem": exc.problem})
        if exc.problem == "unknown":
            return page(403, "This authorization was not started by Stepwise.", code=UNKNOWN)
        if exc.problem == "expired":
            return page(410, "This authorization link has expired: ask for a new one.", code=EXPIRED)
        return page(
            410,
            "This authorization link was opened already: it opens once, in the browser that completes "
            "the authorization. Ask for a new one.",
            code=OPENED,
        )
    return Response(
        status_code=302,
        content_type=HTML,
        body="",
        headers={
            "Location": opened.authorization_url,
            "Cache-Control": "no-store",
            "Referrer-Policy": "no-referrer",
        },
        cookies=[_cookie(opened.cookie)],
    )


def nonce(cookies: Sequence[str], state: str) -> str | None:
    """The nonce the flow's cookie carries in this request (`name=value` items), or None."""
    from stepwise.mcp.authorization import cookie_name

    name = cookie_name(state)
    for item in cookies:
        key, _, value = item.strip().partition("=")
        if key == name and value:
            return value
    return None


def cleared(callback_url: str, state: str) -> list[Cookie]:
    """The Set-Cookie that removes the flow's cookie, for every answer of its callback."""
    from stepwise.mcp.authorization import cleared_cookie

    return [_cookie(cleared_cookie(callback_url, state))]


def not_bound(cookies: list[Cookie]) -> Response[str]:
    return page(
        403,
        "This browser did not open the authorization's link, so the authorization cannot complete here. "
        "Open a new link from Stepwise in the browser you authorize with.",
        code=NOT_BOUND,
        cookies=cookies,
    )


def page(
    status: int,
    message: str,
    *,
    title: str = "Not connected",
    detail: str | None = None,
    code: str | None = None,
    cookies: list[Cookie] | None = None,
) -> Response[str]:
    """An HTML notice for the person's browser; a refusal with a stable `code` shows it."""
    from stepwise.approvals import pages

    return Response(
        status_code=status,
        content_type=HTML,
        body=pages.notice_page(title, message, detail or (f"Error code: {code}" if code else None)),
        headers=pages.PAGE_HEADERS,
        cookies=cookies,
    )


def _cookie(flow: FlowCookie) -> Cookie:
    return Cookie(
        name=flow.name,
        value=flow.value,
        path=flow.path,
        secure=flow.secure,
        http_only=True,
        max_age=flow.max_age,
        same_site=SameSite.LAX_MODE,
    )
