"""The SSRF guard: which destinations it refuses, and that it refuses them before any socket opens.

DNS is a fake resolver and connections go to a fake httpcore backend that records where it was asked to
connect; the real socket functions are replaced by tripwires, so nothing here touches the network.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterable, Iterator
from typing import Any

import httpcore
import httpx
import pytest

from stepwise.net.ssrf import (
    REDIRECT_BODY_LIMIT,
    AllowList,
    BlockedDestination,
    GuardedBackend,
    allow_hosts_from_env,
    check_url,
    guarded_client,
)

PUBLIC_V4 = "93.184.216.34"
PUBLIC_V6 = "2606:2800:220:1:248:1893:25c8:1946"
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


# --- Fakes --------------------------------------------------------------------------------------


class FakeDNS:
    """A resolver with canned answers; a name without one does not resolve. Records every lookup.

    `later` answers every lookup of a name after its first: a rebinding name.
    """

    def __init__(self, answers: dict[str, list[str]], later: dict[str, list[str]] | None = None) -> None:
        self.answers = answers
        self.later = later or {}
        self.lookups: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        seen_before = host in self.lookups
        self.lookups.append(host)
        answer = self.later.get(host) if seen_before and host in self.later else self.answers.get(host)
        if answer is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return list(answer)


class FakeStream(httpcore.NetworkStream):
    """Serves canned response bytes and records what the client wrote and which TLS name it asked for."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self.written = b""
        self.reads = 0
        self.server_hostname: str | None = None

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self.reads += 1
        return next(self._chunks, b"")

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.written += buffer

    def close(self) -> None:
        pass

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        self.server_hostname = server_hostname
        return self

    def get_extra_info(self, info: str) -> Any:
        return None


class FakeConnector(httpcore.NetworkBackend):
    """Stands in for real sockets: records each connect and answers with the response set for the address."""

    def __init__(
        self, responses: dict[str, Iterable[bytes]] | None = None, refuse: Iterable[str] = ()
    ) -> None:
        self.responses = responses or {}
        self.refuse = set(refuse)
        self.connects: list[tuple[str, int]] = []
        self.streams: list[FakeStream] = []

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        self.connects.append((host, port))
        if host in self.refuse:
            raise httpcore.ConnectError("connection refused")
        stream = FakeStream(self.responses.get(host, [OK]))
        self.streams.append(stream)
        return stream


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def tripwire(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"a unit test touched the network: {args!r}")

    monkeypatch.setattr(socket, "getaddrinfo", tripwire)
    monkeypatch.setattr(socket, "create_connection", tripwire)
    monkeypatch.setattr(socket.socket, "connect", tripwire)
    monkeypatch.delenv("STEPWISE_ALLOW_HOSTS", raising=False)


@pytest.fixture
def dns() -> FakeDNS:
    return FakeDNS(
        {
            "example.test": [PUBLIC_V4, PUBLIC_V6],
            "localhost": ["127.0.0.1", "::1"],
            "metadata.google.internal": ["169.254.169.254"],
            "metadata": [PUBLIC_V4],  # a resolver answering oddly for the name must not matter
            "intranet.test": ["10.0.0.5"],
            "mixed.test": [PUBLIC_V4, "192.168.1.10"],
            "v6-private.test": ["fd12:3456::1"],
        }
    )


def get(url: str, dns: FakeDNS, connector: FakeConnector, allow_hosts: Any = ()) -> httpx.Response:
    with guarded_client(timeout=5, allow_hosts=allow_hosts, resolver=dns, connector=connector) as client:
        return client.get(url)


# --- The matrix ---------------------------------------------------------------------------------

BLOCKED_URLS = [
    "http://169.254.169.254/latest/meta-data/",
    "http://169.254.170.2/v2/credentials",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://metadata/",
    "http://Metadata.Google.Internal./",
    "http://127.0.0.1/",
    "http://127.0.0.1:9001/2018-06-01/runtime/invocation/next",
    "http://127.255.255.254/",
    "http://localhost/",
    "http://0.0.0.0/",
    "http://0/",
    "http://[::1]/",
    "http://[::]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:169.254.169.254]/",
    "http://[fd00:ec2::254]/",
    "http://2130706433/",  # decimal 127.0.0.1
    "http://0x7f000001/",  # hex
    "http://0x7f.0.0.1/",  # dotted hex
    "http://127.1/",  # short form
    "http://0xa9fea9fe/",  # hex 169.254.169.254
    "http://10.0.0.1/",
    "http://172.16.5.4/",
    "http://172.31.255.255/",
    "http://192.168.0.1/",
    "http://100.64.0.1/",
    "http://100.127.255.254/",
    "http://[fc00::1]/",
    "http://[fd12:3456::1]/",
    "http://[fe80::1]/",
    "http://169.254.1.1/",
    "http://224.0.0.1/",
    "http://[ff02::1]/",
    "http://240.0.0.1/",
    "http://255.255.255.255/",
    "http://192.0.2.1/",  # documentation ranges: left to the standard library's registry
    "http://[2001:db8::1]/",
    "http://[2002:a00:1::1]/",  # 6to4 of 10.0.0.1
    "http://[2002:a9fe:a9fe::]/",  # 6to4 of 169.254.169.254
    "http://[2002:7f00:1::]/",  # 6to4 of 127.0.0.1
    "http://[2001:0:4136:e378:8000:63bf:f5ff:fffe]/",  # Teredo, client 10.0.0.1 (stored inverted)
    "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",  # Teredo, client 127.0.0.1
    "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 of 169.254.169.254
    "http://[64:ff9b::7f00:1]/",  # NAT64 of 127.0.0.1
    "http://intranet.test/",  # a public-looking name with a private answer
    "http://mixed.test/",  # one private answer among public ones
    "http://v6-private.test/",
    "https://127.0.0.1/",
]


@pytest.mark.parametrize("url", BLOCKED_URLS)
def test_blocked_destination_opens_no_connection(url: str, dns: FakeDNS) -> None:
    connector = FakeConnector()

    with pytest.raises(BlockedDestination) as blocked:
        get(url, dns, connector)

    assert blocked.value.code == "blocked_destination"
    assert connector.connects == []


@pytest.mark.parametrize("url", [*BLOCKED_URLS, "http://0177.0.0.1/"])
def test_check_url_refuses_the_same_destinations(url: str, dns: FakeDNS) -> None:
    with pytest.raises(BlockedDestination) as blocked:
        check_url(url, [], resolver=dns)

    assert blocked.value.code == "blocked_destination"


@pytest.mark.parametrize("host", ["2130706433", "0x7f000001", "0x7f.0.0.1", "0177.0.0.1", "127.1", "0x7f.1"])
def test_legacy_ipv4_forms_are_read_as_addresses_not_looked_up(host: str, dns: FakeDNS) -> None:
    # httpx refuses some of these in URLs (0177.0.0.1), but the backend is the last word whatever reaches it.
    connector = FakeConnector()
    backend = GuardedBackend([], resolver=dns, inner=connector)

    with pytest.raises(BlockedDestination):
        backend.connect_tcp(host, 80)

    assert dns.lookups == []
    assert connector.connects == []


def test_the_message_names_the_host_but_not_where_it_resolved(dns: FakeDNS) -> None:
    with pytest.raises(BlockedDestination) as blocked:
        check_url("http://intranet.test/", [], resolver=dns)

    assert "intranet.test" in blocked.value.message
    assert "10.0.0.5" not in blocked.value.message
    assert blocked.value.host == "intranet.test"


@pytest.mark.parametrize(
    "url",
    ["file:///etc/passwd", "gopher://example.test:70/_x", "ftp://example.test/", "dict://example.test/"],
)
def test_only_http_and_https_schemes(url: str, dns: FakeDNS) -> None:
    connector = FakeConnector()

    with pytest.raises(BlockedDestination) as blocked:
        get(url, dns, connector)
    with pytest.raises(BlockedDestination):
        check_url(url, [], resolver=dns)

    assert "scheme" in blocked.value.message
    assert connector.connects == []


def test_urls_with_credentials_are_refused(dns: FakeDNS) -> None:
    connector = FakeConnector()

    with pytest.raises(BlockedDestination):
        get(f"http://example.test@{PUBLIC_V4}/", dns, connector)

    assert connector.connects == []


def test_unix_sockets_are_refused() -> None:
    with pytest.raises(BlockedDestination):
        GuardedBackend([]).connect_unix_socket("/var/run/docker.sock")


# --- Public destinations ------------------------------------------------------------------------


def test_a_public_name_connects_to_the_checked_address_and_keeps_its_name(dns: FakeDNS) -> None:
    connector = FakeConnector()

    response = get("http://example.test/path", dns, connector)

    assert response.status_code == 200
    assert connector.connects == [(PUBLIC_V4, 80)]
    assert dns.lookups == ["example.test"]
    assert b"\r\nHost: example.test\r\n" in connector.streams[0].written


def test_tls_uses_the_original_name_for_sni(dns: FakeDNS) -> None:
    connector = FakeConnector()

    get("https://example.test/", dns, connector)

    assert connector.connects == [(PUBLIC_V4, 443)]
    assert connector.streams[0].server_hostname == "example.test"


def test_public_literal_addresses_are_allowed(dns: FakeDNS) -> None:
    connector = FakeConnector()

    get(f"http://{PUBLIC_V4}/", dns, connector)
    get(f"http://[{PUBLIC_V6}]:8080/", dns, connector)
    get("http://[::ffff:93.184.216.34]/", dns, connector)

    assert connector.connects == [(PUBLIC_V4, 80), (PUBLIC_V6, 8080), ("::ffff:5db8:d822", 80)]
    assert dns.lookups == []


def test_the_next_checked_address_is_tried_when_one_refuses(dns: FakeDNS) -> None:
    connector = FakeConnector(refuse=[PUBLIC_V4])

    response = get("http://example.test/", dns, connector)

    assert response.status_code == 200
    assert connector.connects == [(PUBLIC_V4, 80), (PUBLIC_V6, 80)]


def test_an_unresolvable_name_is_a_connect_error(dns: FakeDNS) -> None:
    connector = FakeConnector()

    with pytest.raises(httpx.ConnectError):
        get("http://nowhere.test/", dns, connector)

    assert connector.connects == []


def test_without_a_fake_connector_the_socket_layer_gets_the_checked_ip(
    dns: FakeDNS, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real httpcore path, with socket.create_connection recording instead of connecting.
    attempts: list[tuple[str, int]] = []

    def create_connection(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        attempts.append(address)
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(socket, "create_connection", create_connection)

    with pytest.raises(httpcore.ConnectError):
        GuardedBackend([], resolver=dns).connect_tcp("example.test", 443, timeout=1)
    with pytest.raises(BlockedDestination):
        GuardedBackend([], resolver=dns).connect_tcp("intranet.test", 443, timeout=1)

    assert attempts == [(PUBLIC_V4, 443), (PUBLIC_V6, 443)]


def test_check_url_lets_a_name_that_does_not_resolve_yet_through(dns: FakeDNS) -> None:
    check_url("https://not-yet-deployed.test/hook", [], resolver=dns)
    check_url("https://example.test/hook", [], resolver=dns)

    assert dns.lookups == ["not-yet-deployed.test", "example.test"]


# --- DNS rebinding ------------------------------------------------------------------------------


def test_rebinding_after_the_early_check_is_caught_at_connect() -> None:
    # Given a name that answers public to the registration check and private afterwards
    dns = FakeDNS({"rebind.test": [PUBLIC_V4]}, later={"rebind.test": ["127.0.0.1"]})
    connector = FakeConnector()
    check_url("http://rebind.test/", [], resolver=dns)

    # When the request is made
    with pytest.raises(BlockedDestination):
        get("http://rebind.test/", dns, connector)

    # Then the private answer was refused and nothing was connected to
    assert connector.connects == []


def test_the_connection_goes_to_the_answer_that_was_checked() -> None:
    # Given a name that answers public first and private to any later lookup
    dns = FakeDNS({"rebind.test": [PUBLIC_V4]}, later={"rebind.test": ["169.254.169.254"]})
    connector = FakeConnector()

    get("http://rebind.test/", dns, connector)

    # Then the name was resolved once and the public answer is what was connected to
    assert dns.lookups == ["rebind.test"]
    assert connector.connects == [(PUBLIC_V4, 80)]


# --- Redirects ----------------------------------------------------------------------------------


def redirect_to(location: str, body: bytes = b"") -> list[bytes]:
    head = f"HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: {len(body)}\r\n\r\n"
    return [head.encode() + body]


@pytest.mark.parametrize(
    "location",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://intranet.test/",
        "http://[::1]:8080/",
        "http://2130706433/",
        "file:///etc/passwd",
        "gopher://example.test/",
    ],
)
def test_redirects_are_checked_like_the_first_request(location: str, dns: FakeDNS) -> None:
    connector = FakeConnector({PUBLIC_V4: redirect_to(location)})

    with pytest.raises(BlockedDestination):
        get("http://example.test/", dns, connector)

    assert connector.connects == [(PUBLIC_V4, 80)]


def test_a_redirect_body_is_read_only_up_to_the_cap(dns: FakeDNS) -> None:
    # A redirect announcing 100 MB in 1 MB chunks: httpx would read all of it before following.
    megabyte = b"x" * 1_000_000
    head = f"HTTP/1.1 302 Found\r\nLocation: http://[{PUBLIC_V6}]/next\r\nContent-Length: 100000000\r\n\r\n"
    connector = FakeConnector({PUBLIC_V4: [head.encode(), *(megabyte for _ in range(100))]})

    response = get("http://example.test/", dns, connector)

    assert response.status_code == 200
    assert connector.connects == [(PUBLIC_V4, 80), (PUBLIC_V6, 80)]
    assert connector.streams[0].reads <= 2 + REDIRECT_BODY_LIMIT // len(megabyte)


def test_too_many_redirects_stop(dns: FakeDNS) -> None:
    connector = FakeConnector({PUBLIC_V4: redirect_to("/again") * 10})

    with (
        guarded_client(
            timeout=5, allow_hosts=[], resolver=dns, connector=connector, max_redirects=2
        ) as client,
        pytest.raises(httpx.TooManyRedirects),
    ):
        client.get("http://example.test/")


# --- The allow list -----------------------------------------------------------------------------


def test_env_allow_list_exempts_hostnames_and_cidrs(dns: FakeDNS, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEPWISE_ALLOW_HOSTS", "localhost, 10.0.0.0/8")
    connector = FakeConnector()

    get("http://localhost:3000/", dns, connector, allow_hosts=None)
    get("http://intranet.test/", dns, connector, allow_hosts=None)
    get("http://10.200.0.1/", dns, connector, allow_hosts=None)
    with pytest.raises(BlockedDestination):
        get("http://192.168.0.1/", dns, connector, allow_hosts=None)
    with pytest.raises(BlockedDestination):
        get("http://127.0.0.1/", dns, connector, allow_hosts=None)  # the name is exempt, not its address

    assert connector.connects == [("127.0.0.1", 3000), ("10.0.0.5", 80), ("10.200.0.1", 80)]


def test_an_explicit_allow_list_replaces_the_environment(
    dns: FakeDNS, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEPWISE_ALLOW_HOSTS", "localhost")
    connector = FakeConnector()

    with pytest.raises(BlockedDestination):
        get("http://localhost/", dns, connector, allow_hosts=[])

    assert connector.connects == []


def test_a_cidr_exempts_addresses_only_inside_it(dns: FakeDNS) -> None:
    allow = ["127.0.0.1", "fd12::/16"]
    connector = FakeConnector()

    get("http://127.0.0.1:8000/", dns, connector, allow_hosts=allow)
    get("http://[::ffff:127.0.0.1]:8000/", dns, connector, allow_hosts=allow)
    get("http://v6-private.test/", dns, connector, allow_hosts=allow)
    for url in ["http://127.0.0.2/", "http://localhost/", "http://169.254.169.254/"]:
        with pytest.raises(BlockedDestination):
            get(url, dns, connector, allow_hosts=allow)

    assert [host for host, _ in connector.connects] == ["127.0.0.1", "::ffff:7f00:1", "fd12:3456::1"]


def test_allow_list_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEPWISE_ALLOW_HOSTS", " Example.Test. ,127.0.0.1,,10.0.0.0/8,[::1]")

    allow = allow_hosts_from_env()

    assert allow.hostnames == frozenset({"example.test"})
    assert [str(n) for n in allow.networks] == ["127.0.0.1/32", "10.0.0.0/8", "::1/128"]
    assert AllowList.parse("") == AllowList()


@pytest.mark.parametrize("entry", ["localhost:8080", "http://localhost", "10.0.0.0/33", "user@host"])
def test_allow_list_entries_that_are_neither_host_nor_cidr_fail_loudly(entry: str) -> None:
    with pytest.raises(ValueError, match="neither a hostname nor a CIDR"):
        AllowList.parse([entry])


@pytest.mark.parametrize("argument", ["transport", "mounts", "proxy", "trust_env"])
def test_guarded_client_refuses_arguments_that_bypass_it(argument: str) -> None:
    bypass: dict[str, Any] = {argument: None}

    with pytest.raises(TypeError, match=argument):
        guarded_client(timeout=5, allow_hosts=[], **bypass)
