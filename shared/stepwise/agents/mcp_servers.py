"""Registering an agent's MCP servers and keeping their cached tools fresh: the only code that discovers.

Discovery happens when a server is registered, when it is refreshed, and for stale servers when
`refresh_if_stale` is called; a run never discovers (it reads the cache, see stepwise.mcp.tools). A server
that cannot be discovered is still registered: its error is recorded, its tools are empty, and runs go
on without it until a refresh succeeds.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import TYPE_CHECKING

from aws_lambda_powertools import Logger

from stepwise.agents import mcp_store as store
from stepwise.core.errors import NotFound, Unprocessable
from stepwise.core.schema import utcnow
from stepwise.mcp.models import (
    MCP_TIMEOUT,
    STALE_AFTER,
    TOOLS_CACHE_LIMIT,
    McpServer,
    McpServerCreate,
    McpServerView,
    McpTool,
    ServerOwner,
    servers_of,
)
from stepwise.net.ssrf import AllowHosts, BlockedDestination, check_url

if TYPE_CHECKING:
    from stepwise.mcp.authorization import GrantStore, PendingAuthorization

logger = Logger(service="stepwise")


def check_destination(url: str, allow_hosts: AllowHosts = None) -> None:
    """Refuse a URL the SSRF guard would block (422), for early feedback; connections are checked again."""
    try:
        check_url(url, allow_hosts)
    except BlockedDestination as exc:
        raise Unprocessable(exc.message, code=exc.code) from None


def register(
    tenant_id: str,
    agent_id: str,
    spec: McpServerCreate,
    *,
    public_url: str = "",
    timeout: float = MCP_TIMEOUT,
) -> tuple[McpServer, str | None]:
    """Add the server to the agent with its tools discovered (an enabled one), or the error that stopped
    discovery; with the authorization URL for a server behind OAuth, whose tools are discovered once a
    person has authorized. 404 for an agent not the tenant's, 409 for a name taken, 422 for a blocked
    URL, a stdio server where the operator does not allow them, or an OAuth server whose authorization
    cannot start (nothing is kept then)."""
    if spec.transport == "stdio":
        from stepwise.mcp.stdio import ensure_allowed

        ensure_allowed()
    else:
        assert spec.url is not None  # the model requires one for streamable HTTP
        check_destination(spec.url)
    store.ensure_addable(tenant_id, agent_id, spec.name)  # before the wait, not only after it
    secret = spec.auth.client_secret if spec.auth else None
    # The secret goes to the encrypted grant only, never into the agent's item.
    auth = spec.auth.model_copy(update={"client_secret": None}) if spec.auth else None
    server = McpServer(
        **spec.model_dump(exclude={"auth", "tools"}), auth=auth, tool_filter=spec.tools, created_at=utcnow()
    )
    if server.auth is not None:
        from stepwise.mcp import authorization  # its SDK models load only where OAuth is used

        url = start_authorization(
            tenant_id, agent_id, server, public_url, client_secret=secret, timeout=timeout
        )
        try:
            return store.add_server(tenant_id, agent_id, server), url
        except Exception:
            authorization.forget(_grants(), tenant_id, agent_id, server)
            raise
    if server.enabled:
        server = discovered(server, timeout=timeout)
    return store.add_server(tenant_id, agent_id, server), None


def start_authorization(
    tenant_id: str,
    agent_id: str,
    server: McpServer,
    public_url: str,
    *,
    client_secret: str | None = None,
    timeout: float = MCP_TIMEOUT,
) -> str:
    """The link a person opens to authorize the server (again); 422 when the flow cannot start."""
    from stepwise.mcp import authorization  # its SDK models load only where OAuth is used
    from stepwise.mcp.oauth import OAuthFailure

    if server.auth is None:
        raise Unprocessable(
            f"MCP server {server.name} is not configured with auth", code="mcp_oauth_not_configured"
        )
    if not public_url:
        raise Unprocessable(
            "the API's public URL is unknown, so no callback can be named", code="mcp_oauth_no_callback"
        )
    try:
        return authorization.authorize(
            _grants(),
            tenant_id,
            agent_id,
            server,
            authorization.callback_url(public_url),
            client_secret=client_secret,
            timeout=timeout,
        )
    except OAuthFailure as exc:
        raise Unprocessable(f"MCP server {server.name}: {exc.message}", code=exc.code) from None


def complete_authorization(
    state: str, nonce: str | None, code: str, *, iss: str | None = None, timeout: float = MCP_TIMEOUT
) -> McpServer:
    """The callback: store the tokens for the server `state` was issued for, then discover its tools.
    `nonce` is the flow's cookie, which binds it to the browser that opened its start link.
    StateRejected for a state that cannot be used (`removed` when its server or agent is gone, `unbound`
    without the cookie); OAuthFailure when the token endpoint refuses."""
    from stepwise.mcp import authorization  # its SDK models load only where OAuth is used

    grants = _grants()
    record = authorization.take(grants, state, nonce)
    # Checked before the code is exchanged, so no tokens are ever written for a server that is gone.
    server = _issued_for(record)
    authorization.exchange(grants, record, code, iss=iss, timeout=timeout)
    try:
        server = _issued_for(record)
    except authorization.StateRejected:
        # Removed while the code was exchanged: drop the tokens just written, as `remove` would have.
        grants.delete(record.tenant_id, record.key)
        raise
    fresh = discovered(server, timeout=timeout, tenant_id=record.tenant_id, agent_id=record.agent_id)
    saved = store.save_discoveries(record.tenant_id, record.agent_id, [fresh])
    return saved[0] if saved else server


def _issued_for(record: PendingAuthorization) -> McpServer:
    """The server an authorization was started for, still registered; StateRejected("removed") when it
    or its agent was removed since, or when it was removed and registered again (another grant)."""
    from stepwise.mcp import authorization

    try:
        server = store.get_server(record.tenant_id, record.agent_id, record.server)
    except NotFound:
        raise authorization.StateRejected("removed") from None
    if server.created_at != record.server_created_at:
        raise authorization.StateRejected("removed")
    return server


def remove(tenant_id: str, agent_id: str, name: str) -> None:
    """Remove the server and, for one behind OAuth, its grant (client and tokens)."""
    server = store.get_server(tenant_id, agent_id, name)
    store.remove_server(tenant_id, agent_id, name)
    if server.auth is not None:
        from stepwise.mcp import authorization  # its SDK models load only where OAuth is used

        authorization.forget(_grants(), tenant_id, agent_id, server)


def forget_agent(tenant_id: str, agent: ServerOwner) -> None:
    """Drop the grants of a deleted agent's servers, so no client or token outlives it."""
    behind_oauth = [s for s in servers_of(agent) if s.auth is not None]
    if not behind_oauth:
        return
    from stepwise.mcp import authorization  # its SDK models load only where OAuth is used

    grants = _grants()
    for server in behind_oauth:
        authorization.forget(grants, tenant_id, agent.agent_id, server)


def needs_authorization(tenant_id: str, agent_id: str, server: McpServer) -> bool:
    if server.auth is None:
        return False
    from stepwise.mcp import authorization  # its SDK models load only where OAuth is used

    return authorization.needs_authorization(_grants(), tenant_id, agent_id, server)


def view(
    tenant_id: str, agent_id: str, server: McpServer, authorization_url: str | None = None
) -> McpServerView:
    """The server as the API shows it, its status from its grant for a server behind OAuth."""
    return server.view(
        needs_authorization=needs_authorization(tenant_id, agent_id, server),
        authorization_url=authorization_url,
    )


def _grants() -> GrantStore:

    from stepwise.mcp.grants import DynamoGrantStore

    return DynamoGrantStore()


def refresh(tenant_id: str, agent_id: str, name: str, *, timeout: float = MCP_TIMEOUT) -> McpServer:
    """Discover the server's tools again now (even a disabled one: it was asked for by name)."""
    server = store.get_server(tenant_id, agent_id, name)
    fresh = discovered(server, timeout=timeout, tenant_id=tenant_id, agent_id=agent_id)
    saved = store.save_discoveries(tenant_id, agent_id, [fresh])
    if not saved:
        raise NotFound(f"MCP server {name} was removed during the refresh", code="mcp_server_not_found")
    return saved[0]


def refresh_if_stale(
    tenant_id: str, agent_id: str, *, max_age: timedelta = STALE_AFTER, timeout: float = MCP_TIMEOUT
) -> list[McpServer]:
    """Rediscover, in parallel, the agent's enabled servers last discovered more than `max_age` ago (or
    never, as after a failure); returns those refreshed. For the API to call off a run's hot path."""
    stale = [s for s in store.list_servers(tenant_id, agent_id) if s.enabled and s.stale(max_age)]
    if not stale:
        return []
    with ThreadPoolExecutor(max_workers=len(stale), thread_name_prefix="mcp-discovery") as pool:
        fresh = list(
            pool.map(lambda s: discovered(s, timeout=timeout, tenant_id=tenant_id, agent_id=agent_id), stale)
        )
    return store.save_discoveries(tenant_id, agent_id, fresh)


def discovered(
    server: McpServer, *, timeout: float = MCP_TIMEOUT, tenant_id: str = "", agent_id: str = ""
) -> McpServer:
    """`server` with the outcome of a discovery now: its tools, or no tools and the error (fail-open).
    A server behind OAuth is discovered with the tenant's tokens for it (`tenant_id`, `agent_id`)."""
    from stepwise.mcp import authorization  # its SDK models load only where OAuth is used
    from stepwise.mcp.client import McpFailure, discover  # the SDK loads only where MCP is used

    token = authorization.token_source(_grants(), tenant_id, agent_id, server) if tenant_id else None
    if server.auth is not None and token is None:
        raise ValueError("an OAuth server is discovered only with its tenant and agent")
    try:
        tools = discover(_opened(server, tenant_id), timeout=timeout, token=token)
    except McpFailure as exc:
        logger.warning("MCP discovery failed", server=server.name, code=exc.code, error=exc.message)
        return server.model_copy(update={"tools": [], "last_error": exc.message})
    kept, error = _within_limit(tools)
    return server.model_copy(update={"tools": kept, "discovered_at": utcnow(), "last_error": error})


def _opened(server: McpServer, tenant_id: str) -> McpServer:
    """The server as it is connected to: its stored (sealed) header secrets opened, for this discovery
    only (what is stored of a discovery is its tools, never these headers). A registration is
    discovered before it is stored, with the headers as given (no tenant then)."""
    if not tenant_id:
        return server
    from stepwise.header_secrets import HeaderUnreadable, open_headers
    from stepwise.mcp.client import UNAVAILABLE, McpFailure

    try:
        return server.model_copy(update={"headers": open_headers(tenant_id, server.headers)})
    except HeaderUnreadable as exc:
        raise McpFailure(UNAVAILABLE, f"MCP server {server.name}: {exc}") from exc


def _within_limit(tools: list[McpTool]) -> tuple[list[McpTool], str | None]:
    """The tools that fit the cache (the agent's item is at most 400 KB), first ones first, one per name."""
    unique = list({tool.name: tool for tool in reversed(tools)}.values())[::-1]
    kept: list[McpTool] = []
    size = 0
    for tool in unique:
        size += len(json.dumps(tool.model_dump(mode="json")).encode())
        if size > TOOLS_CACHE_LIMIT:
            return kept, (
                f"only {len(kept)} of the server's {len(unique)} tools were kept: their names, "
                f"descriptions and schemas are over {TOOLS_CACHE_LIMIT} bytes"
            )
        kept.append(tool)
    return kept, None
