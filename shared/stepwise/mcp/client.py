"""Talking to an MCP server with the official `mcp` SDK: discovery and tools/call over streamable HTTP
(or stdio, where the operator allows it: stepwise.mcp.stdio).

This is the only module that imports the SDK (over half a second of imports), and nothing imports it
at module level: the API loads it on the first registration or refresh, the gate on the first MCP call.
The SDK is async (anyio) and our Lambdas are sync, so each operation runs in its own `anyio.run`:
connect (initialize), do one thing, disconnect, all within one deadline and through the SSRF guard.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import httpx2
import mcp_types
from aws_lambda_powertools import Logger
from jsonschema.exceptions import SchemaError
from mcp.client._transport import TransportStreams
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError
from referencing.exceptions import Unresolvable

from stepwise.mcp.authorization import TokenSource, oauth_client
from stepwise.mcp.models import DESCRIPTION_LIMIT, MCP_TIMEOUT, McpServer, McpTool
from stepwise.mcp.oauth import NEEDS_AUTHORIZATION, OAuthFailure
from stepwise.mcp.transport import guarded_async_client
from stepwise.net.outbound import OutboundRefused
from stepwise.net.ssrf import AllowHosts
from stepwise.tools.base import ToolResult
from stepwise.tools.http_tool import USER_AGENT, schema_problem

# Errors the SDK raises about the connection rather than the call.
_TRANSPORT_CODES = frozenset({mcp_types.REQUEST_TIMEOUT, mcp_types.CONNECTION_CLOSED})
_CHALLENGE_FIELD = re.compile(r'(\w+)="?([^",]*)"?')  # the auth-params of a WWW-Authenticate
MAX_PAGES = 20  # of a tools/list: a server that keeps handing out cursors is cut off here
UNAVAILABLE = "mcp_unavailable"
TOOL_ERROR = "mcp_tool_error"

logger = Logger(service="stepwise")
T = TypeVar("T")


class McpFailure(Exception):
    """An MCP operation failed; `code` is what a tool result shows, `message` what the model reads."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class _Exchange:
    """One operation's HTTP statuses: the SDK turns a failed one into a bare "error response"."""

    server: McpServer
    timeout: float
    allow_hosts: AllowHosts
    token: TokenSource | None = None  # the server's OAuth tokens, for a server behind OAuth
    refreshed: bool = False  # the token was refreshed after a 401: no second try
    failed_statuses: list[int] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)  # a stdio server's, quoted when the exchange fails
    challenge: str | None = None  # the WWW-Authenticate of a 401 or 403

    async def record(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            self.failed_statuses.append(response.status_code)
        if response.status_code in (401, 403):
            self.challenge = response.headers.get("WWW-Authenticate")

    def refused_token(self) -> bool:
        return self.token is not None and 401 in self.failed_statuses

    def insufficient_scope(self) -> str | None:
        """The scope a 403 insufficient_scope asks for (RFC 6750 §3.1), else None."""
        if self.token is None or 403 not in self.failed_statuses or not self.challenge:
            return None
        fields = dict(_CHALLENGE_FIELD.findall(self.challenge))
        if fields.get("error") != "insufficient_scope":
            return None
        return fields.get("scope") or ""


# --- Operations -----------------------------------------------------------------------------------


def discover(
    server: McpServer,
    *,
    timeout: float = MCP_TIMEOUT,
    allow_hosts: AllowHosts = None,
    token: TokenSource | None = None,
) -> list[McpTool]:
    """The server's tools (initialize, then tools/list page by page); raises McpFailure when it cannot.
    `token` is required for a server behind OAuth (stepwise.mcp.authorization.token_source)."""
    exchange = _Exchange(server, timeout, allow_hosts, token)
    listed = _run(exchange, _list_tools)
    return [_tool(t) for t in listed]


def call_tool(
    server: McpServer,
    tool_name: str,
    arguments: dict[str, Any],
    *,
    timeout: float = MCP_TIMEOUT,
    allow_hosts: AllowHosts = None,
    token: TokenSource | None = None,
    on_image: Callable[[str, bytes], str | None] | None = None,
) -> ToolResult:
    """Call `tool_name` (the server's own name for it, not the mcp__… one) with `arguments`.

    Never raises for anything the server does: its `isError` results are `mcp_tool_error`, a server that
    cannot be reached or answers late or with an HTTP error is `mcp_unavailable`, a destination the SSRF
    guard refuses is `blocked_destination`, one behind OAuth without a usable token (or asking for more
    scopes) is `mcp_needs_authorization`. Content blocks come back as their text joined by newlines.
    """
    if not server.enabled:
        return ToolResult.failure(UNAVAILABLE, f"MCP server {server.name} is disabled")
    cached = next((t for t in server.tools if t.name == tool_name), None)
    if cached is not None:
        try:
            problem = schema_problem(cached.input_schema, arguments)
        except (Unresolvable, SchemaError):
            problem = None  # the server validates what we cannot
        if problem is not None:
            return ToolResult.failure("invalid_arguments", problem)
    exchange = _Exchange(server, timeout, allow_hosts, token)

    async def call(session: ClientSession) -> mcp_types.CallToolResult:
        try:
            return await session.call_tool(tool_name, arguments, read_timeout_seconds=timeout)
        except MCPError as exc:
            if exc.code in _TRANSPORT_CODES or exchange.failed_statuses:
                raise
            # A JSON-RPC error answer (unknown tool, invalid params): the model can read it and adapt.
            message = f"{tool_name}: the MCP server refused the call: {exc.message}"
            raise McpFailure(TOOL_ERROR, message) from exc

    try:
        result = _run(exchange, call)
    except McpFailure as exc:
        return ToolResult.failure(exc.code, exc.message)
    text = content_text(result, on_image)
    if result.is_error:
        return ToolResult.failure(TOOL_ERROR, text or f"{tool_name} reported an error")
    return ToolResult(output=text)


def content_text(
    result: mcp_types.CallToolResult, on_image: Callable[[str, bytes], str | None] | None = None
) -> str:
    """A tool result's content blocks as text: text as it is, anything else as a short placeholder;
    an image that `on_image` keeps stands as the text it gives."""
    parts = [_image_text(block, on_image) or _block_text(block) for block in result.content]
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False, sort_keys=True)
    return "\n".join(parts)


def _image_text(
    block: mcp_types.ContentBlock, on_image: Callable[[str, bytes], str | None] | None
) -> str | None:
    if on_image is None or not isinstance(block, mcp_types.ImageContent):
        return None
    try:
        data = base64.b64decode(block.data, validate=True)
    except (binascii.Error, ValueError):
        return None  # described like any image the model cannot be shown
    return on_image(block.mime_type, data)


def _block_text(block: mcp_types.ContentBlock) -> str:
    if isinstance(block, mcp_types.TextContent):
        return block.text
    if isinstance(block, mcp_types.ImageContent):
        return f"[image: {block.mime_type}, {len(block.data) * 3 // 4} bytes]"
    if isinstance(block, mcp_types.AudioContent):
        return f"[audio: {block.mime_type}, {len(block.data) * 3 // 4} bytes]"
    if isinstance(block, mcp_types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, mcp_types.TextResourceContents):
            return resource.text
        return f"[resource: {resource.uri}, {resource.mime_type or 'binary'}]"
    return f"[resource link: {block.uri}]"


# --- Sessions -------------------------------------------------------------------------------------


@asynccontextmanager
async def _session(exchange: _Exchange) -> AsyncIterator[ClientSession]:
    async with (
        _transport(exchange) as (read, write),
        ClientSession(read, write, read_timeout_seconds=exchange.timeout) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def _transport(exchange: _Exchange) -> AsyncIterator[TransportStreams]:
    server = exchange.server
    if server.transport == "stdio":
        from stepwise.mcp.stdio import REFUSED, allowed, stdio_transport

        if not allowed():
            raise McpFailure(UNAVAILABLE, f"MCP server {server.name}: {REFUSED}")
        async with stdio_transport(server, exchange.stderr) as streams:
            yield streams
        return
    assert server.url is not None  # the model requires one for streamable HTTP
    headers = {"User-Agent": USER_AGENT, **server.headers}
    if exchange.token is not None:
        # The token endpoint is another origin: it gets its own client, without the server's headers.
        async with oauth_client(exchange.timeout, exchange.allow_hosts) as http:
            access = await exchange.token.token(http, force=exchange.refreshed)
        headers["Authorization"] = f"Bearer {access}"
    if server.transport == "sse":
        async with _sse(exchange, server.url, headers) as streams:
            yield streams
        return
    client = guarded_async_client(
        headers=headers,
        timeout=exchange.timeout,
        allow_hosts=exchange.allow_hosts,
        on_response=exchange.record,
    )
    async with client, streamable_http_client(server.url, http_client=client) as streams:
        yield streams


@asynccontextmanager
async def _sse(exchange: _Exchange, url: str, headers: dict[str, str]) -> AsyncIterator[TransportStreams]:
    """The 2024-11-05 HTTP+SSE transport (a GET event stream, and POSTs to the endpoint it names),
    through the SDK's client on the same guarded HTTP client as streamable HTTP: the SSRF guard, the
    response limit and the exchange's deadline apply to both connections."""
    from mcp.client.sse import sse_client

    def guarded(
        headers: dict[str, str] | None = None, timeout: Any = None, auth: Any = None
    ) -> Any:  # the SDK's McpHttpClientFactory; its own headers (none today) go on top of ours
        return guarded_async_client(
            headers={**base, **(headers or {})},
            timeout=exchange.timeout,
            allow_hosts=exchange.allow_hosts,
            on_response=exchange.record,
        )

    base = headers
    async with sse_client(
        url,
        timeout=exchange.timeout,
        sse_read_timeout=exchange.timeout,
        httpx_client_factory=guarded,
    ) as streams:
        yield streams


async def _list_tools(session: ClientSession) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _run(exchange: _Exchange, operation: Callable[[ClientSession], Awaitable[T]]) -> T:
    """Connect, run `operation`, disconnect, all within the exchange's timeout; every failure becomes
    an McpFailure. A server behind OAuth that refuses the access token (401) is tried once more with a
    refreshed one; refused again, or asking for more scopes (403 insufficient_scope), its grant is
    marked as needing a person (`mcp_needs_authorization`)."""

    async def main() -> T:
        with anyio.fail_after(exchange.timeout):
            async with _session(exchange) as session:
                return await operation(session)

    try:
        return _once(exchange, main)
    except McpFailure as failure:
        if not (exchange.refused_token() and not exchange.refreshed):
            raise _authorization_failure(exchange, failure) from None
    exchange.refreshed = True
    exchange.failed_statuses.clear()
    try:
        return _once(exchange, main)
    except McpFailure as failure:
        raise _authorization_failure(exchange, failure) from None


def _once(exchange: _Exchange, main: Callable[[], Awaitable[T]]) -> T:
    try:
        return anyio.run(main)
    except Exception as exc:
        failure = _failure(exc, exchange)
        if exchange.stderr:
            failure.message += f" (stderr: {exchange.stderr[-1]})"
        raise failure from exc


def _authorization_failure(exchange: _Exchange, failure: McpFailure) -> McpFailure:
    """`failure`, or `mcp_needs_authorization` when the server refused the token or wants more scopes
    (the grant is then marked so, for the API's status and the next call)."""
    name, token = exchange.server.name, exchange.token
    if token is None:
        return failure
    if exchange.refused_token():
        token.revoked("the server refused its access token, even refreshed")
        return McpFailure(NEEDS_AUTHORIZATION, _needs_authorization(name, "it refused the access token"))
    scope = exchange.insufficient_scope()
    if scope is not None:
        token.revoked(f"the server asks for more scopes: {scope or 'unnamed'}", scope=scope)
        why = f"it asks for the scopes {scope!r}"
        return McpFailure(NEEDS_AUTHORIZATION, _needs_authorization(name, why))
    return failure


def _needs_authorization(name: str, why: str) -> str:
    return (
        f"MCP server {name} needs authorization: {why}. A person must authorize it again "
        f"(POST .../mcp-servers/{name}/authorize gives the link); until then its tools cannot be called"
    )


def _failure(exc: Exception, exchange: _Exchange) -> McpFailure:
    """What went wrong, from the exceptions anyio's task groups bundled."""
    name = exchange.server.name
    leaves = list(_leaves(exc))
    for leaf in leaves:
        if isinstance(leaf, McpFailure):
            return leaf
        if isinstance(leaf, OAuthFailure):
            if leaf.code == NEEDS_AUTHORIZATION:
                return McpFailure(NEEDS_AUTHORIZATION, _needs_authorization(name, leaf.message))
            return McpFailure(leaf.code, f"MCP server {name}: {leaf.message}")
        if isinstance(leaf, OutboundRefused):  # a blocked destination, an answer too large or stacked
            return McpFailure(leaf.code, f"MCP server {name}: {leaf.message}")
    if exchange.failed_statuses:
        return McpFailure(UNAVAILABLE, f"MCP server {name} answered HTTP {exchange.failed_statuses[0]}")
    for leaf in leaves:
        detail = str(leaf) or type(leaf).__name__
        if isinstance(leaf, TimeoutError | httpx2.TimeoutException) or (
            isinstance(leaf, MCPError) and leaf.code == mcp_types.REQUEST_TIMEOUT
        ):
            return McpFailure(UNAVAILABLE, f"MCP server {name} did not answer within {exchange.timeout:g} s")
        if isinstance(leaf, httpx2.HTTPError | OSError):
            return McpFailure(UNAVAILABLE, f"could not reach MCP server {name}: {detail}")
        if isinstance(leaf, MCPError | ValidationError | anyio.EndOfStream | anyio.ClosedResourceError):
            return McpFailure(UNAVAILABLE, f"MCP server {name} failed: {detail}")
    # Nothing we expect from a misbehaving server: keep the trace, but the caller still fails open.
    logger.exception("unexpected failure talking to an MCP server", exc_info=exc)
    first = leaves[0]
    return McpFailure(UNAVAILABLE, f"MCP server {name} failed: {type(first).__name__}: {first}")


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def _tool(tool: mcp_types.Tool) -> McpTool:
    annotations: dict[str, Any] = {}
    if tool.annotations is not None:
        # MCP's own names (readOnlyHint, destructiveHint, openWorldHint…), as MCP documents spell them.
        annotations = tool.annotations.model_dump(mode="json", by_alias=True, exclude_none=True)
    return McpTool(
        name=tool.name,
        description=(tool.description or "")[:DESCRIPTION_LIMIT],
        input_schema=tool.input_schema,
        annotations=annotations,
    )
