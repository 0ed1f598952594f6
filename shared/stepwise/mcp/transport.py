"""The HTTP client the MCP SDK talks through, with every connection checked by the SSRF guard.

The `mcp` SDK (2.x) is async and brings its own HTTP stack, httpx2 on httpcore2, so the sync
`ssrf.GuardedBackend` cannot serve it. `GuardedAsyncBackend` applies the same rule, `ssrf.resolve_checked`,
where httpcore2 opens the socket: the name is resolved once, every answer is checked, and the socket goes to
an address that was checked, so DNS rebinding and redirects (the SDK follows only same-origin ones, each
a new connection through this backend) cannot reach an internal address.

Responses are decoded here in bounded pieces up to a byte limit, with stacked codings refused, by the same
`outbound.BoundedBody` as the sync clients; the deadline over a whole operation is the caller's
`anyio.fail_after` (stepwise.mcp.client), which cancels whatever read or connect is pending.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

import anyio
import anyio.to_thread
import httpcore2
import httpx
import httpx2

from stepwise.net.outbound import ACCEPT_ENCODING, RESPONSE_LIMIT, BoundedBody, OutboundRefused
from stepwise.net.ssrf import (
    AllowHosts,
    BlockedDestination,
    Resolver,
    as_allow_list,
    check_scheme,
    resolve_checked,
    system_resolver,
)


class GuardedAsyncBackend(httpcore2.AsyncNetworkBackend):
    """An httpcore2 network backend that connects only to addresses the SSRF guard has checked.

    httpcore2 takes the TLS server name from the origin, not the socket, so connecting to the checked IP
    keeps SNI and certificate verification on the original name.
    """

    def __init__(self, allow_hosts: AllowHosts = None, *, resolver: Resolver = system_resolver) -> None:
        self._allow = as_allow_list(allow_hosts)
        self._resolver = resolver
        self._inner = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        # getaddrinfo blocks: resolve in a worker thread, as anyio.connect_tcp itself would. It has no
        # timeout of its own, so the operation's deadline (a cancel scope) abandons the thread rather
        # than waiting for a name server the peer may run.
        check = functools.partial(resolve_checked, host, port, self._allow, self._resolver)
        try:
            addresses = await anyio.to_thread.run_sync(check, abandon_on_cancel=True)
        except OSError as exc:
            raise httpcore2.ConnectError(f"cannot resolve {host!r}: {exc}") from exc
        error: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                error = exc
        assert error is not None
        raise error

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise BlockedDestination("unix sockets are not allowed")

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


class _DecodingTransport(httpx2.AsyncHTTPTransport):
    """httpx2's transport, decoding bodies itself in bounded pieces (see stepwise.net.outbound)."""

    def __init__(self, *, verify: ssl.SSLContext, response_limit: int) -> None:
        super().__init__(verify=verify, trust_env=False)
        self._response_limit = response_limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.headers["Accept-Encoding"] = ACCEPT_ENCODING
        response = await super().handle_async_request(request)
        try:
            body = BoundedBody.for_headers(response.headers, self._response_limit)
        except OutboundRefused:
            await response.aclose()
            raise
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        response.stream = _DecodedStream(response.stream, body)
        return response


class _DecodedStream(httpx2.AsyncByteStream):
    def __init__(self, raw: httpx2.AsyncByteStream, body: BoundedBody) -> None:
        self._raw = raw
        self._body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._raw:
            for piece in self._body.feed(chunk):
                yield piece
        for piece in self._body.finish():
            yield piece

    async def aclose(self) -> None:
        await self._raw.aclose()


def guarded_async_client(
    *,
    headers: dict[str, str],
    timeout: float,
    max_response_bytes: int = RESPONSE_LIMIT,
    allow_hosts: AllowHosts = None,
    on_response: Callable[[httpx2.Response], Awaitable[None]] | None = None,
) -> httpx2.AsyncClient:
    """An httpx2.AsyncClient for the MCP SDK (`streamable_http_client(url, http_client=...)`): its every
    connection goes through `GuardedAsyncBackend`, and no proxy or other route comes from the environment.

    A body decoding to more than `max_response_bytes` raises outbound.ResponseTooLarge, stacked codings
    outbound.UnsupportedEncoding. `allow_hosts` None reads STEPWISE_ALLOW_HOSTS; `on_response` sees every
    response (the SDK reports a failed HTTP status only as "Server returned an error response").
    """
    ssl_context = _ssl_context()
    transport = _DecodingTransport(verify=ssl_context, response_limit=max_response_bytes)
    limits = httpx2.Limits()
    # httpx2, like httpx, takes no network backend, so replace the pool it built with one that has ours,
    # with the settings AsyncHTTPTransport passes.
    transport._pool = httpcore2.AsyncConnectionPool(
        ssl_context=ssl_context,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=GuardedAsyncBackend(allow_hosts),
    )
    return httpx2.AsyncClient(
        transport=transport,
        headers=headers,
        timeout=timeout,
        trust_env=False,
        event_hooks={"request": [_check_request], "response": [on_response] if on_response else []},
    )


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # Loading the CA bundle costs more than a request to a nearby server; share one.
    return httpx2.create_ssl_context(trust_env=False)


async def _check_request(request: httpx2.Request) -> None:
    # The same rule as ssrf.guarded_client's, for every request and each redirect the SDK follows.
    check_scheme(httpx.URL(str(request.url)))
