"""The HTTP builtin tools against real servers on loopback that play Exa, Firecrawl, the code sandbox and
an arbitrary web API. Each fake checks nothing itself: it records what it received, and the tests assert
that it got exactly the fields and auth headers the provider documents, and that every way the provider
can fail reaches the model as its own error code."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from stepwise.tools import http_tool
from stepwise.tools.base import ToolResult
from stepwise.tools.builtin import (
    StaticSettings,
    ToolScope,
    code_execute,
    http_request,
    web_scrape,
    web_search,
)
from stepwise.tools.http_tool import truncation_marker
from stepwise.tools.registry import run_builtin

SCOPE = ToolScope("t1", "a1", "r1", "s1")
SMALL_TIMEOUT = 0.5
Respond = Callable[[BaseHTTPRequestHandler], None]


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def reply(
    status: int = 200,
    body: bytes | str = b"",
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
) -> Respond:
    data = body.encode() if isinstance(body, str) else body

    def respond(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(data)

    return respond


def reply_json(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Respond:
    return reply(status, json.dumps(value), headers=headers)


@dataclass
class Peer:
    """A server on loopback: records every request and answers with `respond`, which tests script."""

    url: str
    port: int
    requests: list[Received] = field(default_factory=list)
    respond: Respond = field(default_factory=lambda: reply_json({}))
    release: threading.Event = field(default_factory=threading.Event)  # lets a stalled handler finish

    def stall(self, handler: BaseHTTPRequestHandler) -> None:
        """Answer only when the test is over: longer than any timeout the tests set."""
        self.release.wait(timeout=30)

    @property
    def only(self) -> Received:
        [request] = self.requests
        return request


@pytest.fixture
def peer() -> Iterator[Peer]:
    peer: Peer

    class Handler(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {name.lower(): value for name, value in self.headers.items()}
            peer.requests.append(Received(self.command, self.path, headers, body))
            peer.respond(self)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle

        def log_message(self, format: str, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # clients hanging up on purpose (timeouts) are not errors here

    server = Server(("127.0.0.1", 0), Handler)
    port = server.server_address[1]
    peer = Peer(url=f"http://127.0.0.1:{port}", port=port)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield peer
    finally:
        peer.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(autouse=True)
def loopback_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fakes live on loopback, which the SSRF guard refuses unless told otherwise."""
    monkeypatch.setenv("STEPWISE_ALLOW_HOSTS", "127.0.0.1")


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every address a socket connects to during the test (the connections still happen)."""
    seen: list[Any] = []
    original = socket.socket.connect

    def recording(self: socket.socket, address: Any) -> None:
        seen.append(address)
        original(self, address)

    monkeypatch.setattr(socket.socket, "connect", recording)
    return seen


def error_of(result: ToolResult) -> tuple[str, str]:
    assert result.error is not None, f"expected an error, got {result.output!r}"
    return result.error.code, result.error.message


# --- http_request -------------------------------------------------------------------------------


def call_http(arguments: dict[str, Any], config: http_request.Config | None = None) -> ToolResult:
    return run_builtin(
        http_request.NAME,
        arguments,
        scope=SCOPE,
        settings=StaticSettings(),
        config=config or http_request.Config(),
    )


def test_a_json_answer_comes_back_parsed_with_only_the_allowed_headers(peer: Peer) -> None:
    peer.respond = reply_json({"id": 7, "name": "Olá"}, headers={"X-Internal-Token": "t0k3n"})

    result = call_http({"method": "GET", "url": f"{peer.url}/items/7?full=1"})

    assert result.output == {
        "status": 200,
        "headers": {
            "content-type": "application/json",
            "content-length": str(len('{"id": 7, "name": "Ol\\u00e1"}')),
        },
        "body": {"id": 7, "name": "Olá"},
    }
    assert (peer.only.method, peer.only.path) == ("GET", "/items/7?full=1")
    assert peer.only.headers["user-agent"] == "stepwise/0.1"


def test_an_object_body_is_posted_as_json_with_the_models_headers(peer: Peer) -> None:
    peer.respond = reply(201, "created", content_type="text/plain")

    result = call_http(
        {
            "method": "POST",
            "url": f"{peer.url}/items",
            "headers": {"Authorization": "Bearer model-token", "X-Trace": "1"},
            "body": {"name": "box", "tags": ["a"]},
        }
    )

    assert result.output == {
        "status": 201,
        "headers": {"content-type": "text/plain", "content-length": "7"},
        "body": "created",
    }
    assert peer.only.json() == {"name": "box", "tags": ["a"]}
    assert peer.only.headers["content-type"] == "application/json"
    assert peer.only.headers["authorization"] == "Bearer model-token"
    assert peer.only.headers["x-trace"] == "1"


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE"])
def test_a_string_body_is_sent_as_it_is(peer: Peer, method: str) -> None:
    result = call_http(
        {"method": method, "url": peer.url, "headers": {"Content-Type": "text/csv"}, "body": "a,b\n1,2"}
    )

    assert result.ok
    assert (peer.only.method, peer.only.body, peer.only.headers["content-type"]) == (
        method,
        b"a,b\n1,2",
        "text/csv",
    )


def test_head_reads_the_headers_and_no_body(peer: Peer) -> None:
    peer.respond = reply(200, "", content_type="text/html")

    result = call_http({"method": "HEAD", "url": peer.url})

    assert result.output == {
        "status": 200,
        "headers": {"content-type": "text/html", "content-length": "0"},
        "body": "",
    }


def test_an_error_status_is_an_answer_the_model_reads(peer: Peer) -> None:
    peer.respond = reply_json({"error": "not found"}, status=404)

    result = call_http({"method": "GET", "url": f"{peer.url}/missing"})

    assert result.ok
    assert result.output["status"] == 404
    assert result.output["body"] == {"error": "not found"}


def test_a_redirect_is_followed_and_its_location_kept_when_not(peer: Peer) -> None:
    def route(handler: BaseHTTPRequestHandler) -> None:
        if handler.path == "/old":
            reply(301, "", headers={"Location": "/new"})(handler)
        else:
            reply_json({"at": handler.path})(handler)

    peer.respond = route

    result = call_http({"method": "GET", "url": f"{peer.url}/old"})

    assert result.output["body"] == {"at": "/new"}
    assert [r.path for r in peer.requests] == ["/old", "/new"]


def test_a_long_answer_is_read_whole_and_one_past_the_limit_is_cut_with_the_marker(
    peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = ["é" * 100] * 500
    peer.respond = reply_json({"items": items})  # ~52,000 characters of JSON

    whole = call_http({"method": "GET", "url": peer.url}).output["body"]
    monkeypatch.setattr(http_tool, "HTTP_READ_LIMIT", 10_000)
    cut = call_http({"method": "GET", "url": peer.url}).output["body"]

    assert whole == {"items": items}
    assert isinstance(cut, str)  # cut JSON is no longer JSON
    assert cut.endswith(truncation_marker(10_000))
    assert len(cut[: -len(truncation_marker(10_000))].encode()) == 10_000


def test_a_slow_server_times_out(peer: Peer) -> None:
    peer.respond = peer.stall

    result = http_request.send(
        http_request.Arguments(method="GET", url=peer.url),
        config=http_request.Config(),
        timeout=SMALL_TIMEOUT,
    )

    assert error_of(result)[0] == "timeout"


def test_a_closed_port_is_unreachable() -> None:
    with socket.socket() as placeholder:  # bound, not listening: connecting is refused
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]

        result = call_http({"method": "GET", "url": f"http://127.0.0.1:{port}/"})

    assert error_of(result)[0] == "unreachable"


def test_loopback_is_blocked_without_the_allow_list(peer: Peer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STEPWISE_ALLOW_HOSTS")

    result = call_http({"method": "GET", "url": peer.url})

    assert error_of(result)[0] == "blocked_destination"
    assert peer.requests == []


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest/meta-data/iam/", "http://10.0.0.1/admin"])
def test_internal_destinations_are_blocked_with_no_socket_opened(url: str, connects: list[Any]) -> None:
    result = call_http({"method": "GET", "url": url})

    assert error_of(result)[0] == "blocked_destination"
    assert connects == []


def test_a_redirect_into_the_metadata_service_is_blocked(peer: Peer, connects: list[Any]) -> None:
    peer.respond = reply(302, "", headers={"Location": "http://169.254.169.254/latest/meta-data/"})

    result = call_http({"method": "GET", "url": peer.url})

    assert error_of(result)[0] == "blocked_destination"
    assert [address[0] for address in connects] == ["127.0.0.1"]


def test_the_agents_host_list_allows_its_hosts(peer: Peer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEPWISE_ALLOW_HOSTS", "127.0.0.1,localhost")
    config = http_request.Config(allowed_hosts=["localhost"])

    allowed = call_http({"method": "GET", "url": f"http://localhost:{peer.port}/"}, config)
    refused = call_http({"method": "GET", "url": f"{peer.url}/"}, config)

    assert allowed.ok
    assert error_of(refused)[0] == "host_not_allowed"
    assert len(peer.requests) == 1


def test_the_agents_host_list_applies_to_redirects(peer: Peer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEPWISE_ALLOW_HOSTS", "127.0.0.1,localhost")
    peer.respond = reply(307, "", headers={"Location": f"{peer.url}/elsewhere"})

    result = call_http(
        {"method": "GET", "url": f"http://localhost:{peer.port}/start"},
        http_request.Config(allowed_hosts=["localhost"]),
    )

    assert error_of(result) == (
        "host_not_allowed",
        "host '127.0.0.1' is not one this agent may request (allowed: localhost)",
    )
    assert [r.path for r in peer.requests] == ["/start"]


def test_the_models_headers_do_not_follow_a_redirect_to_another_origin(
    peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEPWISE_ALLOW_HOSTS", "127.0.0.1,localhost")

    def route(handler: BaseHTTPRequestHandler) -> None:
        if handler.path == "/start":
            reply(307, "", headers={"Location": f"http://localhost:{peer.port}/elsewhere"})(handler)
        else:
            reply_json({"ok": True})(handler)

    peer.respond = route

    result = call_http({"method": "GET", "url": f"{peer.url}/start", "headers": {"X-Api-Key": "secret"}})

    assert result.output["body"] == {"ok": True}
    first, followed = peer.requests
    assert first.headers["x-api-key"] == "secret"
    assert "x-api-key" not in followed.headers


# --- code_execute -------------------------------------------------------------------------------


def sandbox_settings(peer: Peer, key: str | None = "sandbox-key", path: str = "") -> StaticSettings:
    values = {"CODE_SANDBOX_URL": f"{peer.url}{path}"}
    if key is not None:
        values["CODE_SANDBOX_API_KEY"] = key
    return StaticSettings(values)


def run_code(settings: StaticSettings, **arguments: Any) -> ToolResult:
    arguments = {"language": "python", "code": "print(6 * 7)", **arguments}
    return run_builtin(
        code_execute.NAME, arguments, scope=SCOPE, settings=settings, config=code_execute.Config()
    )


def test_code_goes_to_the_sandbox_as_documented(peer: Peer) -> None:
    peer.respond = reply_json({"stdout": "42\n", "stderr": "", "exit_code": 0, "duration_ms": 31})

    result = run_code(sandbox_settings(peer), timeout_seconds=10)

    assert result.output == {
        "stdout": "42\n",
        "stderr": "",
        "exit_code": 0,
        "duration_ms": 31,
        "timed_out": False,
    }
    request = peer.only
    assert (request.method, request.path) == ("POST", "/execute")
    assert request.json() == {"language": "python", "code": "print(6 * 7)", "timeout_seconds": 10}
    assert request.headers["authorization"] == "Bearer sandbox-key"
    assert request.headers["content-type"] == "application/json"


def test_without_a_sandbox_key_no_authorization_is_sent_and_the_path_is_kept(peer: Peer) -> None:
    peer.respond = reply_json({"stdout": "", "stderr": "", "exit_code": 0, "duration_ms": 1})

    result = run_code(sandbox_settings(peer, key=None, path="/sandbox/v1/"), language="javascript", code="1")

    assert result.ok
    assert peer.only.path == "/sandbox/v1/execute"
    assert "authorization" not in peer.only.headers
    assert peer.only.json() == {"language": "javascript", "code": "1", "timeout_seconds": 30}


def test_a_failing_program_is_a_result_not_an_error(peer: Peer) -> None:
    peer.respond = reply_json(
        {"stdout": "", "stderr": "ZeroDivisionError", "exit_code": 1, "duration_ms": 5, "timed_out": False}
    )

    result = run_code(sandbox_settings(peer), code="1/0")

    assert result.ok
    assert (result.output["exit_code"], result.output["stderr"]) == (1, "ZeroDivisionError")


def test_code_that_ran_out_of_time_in_the_sandbox_says_so(peer: Peer) -> None:
    peer.respond = reply_json(
        {"stdout": "tick\n", "stderr": "", "exit_code": 137, "duration_ms": 2000, "timed_out": True}
    )

    result = run_code(sandbox_settings(peer), timeout_seconds=2)

    assert result.output["timed_out"] is True
    assert result.output["stdout"] == "tick\n"


def test_without_the_sandbox_url_nothing_is_sent(peer: Peer) -> None:
    result = run_code(StaticSettings({"CODE_SANDBOX_API_KEY": "k"}))

    assert error_of(result) == ("not_configured", "Code sandbox is not configured")
    assert peer.requests == []


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (500, "provider_error"),
        (503, "provider_error"),
        (429, "rate_limited"),
        (401, "provider_auth"),
        (403, "provider_auth"),
        (400, "provider_rejected"),
    ],
)
def test_sandbox_failures_have_their_own_codes(peer: Peer, status: int, code: str) -> None:
    peer.respond = reply_json({"error": "sandbox says no"}, status=status)

    result = run_code(sandbox_settings(peer))

    actual, message = error_of(result)
    assert actual == code
    assert "sandbox says no" in message
    assert "sandbox-key" not in message


def test_a_sandbox_that_does_not_answer_times_out(peer: Peer) -> None:
    peer.respond = peer.stall

    result = code_execute.execute(
        code_execute.Arguments(language="python", code="while True: pass", timeout_seconds=1),
        settings=sandbox_settings(peer),
        http_timeout=SMALL_TIMEOUT,
    )

    assert error_of(result)[0] == "timeout"


def test_a_sandbox_answer_that_is_not_json_is_a_provider_error(peer: Peer) -> None:
    peer.respond = reply(200, "<html>gateway</html>", content_type="text/html")

    assert error_of(run_code(sandbox_settings(peer)))[0] == "provider_error"


@pytest.mark.parametrize("url", ["http://169.254.169.254", "http://10.0.0.1:8080"])
def test_an_internal_sandbox_url_is_blocked_with_no_socket_opened(url: str, connects: list[Any]) -> None:
    result = run_code(StaticSettings({"CODE_SANDBOX_URL": url}))

    assert error_of(result)[0] == "blocked_destination"
    assert connects == []


# --- web_search (Exa) ---------------------------------------------------------------------------


@pytest.fixture
def exa(peer: Peer, monkeypatch: pytest.MonkeyPatch) -> Peer:
    monkeypatch.setenv("EXA_BASE_URL", peer.url)
    peer.respond = reply_json(
        {
            "requestId": "b5947044c4b78efa9552a7c89b306d95",
            "resolvedSearchType": "neural",
            "results": [
                {
                    "id": "https://arxiv.org/abs/2307.06435",
                    "url": "https://arxiv.org/abs/2307.06435",
                    "title": "A Comprehensive Overview of Large Language Models",
                    "publishedDate": "2023-11-16T01:36:32.547Z",
                    "author": "Humza Naveed",
                    "score": 0.41,
                    "highlights": ["Large Language Models (LLMs) have recently demonstrated..."],
                    "highlightScores": [0.46],
                }
            ],
            "costDollars": {"total": 0.007},
        }
    )
    return peer


EXA_KEY = StaticSettings({"EXA_API_KEY": "exa-key"})


def search(settings: StaticSettings = EXA_KEY, **arguments: Any) -> ToolResult:
    return run_builtin(web_search.NAME, arguments, scope=SCOPE, settings=settings, config=web_search.Config())


def test_a_search_sends_exactly_exas_documented_request(exa: Peer) -> None:
    result = search(query="Latest research in LLMs")

    request = exa.only
    assert (request.method, request.path) == ("POST", "/search")
    assert request.headers["x-api-key"] == "exa-key"
    assert "authorization" not in request.headers
    assert request.headers["content-type"] == "application/json"
    assert request.json() == {
        "query": "Latest research in LLMs",
        "type": "auto",
        "numResults": 5,
        "contents": {"highlights": {"maxCharacters": 2000}},
    }
    assert result.output == {
        "search_type": "neural",
        "results": [
            {
                "title": "A Comprehensive Overview of Large Language Models",
                "url": "https://arxiv.org/abs/2307.06435",
                "published_date": "2023-11-16T01:36:32.547Z",
                "author": "Humza Naveed",
                "highlights": ["Large Language Models (LLMs) have recently demonstrated..."],
            }
        ],
    }


def test_every_filter_reaches_exa_under_its_documented_name(exa: Peer) -> None:
    search(
        query="EU battery regulation",
        search_type="keyword",
        num_results=3,
        include_domains=["europa.eu"],
        exclude_domains=["reddit.com"],
        start_date="2024-01-01",
        end_date="2024-06-30T00:00:00.000Z",
        category="news",
        content_mode="compact_text",
    )

    assert exa.only.json() == {
        "query": "EU battery regulation",
        "type": "keyword",
        "numResults": 3,
        "includeDomains": ["europa.eu"],
        "excludeDomains": ["reddit.com"],
        "startPublishedDate": "2024-01-01",
        "endPublishedDate": "2024-06-30T00:00:00.000Z",
        "category": "news",
        "contents": {"text": {"maxCharacters": 1000}},
    }


def test_the_agents_pinned_search_type_wins(exa: Peer) -> None:
    run_builtin(
        web_search.NAME,
        {"query": "q", "search_type": "deep-reasoning"},
        scope=SCOPE,
        settings=EXA_KEY,
        config=web_search.Config(search_type="auto"),
    )

    assert exa.only.json()["type"] == "auto"


def test_full_text_results_are_capped_per_result_and_overall(exa: Peer) -> None:
    # Exa may send more than maxCharacters asked for; the caps hold anyway.
    exa.respond = reply_json(
        {
            "results": [
                {"url": f"https://s{i}.example/", "title": f"S{i}", "text": "w" * 20_000} for i in range(10)
            ]
        }
    )

    output = search(query="q", num_results=10, content_mode="full_text").output

    assert len(json.dumps(output, ensure_ascii=False)) <= 50_000
    assert all(
        r["text"].endswith("\n…[truncated: 15000 of 20000 characters omitted]") for r in output["results"]
    )
    assert output["omitted"].startswith(f"…[{10 - len(output['results'])} more result(s) omitted")


def test_without_an_exa_key_nothing_is_sent(exa: Peer) -> None:
    result = search(StaticSettings({"EXA_API_KEY": ""}), query="q")

    code, message = error_of(result)
    assert code == "not_configured"
    assert "EXA_API_KEY" in message
    assert exa.requests == []


@pytest.mark.parametrize(
    ("status", "body", "code"),
    [
        (500, {"error": "Internal error"}, "provider_error"),
        (502, {"error": "Bad gateway"}, "provider_error"),
        (429, {"error": "You've exceeded your rate limit"}, "rate_limited"),
        (401, {"error": "Invalid API key"}, "provider_auth"),
        (400, {"requestId": "x", "error": "Invalid category for type keyword"}, "provider_rejected"),
    ],
)
def test_exa_failures_have_their_own_codes(exa: Peer, status: int, body: dict[str, Any], code: str) -> None:
    exa.respond = reply_json(body, status=status, headers={"Retry-After": "3"} if status == 429 else None)

    actual, message = error_of(search(query="q"))

    assert actual == code
    assert body["error"] in message
    assert "exa-key" not in message
    if status == 429:
        assert "retry after 3 seconds" in message


def test_a_slow_exa_times_out(exa: Peer) -> None:
    exa.respond = exa.stall

    result = web_search.search(web_search.Arguments(query="q"), settings=EXA_KEY, timeout=SMALL_TIMEOUT)

    assert error_of(result) == ("timeout", "Exa did not answer within 0.5 seconds")


def test_an_internal_exa_base_url_is_blocked_with_no_socket_opened(
    monkeypatch: pytest.MonkeyPatch, connects: list[Any]
) -> None:
    monkeypatch.setenv("EXA_BASE_URL", "http://169.254.169.254")

    assert error_of(search(query="q"))[0] == "blocked_destination"
    assert connects == []


# --- web_scrape (Firecrawl) ---------------------------------------------------------------------


@pytest.fixture
def firecrawl(peer: Peer, monkeypatch: pytest.MonkeyPatch) -> Peer:
    monkeypatch.setenv("FIRECRAWL_BASE_URL", peer.url)
    peer.respond = reply_json(
        {
            "success": True,
            "data": {
                "markdown": "# Example Domain\n\n![logo](https://example.com/logo.png)For examples.",
                "html": "<h1>Example Domain</h1>",
                "links": ["https://www.iana.org/domains/example"],
                "metadata": {
                    "title": "Example Domain",
                    "language": "en",
                    "sourceURL": "https://example.com",
                    "statusCode": 200,
                },
            },
        }
    )
    return peer


FIRECRAWL_KEY = StaticSettings({"FIRECRAWL_API_KEY": "fc-123"})


def scrape(settings: StaticSettings = FIRECRAWL_KEY, **arguments: Any) -> ToolResult:
    return run_builtin(web_scrape.NAME, arguments, scope=SCOPE, settings=settings, config=web_scrape.Config())


def test_a_scrape_sends_exactly_firecrawls_documented_request(firecrawl: Peer) -> None:
    result = scrape(url="https://example.com")

    request = firecrawl.only
    assert (request.method, request.path) == ("POST", "/v1/scrape")
    assert request.headers["authorization"] == "Bearer fc-123"
    assert request.headers["content-type"] == "application/json"
    assert request.json() == {
        "url": "https://example.com",
        "formats": ["markdown"],
        "onlyMainContent": True,
        "timeout": 30000,
    }
    assert result.output == {
        "url": "https://example.com",
        "title": "Example Domain",
        "status_code": 200,
        "markdown": "# Example Domain\n\nlogoFor examples.",
    }


def test_all_formats_and_images(firecrawl: Peer) -> None:
    result = scrape(url="https://example.com", formats=["markdown", "html", "links"], include_images=True)

    assert firecrawl.only.json()["formats"] == ["markdown", "html", "links"]
    assert result.output["images"] == [{"url": "https://example.com/logo.png", "alt": "logo"}]
    assert "![logo](https://example.com/logo.png)" in result.output["markdown"]
    assert result.output["html"] == "<h1>Example Domain</h1>"
    assert result.output["links"] == ["https://www.iana.org/domains/example"]


def test_a_huge_page_is_cut_at_two_hundred_thousand_characters(firecrawl: Peer) -> None:
    firecrawl.respond = reply_json({"success": True, "data": {"markdown": "z" * 250_000, "metadata": {}}})

    markdown = scrape(url="https://example.com").output["markdown"]

    assert markdown == "z" * 200_000 + "\n…[truncated: 50000 of 250000 characters omitted]"


def test_without_a_firecrawl_key_nothing_is_sent(firecrawl: Peer) -> None:
    result = scrape(StaticSettings(), url="https://example.com")

    code, message = error_of(result)
    assert code == "not_configured"
    assert "FIRECRAWL_API_KEY" in message
    assert firecrawl.requests == []


@pytest.mark.parametrize(
    ("status", "error", "code"),
    [
        (500, "All scraping engines failed.", "provider_error"),
        (429, "Rate limit exceeded", "rate_limited"),
        (401, "Unauthorized: Invalid API key", "provider_auth"),
        (402, "Payment required", "provider_rejected"),
        (408, "Request timed out", "timeout"),
    ],
)
def test_firecrawl_failures_have_their_own_codes(firecrawl: Peer, status: int, error: str, code: str) -> None:
    firecrawl.respond = reply_json({"success": False, "error": error}, status=status)

    actual, message = error_of(scrape(url="https://example.com"))

    assert actual == code
    assert error in message
    assert "fc-123" not in message


def test_a_slow_firecrawl_times_out(firecrawl: Peer) -> None:
    firecrawl.respond = firecrawl.stall

    result = web_scrape.scrape(
        web_scrape.Arguments(url="https://example.com"), settings=FIRECRAWL_KEY, timeout=SMALL_TIMEOUT
    )

    assert error_of(result)[0] == "timeout"


@pytest.mark.parametrize(
    "url", ["http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/", "http://[::ffff:10.0.0.1]/"]
)
def test_an_internal_page_is_refused_before_firecrawl_is_asked(
    firecrawl: Peer, url: str, connects: list[Any]
) -> None:
    result = scrape(url=url)

    assert error_of(result)[0] == "blocked_destination"
    assert firecrawl.requests == []
    assert connects == []
