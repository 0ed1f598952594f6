"""The pytest process talks to loopback only: connecting a socket anywhere else raises LeftLoopback, and
looking up any name but `localhost` fails as it does on a machine without DNS.

tests/conftest.py installs this when pytest loads it, before any test module is imported, so it holds in
every in-process tier (unit, integration, e2e, contract, conformance), the way openai-agents' tests
refuse a real model call. The connect check sits on `socket.socket.connect` and `connect_ex`, where
socket.create_connection, httpcore, PyMySQL, asyncio and botocore all end, and it runs before the
system call: nothing is sent and nothing waits on the network. A name handed to connect itself is
refused unless it is `localhost`: the socket would resolve it out of sight.

A lookup (`socket.getaddrinfo`) would reach the name server, so one of a name is answered with the
resolver's own "no such name" (socket.gaierror, EAI_NONAME): the code under test takes the path it takes
offline, the same on every machine, instead of a refusal it was never written to expect. The SSRF
guard's tests are untouched: they bring their own resolvers (a fake DNS answering public names with
loopback or hostile addresses), and what those answer still meets the connect check. Address literals
and `localhost` resolve as ever.

Out of reach: sockets a C library opens and names it resolves itself (libpq's), and subprocesses (the
e2e stack, Chromium).
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

RULE = "tests only talk to loopback"


class LeftLoopback(RuntimeError):
    """A test tried to connect to a peer that is not on this host's loopback."""


def refusal(family: int, address: Any) -> str | None:
    """Why a `family` socket may not connect to `address`, or None when the connection stays local."""
    if family not in (socket.AF_INET, socket.AF_INET6):
        return None  # a unix socket (or netlink) never leaves the host
    if not isinstance(address, tuple) or len(address) < 2:
        return None  # not an address: the socket's own connect raises the TypeError
    host, port = _text(address[0]), address[1]
    if is_loopback(host):
        return None
    shown = f"[{host}]" if ":" in host else host
    return f"test tried to reach {shown}:{port}; {RULE}"


def is_loopback(host: str) -> bool:
    """Whether `host` is 127.0.0.0/8, ::1 (or IPv4-mapped loopback), or `localhost` (RFC 6761)."""
    if _is_localhost(host):
        return True
    address = _literal(host)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address is not None and address.is_loopback


def is_local_lookup(host: str | bytes | None) -> bool:
    """Whether getaddrinfo answers for `host` without a name server: no host (a listening socket's),
    an address literal, or `localhost`."""
    if host is None or host in ("", b""):
        return True
    name = _text(host)
    return _is_localhost(name) or _literal(name) is not None


def install() -> None:
    """Guard `socket.socket.connect`, `connect_ex` and `socket.getaddrinfo` for the rest of the
    process (once)."""
    if getattr(socket.getaddrinfo, "loopback_only", False):
        return
    connect, connect_ex, getaddrinfo = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo

    def guarded_connect(self: socket.socket, address: Any) -> None:
        _check(self, address)
        connect(self, address)

    def guarded_connect_ex(self: socket.socket, address: Any) -> int:
        _check(self, address)
        return connect_ex(self, address)

    def guarded_getaddrinfo(host: str | bytes | None, *args: Any, **kwargs: Any) -> Any:
        if not is_local_lookup(host):
            raise socket.gaierror(socket.EAI_NONAME, f"test tried to look up {host!r}; {RULE}")
        return getaddrinfo(host, *args, **kwargs)

    guarded_getaddrinfo.loopback_only = True  # type: ignore[attr-defined]
    socket.socket.connect = guarded_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = guarded_connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = guarded_getaddrinfo


def _text(host: str | bytes) -> str:
    return host.decode(errors="replace") if isinstance(host, bytes) else str(host)


def _is_localhost(host: str) -> bool:
    name = host.rstrip(".").lower()
    return name == "localhost" or name.endswith(".localhost")


def _literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])  # an IPv6 zone ("fe80::1%eth0") is no part
    except ValueError:
        return None


def _check(sock: socket.socket, address: Any) -> None:
    reason = refusal(sock.family, address)
    if reason is not None:
        raise LeftLoopback(reason)
