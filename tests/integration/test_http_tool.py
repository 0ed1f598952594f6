"""Custom HTTP tools end to end, against a real HTTP server on loopback."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from stepwise.tools import http_tool
from stepwise.tools.http_tool import HTTP_READ_LIMIT, TRUNCATION_MARKER, call_http_tool, truncation_marker
from stepwise.tools.models import HttpTool

LOOPBACK = ["127.0.0.1"]
SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "subject": {"type": "string"}, "count": {"type": "integer"}},
    "required": ["to"],
}


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


Respond = Callable[[BaseHTTPRequestHandler], None]


def reply(status: int = 200, body: bytes | str = b"", content_type: str = "text/plain") -> Respond:
    data = body.encode() if isinstance(body, str) else body

    def respond(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    return respond


def reply_json(value: Any, status: int = 200) -> Respond:
    return reply(status, json.dumps(value), "application/json")


@dataclass
class Peer:
    """An endpoint on loopback: records every request and answers with `respond`, which tests script.

    Unlike tests/fakes/receiver.py it can bind another loopback address, and stream, stall or redirect.
    """

    url: str
    requests: list[Received] = field(default_factory=list)
    respond: Respond = field(default_factory=lambda: reply_json({"ok": True}))
    release: threading.Event = field(default_factory=threading.Event)  # lets a stalled handler finish
    hung_up: threading.Event = field(default_factory=threading.Event)  # the client closed mid-body


def serve(host: str) -> Iterator[Peer]:
    peer: Peer

    class Handler(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            peer.requests.append(Received(self.command, self.path, dict(self.headers.items()), body))
            peer.respond(self)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        def log_message(self, format: str, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # clients hanging up on purpose (timeouts, truncation) are not errors here

    server = Server((host, 0), Handler)
    peer = Peer(url=f"http://{host}:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield peer
    finally:
        peer.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def peer() -> Iterator[Peer]:
    yield from serve("127.0.0.1")


@pytest.fixture
def other_peer() -> Iterator[Peer]:
    yield from serve("127.0.0.2")


@pytest.fixture(autouse=True)
def no_env_allow_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STEPWISE_ALLOW_HOSTS", raising=False)


def make_tool(endpoint: str, **fields: Any) -> HttpTool:
    return HttpTool(
        type="http",
        name="notify",
        description="Send a notification",
        input_schema=SCHEMA,
        endpoint=endpoint,
        **fields,
    )


# --- Requests -----------------------------------------------------------------------------------


def test_arguments_are_posted_as_json_with_the_headers(peer: Peer) -> None:
    peer.respond = reply_json({"id": "msg_1", "queued": True})
    tool = make_tool(f"{peer.url}/send", headers={"Authorization": "Bearer tool-secret"})
    arguments = {"to": "ana@example.com", "subject": "Olá", "count": 2}

    result = call_http_tool(tool, arguments, idempotency_key="effect-123", allow_hosts=LOOPBACK)

    assert result.ok
    assert result.output == {"id": "msg_1", "queued": True}
    [request] = peer.requests
    assert (request.method, request.path) == ("POST", "/send")
    assert json.loads(request.body) == arguments
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["User-Agent"] == "stepwise/0.1"
    assert request.headers["Idempotency-Key"] == "effect-123"
    assert request.headers["Authorization"] == "Bearer tool-secret"


def test_without_a_key_no_idempotency_header_is_sent(peer: Peer) -> None:
    call_http_tool(make_tool(peer.url), {"to": "x"}, allow_hosts=LOOPBACK)

    assert "Idempotency-Key" not in peer.requests[0].headers


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE"])
def test_other_writing_methods_send_a_json_body(peer: Peer, method: str) -> None:
    result = call_http_tool(make_tool(peer.url, method=method), {"to": "x"}, allow_hosts=LOOPBACK)

    assert result.ok
    assert peer.requests[0].method == method
    assert json.loads(peer.requests[0].body) == {"to": "x"}


def test_get_sends_arguments_as_query_parameters(peer: Peer) -> None:
    schema = {"type": "object", "properties": {}}
    tool = HttpTool(
        type="http",
        name="search",
        description="Search",
        input_schema=schema,
        endpoint=f"{peer.url}/search?version=2",
        method="GET",
    )
    arguments = {
        "q": "cats & dogs",
        "limit": 3,
        "exact": True,
        "tags": ["a", "b"],
        "filter": {"x": 1},
        "page": None,
        "version": "1",  # the endpoint's own parameter wins
    }

    result = call_http_tool(tool, arguments, allow_hosts=LOOPBACK)

    assert result.ok
    [request] = peer.requests
    query = {name: values[0] for name, values in parse_qs(urlsplit(request.path).query).items()}
    assert query == {
        "version": "2",
        "q": "cats & dogs",
        "limit": "3",
        "exact": "true",
        "tags": '["a", "b"]',
        "filter": '{"x": 1}',
    }
    assert request.body == b""
    assert "Content-Type" not in request.headers


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"to": 5}, "to: 5 is not of type 'string'"),
        ({"subject": "hi"}, "(arguments): 'to' is a required property"),
        ({"to": "x", "count": "two"}, "count: 'two' is not of type 'integer'"),
    ],
)
def test_arguments_breaking_the_schema_make_no_request(
    peer: Peer, arguments: dict[str, Any], message: str
) -> None:
    result = call_http_tool(make_tool(peer.url), arguments, allow_hosts=LOOPBACK)

    assert result.error is not None
    assert result.error.code == "invalid_arguments"
    assert result.error.message == message
    assert peer.requests == []


def test_a_remote_schema_ref_is_not_fetched(peer: Peer) -> None:
    # jsonschema would fetch it with urllib, around the SSRF guard
    schema = {"type": "object", "properties": {"to": {"$ref": f"{peer.url}/schema.json"}}}
    tool = HttpTool(
        type="http", name="notify", description="Notify", input_schema=schema, endpoint=f"{peer.url}/send"
    )

    result = call_http_tool(tool, {"to": "x"}, allow_hosts=LOOPBACK)

    assert result.error is not None
    assert result.error.code == "invalid_tool"
    assert peer.requests == []


def test_a_local_schema_ref_still_validates(peer: Peer) -> None:
    schema = {
        "type": "object",
        "$defs": {"email": {"type": "string"}},
        "properties": {"to": {"$ref": "#/$defs/email"}},
    }
    tool = HttpTool(type="http", name="notify", description="Notify", input_schema=schema, endpoint=peer.url)

    result = call_http_tool(tool, {"to": 5}, allow_hosts=LOOPBACK)

    assert result.error is not None
    assert result.error.message == "to: 5 is not of type 'string'"


def test_non_json_numbers_are_refused_before_sending(peer: Peer) -> None:
    result = call_http_tool(make_tool(peer.url), {"to": "x", "count": float("nan")}, allow_hosts=LOOPBACK)

    assert result.error is not None
    assert result.error.code == "invalid_arguments"
    assert peer.requests == []


# --- Responses ----------------------------------------------------------------------------------


def test_a_text_response_is_returned_as_text(peer: Peer) -> None:
    peer.respond = reply(body="sent")

    result = call_http_tool(make_tool(peer.url), {"to": "x"}, allow_hosts=LOOPBACK)

    assert result.output == "sent"


def test_a_long_json_response_is_read_whole(peer: Peer) -> None:
    items = ["é" * 100] * 500
    peer.respond = reply_json({"items": items})  # ~52,000 characters of JSON: the loop describes it

    result = call_http_tool(make_tool(peer.url), {"to": "x"}, allow_hosts=LOOPBACK)

    assert result.ok and result.output == {"items": items}


def test_a_response_past_the_read_limit_is_cut_with_a_visible_marker(
    peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_tool, "HTTP_READ_LIMIT", 10_001)
    peer.respond = reply(body="é" * 6_000)  # 12,000 bytes: the limit falls inside a two-byte "é"

    result = call_http_tool(make_tool(peer.url), {"to": "x"}, allow_hosts=LOOPBACK)

    assert result.ok
    # the half character is dropped, not shown as U+FFFD
    assert result.output == "é" * 5_000 + truncation_marker(10_001)
    assert "5,242,880 bytes" in TRUNCATION_MARKER


def test_a_response_of_exactly_the_limit_is_whole(peer: Peer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_tool, "HTTP_READ_LIMIT", 10_000)
    peer.respond = reply(body="a" * 10_000)

    result = call_http_tool(make_tool(peer.url), {"to": "x"}, allow_hosts=LOOPBACK)

    assert result.output == "a" * 10_000


def test_an_endless_response_is_not_downloaded(peer: Peer) -> None:
    def endless(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain")
        handler.end_headers()  # no length: the body runs until the connection closes
        chunk = b"z" * 65536
        try:
            for _ in range(16_000):  # 1 GB, far more than any client should read
                handler.wfile.write(chunk)
        except (BrokenPipeError, ConnectionResetError):
            peer.hung_up.set()

    peer.respond = endless

    result = call_http_tool(make_tool(peer.url), {"to": "x"}, allow_hosts=LOOPBACK)

    assert result.output == "z" * HTTP_READ_LIMIT + TRUNCATION_MARKER
    assert peer.hung_up.wait(timeout=10)


def test_a_failing_endpoint_is_an_http_error_with_status_and_body(peer: Peer) -> None:
    peer.respond = reply(503, "down for maintenance")

    result = call_http_tool(make_tool(peer.url), {"to": "x"}, allow_hosts=LOOPBACK)

    assert result.error is not None
    assert result.error.code == "http_error"
    assert "503" in result.error.message
    assert "down for maintenance" in result.error.message


def test_a_failing_endpoint_body_is_capped_too(peer: Peer) -> None:
    peer.respond = reply(500, "x" * 50_000)

    result = call_http_tool(make_tool(peer.url), {"to": "x"}, allow_hosts=LOOPBACK)

    assert result.error is not None
    assert result.error.message.endswith("[truncated: 40,000 characters omitted]")
    assert len(result.error.message) < http_tool.ERROR_BODY_LIMIT + 100


def test_a_slow_endpoint_times_out(peer: Peer) -> None:
    def stall(handler: BaseHTTPRequestHandler) -> None:
        peer.release.wait(timeout=30)

    peer.respond = stall

    result = call_http_tool(make_tool(peer.url), {"to": "x"}, allow_hosts=LOOPBACK, timeout=0.5)

    assert result.error is not None
    assert result.error.code == "timeout"


def test_a_closed_port_is_unreachable() -> None:
    # Bound but not listening: connecting is refused, and no other test can take the port meanwhile.
    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]

        result = call_http_tool(make_tool(f"http://127.0.0.1:{port}/"), {"to": "x"}, allow_hosts=LOOPBACK)

    assert result.error is not None
    assert result.error.code == "unreachable"


# --- The SSRF guard -----------------------------------------------------------------------------


def test_loopback_is_blocked_unless_allowed(peer: Peer) -> None:
    result = call_http_tool(make_tool(peer.url), {"to": "x"}, allow_hosts=[])

    assert result.error is not None
    assert result.error.code == "blocked_destination"
    assert "127.0.0.1" in result.error.message
    assert peer.requests == []


def test_the_allow_list_comes_from_the_environment_by_default(
    peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = call_http_tool(make_tool(peer.url), {"to": "x"})
    monkeypatch.setenv("STEPWISE_ALLOW_HOSTS", "127.0.0.0/8")
    allowed = call_http_tool(make_tool(peer.url), {"to": "x"})

    assert blocked.error is not None
    assert blocked.error.code == "blocked_destination"
    assert allowed.ok
    assert len(peer.requests) == 1


def test_a_redirect_to_a_blocked_host_is_not_followed(peer: Peer, other_peer: Peer) -> None:
    # Given an allowed host that redirects to a loopback address nobody allowed
    peer.respond = redirect(f"{other_peer.url}/steal")
    port = peer.url.rsplit(":", 1)[1]
    tool = make_tool(f"http://localhost:{port}/start")

    result = call_http_tool(tool, {"to": "x"}, allow_hosts=["localhost"])

    # Then the redirect is refused before it reaches the second server
    assert result.error is not None
    assert result.error.code == "blocked_destination"
    assert [r.path for r in peer.requests] == ["/start"]
    assert other_peer.requests == []


def test_a_redirect_to_an_allowed_host_is_followed(peer: Peer) -> None:
    def start_or_finish(handler: BaseHTTPRequestHandler) -> None:
        route = redirect("/finish") if handler.path == "/start" else reply_json({"done": True})
        route(handler)

    peer.respond = start_or_finish

    result = call_http_tool(make_tool(f"{peer.url}/start"), {"to": "x"}, allow_hosts=LOOPBACK)

    assert result.output == {"done": True}
    assert [r.path for r in peer.requests] == ["/start", "/finish"]


def redirect(location: str) -> Respond:
    def respond(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(307)
        handler.send_header("Location", location)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    return respond


def test_the_tools_headers_do_not_follow_a_redirect_to_another_origin(peer: Peer, other_peer: Peer) -> None:
    peer.respond = redirect(f"{other_peer.url}/elsewhere")
    tool = make_tool(peer.url, headers={"X-Api-Key": "tenant-secret"})

    result = call_http_tool(tool, {"to": "x"}, idempotency_key="k1", allow_hosts=["127.0.0.0/8"])

    assert result.ok
    assert peer.requests[0].headers["X-Api-Key"] == "tenant-secret"
    [followed] = other_peer.requests
    assert "X-Api-Key" not in followed.headers
    assert followed.headers["Idempotency-Key"] == "k1"
