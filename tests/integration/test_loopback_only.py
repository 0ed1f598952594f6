"""The root conftest's guard (tests/loopback_only.py) as the tests meet it: a connection beyond loopback
raises before any packet is sent, a name lookup fails as it does offline, and loopback and unix sockets
connect as ever. Here, not in tests/unit, because the unit tier refuses loopback too."""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.loopback_only import LeftLoopback

# TEST-NET-3 and IPv6 documentation addresses, which no real peer holds. The sockets are non-blocking,
# so a connect that got past the guard would end at once (BlockingIOError, ENETUNREACH), never in
# LeftLoopback: no test here waits on the network, even with the guard broken.
BEYOND_LOOPBACK = [
    (socket.AF_INET, ("203.0.113.1", 80), "203.0.113.1:80"),
    (socket.AF_INET, ("10.0.0.5", 5432), "10.0.0.5:5432"),
    (socket.AF_INET, ("example.com", 443), "example.com:443"),  # connect would resolve it itself
    (socket.AF_INET6, ("2001:db8::1", 80, 0, 0), "[2001:db8::1]:80"),
    (socket.AF_INET6, ("::ffff:203.0.113.1", 80, 0, 0), "[::ffff:203.0.113.1]:80"),
]


@pytest.fixture(params=[socket.AF_INET, socket.AF_INET6], ids=["ipv4", "ipv6"])
def listener(request: pytest.FixtureRequest) -> Iterator[socket.socket]:
    family = request.param
    with socket.socket(family, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1" if family == socket.AF_INET else "::1", 0))
        server.listen()
        yield server


@pytest.mark.parametrize(("family", "address", "shown"), BEYOND_LOOPBACK, ids=[c[2] for c in BEYOND_LOOPBACK])
def test_a_connection_beyond_loopback_is_refused_before_it_leaves(
    family: int, address: tuple[object, ...], shown: str
) -> None:
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setblocking(False)

        with pytest.raises(LeftLoopback) as connect:
            sock.connect(address)
        with pytest.raises(LeftLoopback) as connect_ex:
            sock.connect_ex(address)

    message = f"test tried to reach {shown}; tests only talk to loopback"
    assert str(connect.value) == str(connect_ex.value) == message


def test_create_connection_is_refused_too_and_not_retried_elsewhere() -> None:
    # create_connection moves on to the next address after an OSError; LeftLoopback is none.
    with pytest.raises(LeftLoopback, match=r"203\.0\.113\.1:80"):
        socket.create_connection(("203.0.113.1", 80), timeout=0.1)


def test_loopback_connects(listener: socket.socket) -> None:
    host, port = listener.getsockname()[:2]

    with socket.create_connection((host, port), timeout=5) as client:
        accepted, peer = listener.accept()
        accepted.close()

        assert client.getpeername()[:2] == (host, port)
        assert peer[:2] == client.getsockname()[:2]


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "127.42.0.1", "::ffff:127.0.0.1"])
def test_every_loopback_spelling_passes_the_guard(host: str) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # port 1 has no listener: the kernel refusing the connection shows the guard let it through
        assert sock.connect_ex((host, 1)) == errno.ECONNREFUSED


def test_a_unix_socket_connects(tmp_path: Path) -> None:
    path = str(tmp_path / "peer.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        server.listen()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(path)

            assert client.getpeername() == path


@pytest.mark.parametrize("name", ["example.com", "db.stepwise.invalid", b"mcp.example.com"])
def test_a_name_lookup_fails_as_it_does_offline(name: str | bytes) -> None:
    with pytest.raises(socket.gaierror) as lookup:
        socket.getaddrinfo(name, 443, type=socket.SOCK_STREAM)

    assert lookup.value.errno == socket.EAI_NONAME
    assert f"test tried to look up {name!r}; tests only talk to loopback" in str(lookup.value)


@pytest.mark.parametrize(
    ("host", "address"),
    [("localhost", "127.0.0.1"), ("127.0.0.1", "127.0.0.1"), ("203.0.113.1", "203.0.113.1"), ("::1", "::1")],
)
def test_localhost_and_address_literals_resolve_as_ever(host: str, address: str) -> None:
    # a literal never reaches a name server; connecting to a public one is the connect check's to refuse
    answers = socket.getaddrinfo(host, 80, type=socket.SOCK_STREAM)

    assert address in {info[4][0] for info in answers}
