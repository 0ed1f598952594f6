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

from aws_lambda_powertools import Logger

from stepwise.errors import NotFound, Unprocessable
from stepwise.mcp.models import (
    MCP_TIMEOUT,
    STALE_AFTER,
    TOOLS_CACHE_LIMIT,
    McpServer,
    McpServerCreate,
    McpTool,
)
from stepwise.schema import utcnow
from stepwise.ssrf import AllowHosts, BlockedDestination, check_url
from stepwise.store import mcp as store

logger = Logger(service="stepwise")


def check_destination(url: str, allow_hosts: AllowHosts = None) -> None:
    """Refuse a URL the SSRF guard would block (422), for early feedback; connections are checked again."""
    try:
        check_url(url, allow_hosts)
    except BlockedDestination as exc:
        raise Unprocessable(exc.message, code=exc.code) from None


def register(
    tenant_id: str, agent_id: str, spec: McpServerCreate, *, timeout: float = MCP_TIMEOUT
) -> McpServer:
    """Add the server to the agent with its tools discovered (an enabled one), or the error that stopped
    discovery. 404 for an agent not the tenant's, 409 for a name taken, 422 for a blocked URL or a stdio
    server where the operator does not allow them."""
    if spec.transport == "stdio":
        from stepwise.mcp.stdio import ensure_allowed

        ensure_allowed()
    else:
        assert spec.url is not None  # the model requires one for streamable HTTP
        check_destination(spec.url)
    store.ensure_addable(tenant_id, agent_id, spec.name)  # before the wait, not only after it
    server = McpServer(**spec.model_dump(), created_at=utcnow())
    if server.enabled:
        server = discovered(server, timeout=timeout)
    return store.add_server(tenant_id, agent_id, server)


def refresh(tenant_id: str, agent_id: str, name: str, *, timeout: float = MCP_TIMEOUT) -> McpServer:
    """Discover the server's tools again now (even a disabled one: it was asked for by name)."""
    server = store.get_server(tenant_id, agent_id, name)
    saved = store.save_discoveries(tenant_id, agent_id, [discovered(server, timeout=timeout)])
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
        fresh = list(pool.map(lambda s: discovered(s, timeout=timeout), stale))
    return store.save_discoveries(tenant_id, agent_id, fresh)


def discovered(server: McpServer, *, timeout: float = MCP_TIMEOUT) -> McpServer:
    """`server` with the outcome of a discovery now: its tools, or no tools and the error (fail-open)."""
    from stepwise.mcp.client import McpFailure, discover  # the SDK loads only where MCP is used

    try:
        tools = discover(server, timeout=timeout)
    except McpFailure as exc:
        logger.warning("MCP discovery failed", server=server.name, code=exc.code, error=exc.message)
        return server.model_copy(update={"tools": [], "last_error": exc.message})
    kept, error = _within_limit(tools)
    return server.model_copy(update={"tools": kept, "discovered_at": utcnow(), "last_error": error})


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
