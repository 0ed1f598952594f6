"""The one SSRF guard for every outbound request to a URL that a tenant or a model chose.

Custom HTTP tools, the http_request builtin, http hooks, MCP servers and model base URLs all let
somebody else pick where our Lambda connects. From inside AWS that can reach the instance metadata
service, the Lambda runtime API on 127.0.0.1:9001, VPC peers and on-premises networks, so a destination
is allowed only when every address it resolves to is public.

The authoritative check runs where the socket is opened (`GuardedBackend.connect_tcp`): the name is
resolved once, every answer is checked, and the connection goes to an address that was checked. A name
that answers with a public address to an early check and a private one to the connect (DNS rebinding)
therefore cannot slip through, and each redirect hop opens its own connection through the same check.
`check_url` repeats the checks for early feedback when a URL is registered; it is advisory only.

A guarded client is also bounded (stepwise.net.outbound): one wall-clock deadline over its whole exchange,
DNS, connect, TLS, redirects and body included, and responses decoded in bounded pieces up to a byte
limit, with stacked or unoffered content-codings refused.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
import ssl
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import httpcore
import httpx

from stepwise.core import config
from stepwise.net.outbound import (
    ACCEPT_ENCODING,
    RESPONSE_LIMIT,
    BoundedBody,
    Deadline,
    DeadlineExceeded,
    DeadlineStream,
    OutboundRefused,
    bounded,
)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Sequence[str]]  # (host, port) -> IP address strings

ALLOW_HOSTS_ENV = config.Guards.variable("allow_hosts")
ALLOWED_SCHEMES = frozenset({"http", "https"})
REDIRECT_BODY_LIMIT = 64 * 1024  # bytes of a redirect's body read before it is discarded

# Cloud metadata names. They resolve to blocked addresses anyway; refusing the names also covers a
# resolver (a VPC's, a container's) that answers something unexpected for them.
BLOCKED_HOSTNAMES = frozenset(
    {"metadata", "metadata.google.internal", "metadata.goog", "instance-data", "instance-data.ec2.internal"}
)

_BLOCKED_NETWORKS: tuple[IPNetwork, ...] = tuple(
    ipaddress.ip_network(network)
    for network in (
        "0.0.0.0/8",  # "this network": connecting to 0.0.0.0 reaches the local host on Linux
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",  # carrier-grade NAT
        "127.0.0.0/8",
        "169.254.0.0/16",  # link-local: EC2 metadata 169.254.169.254, ECS task metadata 169.254.170.2
        "192.0.0.0/24",
        "198.18.0.0/15",
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, and the broadcast address
        "::/128",
        "::1/128",
        "64:ff9b:1::/48",  # local-use NAT64 (RFC 8215)
        "100::/64",
        "fc00::/7",  # unique local, including EC2's IPv6 metadata at fd00:ec2::254
        "fe80::/10",
        "fec0::/10",
        "ff00::/8",
    )
)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# Digits, hex digits, "x" and dots: the only text the legacy IPv4 forms use. inet_aton must only see
# such text, because glibc's stops at the first space and would accept "1.2.3.4 anything".
_LEGACY_IPV4 = re.compile(r"[0-9a-fx.]+", re.IGNORECASE)
# Each of these would route requests around the guarded transport.
_BYPASSING_CLIENT_ARGS = frozenset({"transport", "mounts", "proxy", "trust_env", "app"})


class BlockedDestination(OutboundRefused):
    """A request the SSRF guard refuses; `code` is what a tool result or an API error shows."""

    code = "blocked_destination"

    def __init__(self, message: str, *, host: str | None = None) -> None:
        super().__init__(message)
        self.host = host

    @classmethod
    def internal(cls, host: str) -> BlockedDestination:
        # Deliberately silent about which address the name resolved to: that is the internal detail
        # a probing model would want.
        return cls(
            f"destination {host!r} is not allowed: it is a loopback, private, link-local or otherwise "
            f"internal address ({ALLOW_HOSTS_ENV} can exempt it)",
            host=host,
        )


# --- Addresses ------------------------------------------------------------------------------------


def parse_ip(host: str) -> IPAddress | None:
    """The address `host` denotes literally, or None for a name.

    Besides what `ipaddress` parses, this accepts the legacy IPv4 forms that inet_aton, and so
    getaddrinfo and every C library, read as addresses: 2130706433, 0x7f000001, 0x7f.0.0.1, 0177.0.0.1
    and 127.1 all mean 127.0.0.1.
    """
    candidate = host.strip("[]").rstrip(".")
    try:
        return ipaddress.ip_address(candidate)
    except ValueError:
        pass
    if _LEGACY_IPV4.fullmatch(candidate):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(candidate))
        except OSError:
            return None
    return None


def is_blocked_address(address: IPAddress) -> bool:
    """Whether `address` is anything but a public unicast address, looking inside IPv6 wrappers of IPv4."""
    if isinstance(address, ipaddress.IPv6Address):
        # These forms carry an IPv4 address that the kernel or a translator turns into a real IPv4
        # destination, so the embedded address is what decides.
        if address.ipv4_mapped is not None:
            return is_blocked_address(address.ipv4_mapped)
        if address in _NAT64:
            return is_blocked_address(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        if address.sixtofour is not None and is_blocked_address(address.sixtofour):
            return True
        # Teredo (2001::/32) carries (server, client); the registry below blocks all of 2001::/23 anyway.
        if address.teredo is not None and any(is_blocked_address(inner) for inner in address.teredo):
            return True
    if any(address in network for network in _BLOCKED_NETWORKS):
        return True
    # The standard library's registry catches the rest (documentation, benchmarking, IETF ranges).
    return not address.is_global or address.is_multicast or address.is_reserved


# --- The allow list -------------------------------------------------------------------------------


@dataclass(frozen=True)
class AllowList:
    """Hostnames and networks exempt from the guard: loopback peers in tests, known internal services."""

    hostnames: frozenset[str] = frozenset()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str] | str) -> AllowList:
        """Read hostnames and CIDRs (a bare address is a /32 or /128); a comma-separated string works too."""
        if isinstance(entries, str):
            entries = entries.split(",")
        hostnames: set[str] = set()
        networks: list[IPNetwork] = []
        for raw in entries:
            entry = raw.strip()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            if any(char in entry for char in "/:@ "):
                # Fail loudly: a mistyped entry that silently exempts nothing is hard to debug.
                raise ValueError(f"{ALLOW_HOSTS_ENV} entry {entry!r} is neither a hostname nor a CIDR")
            hostnames.add(_normal_name(entry))
        return cls(hostnames=frozenset(hostnames), networks=tuple(networks))

    def allows_name(self, host: str) -> bool:
        return _normal_name(host) in self.hostnames

    def allows_address(self, address: IPAddress) -> bool:
        candidates: list[IPAddress] = [address]
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            candidates.append(address.ipv4_mapped)
        return any(candidate in network for candidate in candidates for network in self.networks)


AllowHosts: TypeAlias = AllowList | Iterable[str] | str | None


def allow_hosts_from_env() -> AllowList:
    """The allow list in `STEPWISE_ALLOW_HOSTS`, read when called so tests and callers see changes."""
    return AllowList.parse(config.guards().allow_hosts)


def as_allow_list(allow_hosts: AllowHosts) -> AllowList:
    """None means the environment's allow list; anything else is used as given (empty exempts nothing)."""
    if allow_hosts is None:
        return allow_hosts_from_env()
    if isinstance(allow_hosts, AllowList):
        return allow_hosts
    return AllowList.parse(allow_hosts)


def _normal_name(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


# --- The checks -----------------------------------------------------------------------------------


def system_resolver(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for `host`, in its order of preference."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def resolve_checked(
    host: str, port: int, allow: AllowList, resolver: Resolver = system_resolver
) -> list[IPAddress]:
    """Resolve `host` once and return its addresses, or raise BlockedDestination if any one is blocked.

    A resolver failure propagates as the resolver's OSError (socket.gaierror for the system one).
    """
    name = _normal_name(host)
    exempt = allow.allows_name(name)
    if not exempt and name in BLOCKED_HOSTNAMES:
        raise BlockedDestination.internal(host)
    literal = parse_ip(name)
    if literal is not None:
        addresses = [literal]
    else:
        # The host as given, not normalised: a trailing dot changes how the resolver searches.
        addresses = list(dict.fromkeys(ipaddress.ip_address(answer) for answer in resolver(host, port)))
    if not addresses:
        raise socket.gaierror(f"no addresses for {host!r}")
    if not exempt:
        # Any blocked answer blocks the name: connecting would otherwise depend on which answer wins.
        for address in addresses:
            if is_blocked_address(address) and not allow.allows_address(address):
                raise BlockedDestination.internal(host)
    return addresses


def check_scheme(url: httpx.URL) -> None:
    """Refuse anything but http(s), and URLs carrying credentials."""
    if url.scheme not in ALLOWED_SCHEMES:
        raise BlockedDestination(f"scheme {url.scheme!r} is not allowed: only http and https", host=url.host)
    # Userinfo is rejected, not stripped: httpx would turn it into an Authorization header sent to
    # whoever the URL points at, and "user@host" is the classic trick for making a URL read as
    # another host to a human or a different parser. Credentials belong in headers.
    if url.userinfo:
        raise BlockedDestination("URLs with credentials (user:password@) are not allowed", host=url.host)


def check_url(
    url: str | httpx.URL,
    allow_hosts: AllowHosts = None,
    *,
    resolver: Resolver = system_resolver,
) -> None:
    """Raise BlockedDestination if `url` may not be requested; for early feedback when a URL is registered.

    Advisory: DNS answers change, so the connect-time check in `GuardedBackend` is the one that counts,
    and a name that does not resolve now passes here and is judged when it is connected to.
    """
    try:
        # The same parser the request will go through, so the check and the request cannot disagree.
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise BlockedDestination(f"not a valid URL: {exc}") from None
    check_scheme(parsed)
    if not parsed.host:
        raise BlockedDestination("the URL has no host")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        resolve_checked(parsed.host, port, as_allow_list(allow_hosts), resolver)
    except OSError:
        return


# --- The connect-time guard -----------------------------------------------------------------------


class GuardedBackend(httpcore.SyncBackend):
    """An httpcore network backend that connects only to addresses the guard has checked.

    httpcore passes the origin's host to `connect_tcp` and takes the TLS server name from the origin
    too (`server_hostname` in httpcore 1.0's `_sync/connection.py`), not from the socket, so connecting
    to the checked IP keeps SNI, certificate verification and the Host header on the original name.
    `inner`, when given, is handed the checked address instead of a real socket (tests pass a fake).
    With a `deadline`, resolving, connecting and every later read and write on the socket end by it.
    """

    def __init__(
        self,
        allow_hosts: AllowHosts = None,
        *,
        resolver: Resolver = system_resolver,
        inner: httpcore.NetworkBackend | None = None,
        deadline: Deadline | None = None,
    ) -> None:
        self._allow = as_allow_list(allow_hosts)
        self._resolver = resolver
        self._inner = inner
        self._deadline = deadline

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        try:
            addresses = self._resolve(host, port)
        except DeadlineExceeded as exc:
            raise httpcore.ConnectTimeout(str(exc)) from None
        except OSError as exc:
            raise httpcore.ConnectError(f"cannot resolve {host!r}: {exc}") from exc
        # Like socket.create_connection, try each address in turn, but only the ones checked above:
        # handing the name back to the socket layer would resolve it again.
        error: Exception | None = None
        for address in addresses:
            try:
                stream = self._open(str(address), port, self._bound(timeout), local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                error = exc
                continue
            return stream if self._deadline is None else DeadlineStream(stream, self._deadline)
        assert error is not None
        raise error

    def _resolve(self, host: str, port: int) -> list[IPAddress]:
        def check() -> list[IPAddress]:
            return resolve_checked(host, port, self._allow, self._resolver)

        # getaddrinfo has no timeout of its own, and a name server the peer runs can take its time.
        return check() if self._deadline is None else self._deadline.run(check)

    def _bound(self, timeout: float | None) -> float | None:
        if self._deadline is None:
            return timeout
        try:
            return self._deadline.bound(timeout)
        except DeadlineExceeded as exc:
            raise httpcore.ConnectTimeout(str(exc)) from None

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        raise BlockedDestination("unix sockets are not allowed")

    def _open(
        self,
        address: str,
        port: int,
        timeout: float | None,
        local_address: str | None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None,
    ) -> httpcore.NetworkStream:
        if self._inner is not None:
            return self._inner.connect_tcp(address, port, timeout, local_address, socket_options)
        return super().connect_tcp(address, port, timeout, local_address, socket_options)


class GuardedTransport(httpx.HTTPTransport):
    """httpx's transport with its connection pool built on a GuardedBackend, decoding bodies itself.

    It offers only the content-codings `outbound.BoundedBody` inflates in bounded pieces, and hands httpx
    the decoded body without its Content-Encoding, so httpx's own (unbounded) decoders never run.
    """

    def __init__(
        self,
        backend: GuardedBackend,
        *,
        verify: ssl.SSLContext | bool = True,
        response_limit: int = RESPONSE_LIMIT,
    ) -> None:
        self._response_limit = response_limit
        ssl_context = _default_ssl_context() if verify is True else httpx.create_ssl_context(verify=verify)
        limits = httpx.Limits()
        super().__init__(verify=ssl_context, limits=limits, trust_env=False)
        # httpx 0.28 has no argument for an httpcore network backend, so replace the pool it built
        # (`HTTPTransport._pool`) with one that has it, using the settings HTTPTransport passes.
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=backend,
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        # Whatever the caller (or a model writing headers) asked for: only what we can decode safely.
        request.headers["Accept-Encoding"] = ACCEPT_ENCODING
        response = super().handle_request(request)
        try:
            body = BoundedBody.for_headers(response.headers, self._response_limit)
        except OutboundRefused:
            response.close()
            raise
        assert isinstance(response.stream, httpx.SyncByteStream)
        response.stream = _DecodedStream(response.stream, body)
        return response


class _DecodedStream(httpx.SyncByteStream):
    def __init__(self, raw: httpx.SyncByteStream, body: BoundedBody) -> None:
        self._raw = raw
        self._body = body

    def __iter__(self) -> Iterator[bytes]:
        yield from bounded(self._raw, self._body)

    def close(self) -> None:
        self._raw.close()


@functools.cache
def _default_ssl_context() -> ssl.SSLContext:
    # Loading the CA bundle takes ~15 ms, more than a whole request to a nearby endpoint; share one.
    return httpx.create_ssl_context()


def guarded_client(
    *,
    timeout: float,
    max_response_bytes: int = RESPONSE_LIMIT,
    allow_hosts: AllowHosts = None,
    follow_redirects: bool = True,
    max_redirects: int = 5,
    resolver: Resolver = system_resolver,
    connector: httpcore.NetworkBackend | None = None,
    **kw: Any,
) -> httpx.Client:
    """An httpx.Client for one exchange, whose every connection, redirects included, goes through the
    SSRF guard.

    `timeout` bounds the whole exchange in wall-clock time, from this call on: the client is built per
    exchange, not kept. A body decoding to more than `max_response_bytes` raises
    outbound.ResponseTooLarge, a stacked or unoffered content-coding outbound.UnsupportedEncoding (both
    OutboundRefused, like BlockedDestination). `allow_hosts` None reads STEPWISE_ALLOW_HOSTS. `resolver`
    and `connector` are for tests (fake DNS, no sockets). Other keyword arguments go to httpx.Client,
    except those that would bypass the guard.
    """
    bypassing = _BYPASSING_CLIENT_ARGS & kw.keys()
    if bypassing:
        raise TypeError(f"guarded_client does not take {', '.join(sorted(bypassing))}: they bypass the guard")
    verify = kw.pop("verify", True)
    hooks = dict(kw.pop("event_hooks", None) or {})
    hooks["request"] = [_check_request, *hooks.get("request", [])]
    hooks["response"] = [_cap_redirect_body, *hooks.get("response", [])]
    backend = GuardedBackend(allow_hosts, resolver=resolver, inner=connector, deadline=Deadline(timeout))
    return httpx.Client(
        transport=GuardedTransport(backend, verify=verify, response_limit=max_response_bytes),
        timeout=timeout,
        follow_redirects=follow_redirects,
        max_redirects=max_redirects,
        trust_env=False,  # no proxies, .netrc or other routes from the environment
        event_hooks=hooks,
        **kw,
    )


def _check_request(request: httpx.Request) -> None:
    # Runs for the first request and again for each redirect httpx follows.
    check_scheme(request.url)


def _cap_redirect_body(response: httpx.Response) -> None:
    # httpx reads a redirect's whole body into memory before following it; a hostile server could send
    # gigabytes. The body is discarded anyway, so read at most REDIRECT_BODY_LIMIT bytes of it.
    if response.has_redirect_location and isinstance(response.stream, httpx.SyncByteStream):
        response.stream = _CappedStream(response.stream, REDIRECT_BODY_LIMIT)


class _CappedStream(httpx.SyncByteStream):
    def __init__(self, stream: httpx.SyncByteStream, limit: int) -> None:
        self._stream = stream
        self._limit = limit

    def __iter__(self) -> Iterator[bytes]:
        remaining = self._limit
        for chunk in self._stream:
            yield chunk[:remaining]
            remaining -= len(chunk)
            if remaining <= 0:
                return

    def close(self) -> None:
        self._stream.close()
