"""Stepwise's MCP client as the client command of the official MCP conformance suite.

    python -m tests.conformance.client <server-url>      (MCP_CONFORMANCE_SCENARIO names the scenario)

It runs what Stepwise runs, not the SDK's own client loop: discovery and tools/call from
stepwise.mcp.client (through the SSRF guard, loopback allowed), and for the `auth/*` scenarios the
server-side OAuth flow of stepwise.mcp.authorization with an in-memory grant store. Where Stepwise
hands a person its start link, this command plays the person and their browser: it opens the link as
the start route does (`open_flow`: the flow's cookie and the authorization server's URL), opens that
URL, and the suite's authorization server approves at once and redirects to the callback, whose `code`
and `state` go, with the cookie's nonce, to `take` and `exchange` just as the API's callback does.

Exit status 0 when the scenario ran to its end, 1 when Stepwise's client failed it, 2 for a scenario
Stepwise has no client for (OAuth client credentials: Stepwise acts for a person, with their consent).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx

from stepwise.core.schema import utcnow
from stepwise.mcp.authorization import authorize, exchange, open_flow, take, token_source
from stepwise.mcp.client import McpFailure, call_tool, discover
from stepwise.mcp.models import McpOAuth, McpServer, McpTool
from stepwise.mcp.oauth import NEEDS_AUTHORIZATION, OAuthFailure
from tests.fakes.grant_store import MemoryGrantStore

ALLOW_HOSTS = "localhost,127.0.0.1,::1"  # the suite's servers listen on localhost
REDIRECT_URI = "http://localhost:3000/v1/integrations/mcp/oauth/callback"  # the local stack's callback
TENANT, AGENT = "conformance", "agent"
AUTHORIZATIONS = 3  # a server that keeps asking for more scopes is not followed further
TIMEOUT = 20.0

log = logging.getLogger("conformance-client")


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    url, scenario = sys.argv[-1], os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    log.info("scenario %s against %s", scenario, url)
    try:
        if scenario.startswith("auth/client-credentials"):
            log.error("Stepwise has no client-credentials client: it acts for a person, with consent")
            return 2
        if scenario.startswith("auth/"):
            return authorized_session(url)
        server = McpServer(name="conformance", url=url, created_at=utcnow())
        tools = discover(server, allow_hosts=ALLOW_HOSTS, timeout=TIMEOUT)
        log.info("tools: %s", [t.name for t in tools])
        if scenario == "tools_call":
            return called(server, "add_numbers", {"a": 5, "b": 3})
        if scenario == "sse-retry":
            return called(server, "test_reconnection", {})
        return 0
    except (McpFailure, OAuthFailure) as exc:
        log.error("%s: %s", exc.code, exc.message)
        return 1


def called(server: McpServer, tool: str, arguments: dict[str, Any], **extra: Any) -> int:
    result = call_tool(server, tool, arguments, allow_hosts=ALLOW_HOSTS, timeout=TIMEOUT, **extra)
    log.info("%s -> %s", tool, result.error or result.output)
    return 1 if result.error is not None else 0


def authorized_session(url: str) -> int:
    """Authorize as Stepwise does (again when the server asks for more scopes), then list and call."""
    context: dict[str, Any] = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    auth = McpOAuth(type="oauth", client_id=context.get("client_id"))
    server = McpServer(name="conformance", url=url, created_at=utcnow(), auth=auth)
    store = MemoryGrantStore()
    token = token_source(store, TENANT, AGENT, server)
    for attempt in range(1, AUTHORIZATIONS + 1):
        link = authorize(
            store,
            TENANT,
            AGENT,
            server,
            REDIRECT_URI,
            client_secret=context.get("client_secret"),
            allow_hosts=ALLOW_HOSTS,
            timeout=TIMEOUT,
        )
        log.info("authorization %d: %s", attempt, link)
        opened = open_flow(store, parse_qs(urlparse(link).query)["flow"][0])
        params = approve(opened.authorization_url)
        record = take(store, params["state"], opened.cookie.value)
        exchange(store, record, params["code"], iss=params.get("iss"), allow_hosts=ALLOW_HOSTS)
        try:
            tools = discover(server, allow_hosts=ALLOW_HOSTS, timeout=TIMEOUT, token=token)
        except McpFailure as exc:
            if exc.code == NEEDS_AUTHORIZATION:
                continue
            raise
        if not tools:
            return 0
        outcome = first_call(server, tools[0], token)
        if outcome != NEEDS_AUTHORIZATION:
            return 0 if outcome is None else 1
    log.error("still not authorized after %d authorizations", AUTHORIZATIONS)
    return 1


def first_call(server: McpServer, tool: McpTool, token: Any) -> str | None:
    result = call_tool(server, tool.name, {}, allow_hosts=ALLOW_HOSTS, timeout=TIMEOUT, token=token)
    log.info("%s -> %s", tool.name, result.error or result.output)
    if result.error is None or result.error.code == "mcp_tool_error":
        return None  # the server answered the call: authorization worked
    return result.error.code


def approve(link: str) -> dict[str, str]:
    """The person's browser: open the link, read the redirect to the callback."""
    response = httpx.get(link, follow_redirects=False, timeout=TIMEOUT)
    location = response.headers.get("location")
    if response.status_code not in (301, 302, 303, 307, 308) or not location:
        raise McpFailure("mcp_oauth_denied", f"the authorization server answered {response.status_code}")
    params = {k: v[0] for k, v in parse_qs(urlparse(location).query).items()}
    if "code" not in params:
        raise McpFailure("mcp_oauth_denied", f"no code in the redirect: {location}")
    return params


if __name__ == "__main__":
    sys.exit(main())
