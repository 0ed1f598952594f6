"""/v1/agents/{id}/mcp-servers: register, list, show, delete, refresh and authorize an agent's MCP
servers, and the public start link and callback of an OAuth authorization (stepwise.api.oauth_flow).

Header values are secrets (they usually carry credentials): no response shows them, only their names.
Nor does any response show an OAuth server's tokens or client secret.
"""

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter
from aws_lambda_powertools.shared.cookies import Cookie

from stepwise.agents import mcp_servers as servers
from stepwise.agents import mcp_store as store
from stepwise.api import oauth_flow
from stepwise.api.auth import PUBLIC
from stepwise.api.context import tenant
from stepwise.api.params import AgentId
from stepwise.api.responses import json_response, responses
from stepwise.core import config
from stepwise.core.errors import NotFound
from stepwise.mcp.models import MCP_TIMEOUT, McpServerCreate, McpServerList, McpServerView

router = APIGatewayHttpRouter()
logger = Logger(service="stepwise")
MCP = ["mcp-servers"]

RESPONSE_MARGIN = 5.0  # seconds of the Lambda's time kept for storing and answering after a discovery


def _discovery_timeout() -> float:
    """MCP_TIMEOUT, or less when the Lambda has less time left: a discovery cut short is recorded as an
    error, whereas a Lambda stopped mid-discovery would store nothing and answer nothing."""
    remaining = router.lambda_context.get_remaining_time_in_millis() / 1000
    return max(1.0, min(MCP_TIMEOUT, remaining - RESPONSE_MARGIN))


@router.post(
    "/v1/agents/<agent_id>/mcp-servers",
    summary="Register an MCP server",
    description="Discovers the server's tools right away; a discovery that fails is kept as `last_error`. "
    'Header values are never shown again, only their names. With `auth: {type: "oauth"}` the answer '
    "carries an `authorization_url` for a person to open once; the tools are discovered when the "
    'authorization completes (`status` is `needs_authorization` until then). `transport: "sse"` speaks '
    "the 2024-11-05 HTTP+SSE transport. `tools: {allow?, deny?}` limits the tools the agent declares "
    "(shown back as `tool_filter`; `missing_tools` lists allowlisted names the server does not offer); "
    "`permissions: {<tool>: allow|ask|deny}` is checked before the server's `permission`.",
    responses=responses(201, "The server with the tools found", 400, 404, 409, 413),
    tags=MCP,
)
def register_mcp_server(agent_id: AgentId, body: McpServerCreate) -> Response[McpServerView]:
    tenant_id = tenant(router)
    server, url = servers.register(
        tenant_id, agent_id, body, public_url=_public_url(), timeout=_discovery_timeout()
    )
    return json_response(servers.view(tenant_id, agent_id, server, url).model_dump(mode="json"), 201)


@router.get(
    "/v1/agents/<agent_id>/mcp-servers",
    summary="List an agent's MCP servers",
    responses=responses(200, "The servers", 404),
    tags=MCP,
)
def list_mcp_servers(agent_id: AgentId) -> Response[McpServerList]:
    tenant_id = tenant(router)
    found = store.list_servers(tenant_id, agent_id)
    views = [servers.view(tenant_id, agent_id, s).model_dump(mode="json") for s in found]
    return json_response({"mcp_servers": views})


@router.get(
    "/v1/agents/<agent_id>/mcp-servers/<name>",
    summary="Get an MCP server",
    responses=responses(200, "The server", 404),
    tags=MCP,
)
def get_mcp_server(agent_id: AgentId, name: str) -> Response[McpServerView]:
    tenant_id = tenant(router)
    server = store.get_server(tenant_id, agent_id, name)
    return json_response(servers.view(tenant_id, agent_id, server).model_dump(mode="json"))


@router.delete(
    "/v1/agents/<agent_id>/mcp-servers/<name>",
    summary="Remove an MCP server",
    responses=responses(204, "Removed", 404, 409, 413, content={}),
    tags=MCP,
)
def delete_mcp_server(agent_id: AgentId, name: str) -> Response[None]:
    servers.remove(tenant(router), agent_id, name)
    return Response(status_code=204)


@router.post(
    "/v1/agents/<agent_id>/mcp-servers/<name>/refresh",
    summary="Re-discover an MCP server's tools",
    responses=responses(200, "The server with the tools found, or `last_error`", 404, 409, 413),
    tags=MCP,
)
def refresh_mcp_server(agent_id: AgentId, name: str) -> Response[McpServerView]:
    """Discover the server's tools now; the answer has the tools found, or `last_error`. The server's
    `tool_filter` is kept; `missing_tools` lists allowlisted names it no longer offers."""
    tenant_id = tenant(router)
    server = servers.refresh(tenant_id, agent_id, name, timeout=_discovery_timeout())
    return json_response(servers.view(tenant_id, agent_id, server).model_dump(mode="json"))


@router.post(
    "/v1/agents/<agent_id>/mcp-servers/<name>/authorize",
    summary="Authorize an MCP server behind OAuth (again)",
    description="A new `authorization_url` for a person to open once, e.g. after the server's status "
    "became `needs_authorization`. Tokens that still work are used until the new authorization replaces "
    "them.",
    responses=responses(200, "The server with its `authorization_url`", 404),
    tags=MCP,
)
def authorize_mcp_server(agent_id: AgentId, name: str) -> Response[McpServerView]:
    tenant_id = tenant(router)
    server = store.get_server(tenant_id, agent_id, name)
    url = servers.start_authorization(
        tenant_id, agent_id, server, _public_url(), timeout=_discovery_timeout()
    )
    return json_response(servers.view(tenant_id, agent_id, server, url).model_dump(mode="json"))


def _callback_responses() -> dict[int, OpenAPIResponse]:
    """Every answer is a page for the person the authorization server sent back."""
    documented = responses(200, "A page: connected", 409, 413, public=True, content=oauth_flow.PAGE)
    for status, what in (
        (400, "denied, or the code refused"),
        (
            403,
            "not a state Stepwise issued, or not the browser that opened its start link "
            f"(`{oauth_flow.NOT_BOUND}`)",
        ),
        (410, "the state was used already or expired, or its server was removed"),
    ):
        documented[status] = {"description": f"A page: {what}", "content": oauth_flow.PAGE}
    return documented


@router.get(
    "/v1/integrations/mcp/oauth/start",
    summary="Start an MCP server's OAuth authorization",
    description="Public: the `authorization_url` an MCP server's registration or `/authorize` answers. "
    "Opens once (`flow`, valid 10 minutes): it gives the browser a short-lived HttpOnly cookie that binds "
    "the authorization to it, and redirects (302) to the authorization server. Opened again: 410 "
    f"`{oauth_flow.OPENED}`, and the first browser stays the one that can complete it. An HTML page for "
    f"any refusal: 400 no flow, 403 a flow we never issued, 410 opened already or expired.",
    responses=oauth_flow.start_responses(),
    tags=MCP,
    openapi_extensions=PUBLIC,
)
def mcp_oauth_start() -> Response[str]:
    return oauth_flow.start(router.current_event.query_string_parameters or {})


@router.get(
    "/v1/integrations/mcp/oauth/callback",
    summary="OAuth callback of MCP servers",
    description="Public: where the authorization server sends the person back with `code` and `state`. "
    "The state (single use, valid 10 minutes) names the tenant, agent and server; it is spent only with "
    "the cookie its start link set in the same browser, which this answer clears. The tokens are stored "
    "encrypted and never shown. Answers an HTML page: 200 connected, 400 refused or denied, 403 a state "
    f"we never issued or a browser without the flow's cookie (`{oauth_flow.NOT_BOUND}`: nothing is "
    "stored, and the state stays usable by its own browser), 410 a state used or expired, or one whose "
    "server (or agent) was removed since; no tokens are stored for a server that is gone.",
    responses=_callback_responses(),
    tags=MCP,
    openapi_extensions=PUBLIC,
)
def mcp_oauth_callback() -> Response[str]:
    from stepwise.mcp.authorization import StateRejected, callback_url, take
    from stepwise.mcp.grants import DynamoGrantStore
    from stepwise.mcp.oauth import OAuthFailure

    query = router.current_event.query_string_parameters or {}
    state, code = query.get("state"), query.get("code")
    if not state:
        return oauth_flow.page(400, "This link has no state, so it cannot be matched to a request.")
    cookies = oauth_flow.cleared(callback_url(_public_url()), state)
    nonce = oauth_flow.nonce(router.current_event.cookies, state)
    try:
        if not code:
            # Denied (or failed) at the authorization server: spend the state, keep the server as it is.
            take(DynamoGrantStore(), state, nonce)
            reason = query.get("error_description") or query.get("error") or "no code was returned"
            message = f"The authorization server did not authorize: {reason}."
            return oauth_flow.page(400, message, cookies=cookies)
        server = servers.complete_authorization(
            state, nonce, code, iss=query.get("iss"), timeout=_discovery_timeout()
        )
    except StateRejected as exc:
        logger.warning("MCP OAuth callback refused", extra={"problem": exc.problem})
        if exc.problem == "unknown":
            return oauth_flow.page(403, "This authorization was not started by Stepwise.", cookies=cookies)
        if exc.problem == "unbound":
            return oauth_flow.not_bound(cookies)
        if exc.problem == "removed":
            return _removed(cookies)
        used = "was used already" if exc.problem == "used" else "has expired"
        return oauth_flow.page(410, f"This authorization link {used}: start it again.", cookies=cookies)
    except OAuthFailure as exc:
        return oauth_flow.page(400, exc.message, cookies=cookies)
    except NotFound:  # removed while its tools were being discovered
        return _removed(cookies)
    tools = len(server.tools)
    detail = (
        f"{tools} tool{'s' if tools != 1 else ''} found." if server.last_error is None else server.last_error
    )
    message = f"MCP server {server.name} is authorized. You can close this page."
    return oauth_flow.page(200, message, title="Connected", detail=detail, cookies=cookies)


def _removed(cookies: list[Cookie]) -> Response[str]:
    message = "The MCP server was removed before the authorization completed."
    return oauth_flow.page(410, message, cookies=cookies)


def _public_url() -> str:
    """The API's origin, which the OAuth callback is under: STEPWISE_PUBLIC_URL when set (the local stack,
    a custom domain), else the host this request came to (API Gateway's own domain)."""
    configured = config.links().public_url
    if configured:
        return configured
    domain = router.current_event.request_context.domain_name
    return f"https://{domain}" if domain else ""
