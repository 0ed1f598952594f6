"""A local stand-in for API Gateway HTTP API: Lambda proxy integrations (payload format 2.0) behind a
Lambda REQUEST authorizer with simple responses.

Each request becomes the same event API Gateway would send, and each function result is read the way
API Gateway reads it, so a handler that works here works behind the real thing. Behaviour follows the
API Gateway Developer Guide ("Working with AWS Lambda proxy integrations for HTTP APIs", "Working with
AWS Lambda authorizers for HTTP APIs", "Working with routes for HTTP APIs").
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote

__all__ = ["Gateway", "Invoke", "Response", "Route", "bind", "error_response", "serve"]

logger = logging.getLogger(__name__)

Invoke = Callable[[str, dict[str, Any]], Any]
"""(function logical id, event) -> the function's result, any JSON value."""

ACCOUNT_ID = "123456789012"
REGION = "us-east-1"
API_ID = "local"
STAGE = "$default"
MAX_BODY_BYTES = 10 * 1024 * 1024  # HTTP API's payload limit
METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "ANY"})
# HTTP API passes these bodies as text and base64-encodes every other one, form posts included.
TEXT_MEDIA_TYPES = frozenset({"application/json", "application/javascript", "application/xml"})
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
# Framing is the gateway's business, never the function's.
_HOP_BY_HOP = frozenset({"connection", "content-length", "keep-alive", "transfer-encoding", "upgrade"})
_MESSAGES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    413: "Request Entity Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
}


@dataclass(frozen=True)
class Route:
    method: str  # "GET", "POST", ... or "ANY"
    path: str  # as in SAM: "/v1/agents/{agent_id}", greedy "{proxy+}", or "$default"
    function: str  # logical id of the Lambda function that serves it
    authorized: bool  # False for routes with `Auth: Authorizer: NONE`

    @property
    def key(self) -> str:
        return "$default" if self.path == "$default" else f"{self.method} {self.path}"


@dataclass(frozen=True)
class Response:
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        """The first value of a header, by case-insensitive name."""
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


def error_response(status: int, request_id: str | None = None) -> Response:
    """The JSON body API Gateway itself answers with, e.g. 404 `{"message":"Not Found"}`."""
    body = json.dumps({"message": _MESSAGES[status]}, separators=(",", ":")).encode()
    headers = [("content-type", "application/json")]
    if request_id:
        headers.append(("apigw-requestid", request_id))
    return Response(status, headers, body)


@dataclass
class _Bucket:
    """A route's throttle as API Gateway applies it: a token bucket of `burst` tokens refilled at
    `rate` per second; a request that finds it empty is answered 429 before any function runs."""

    rate: float
    burst: float
    tokens: float
    at: float

    def take(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class _InvalidResult(ValueError):
    """A function result that API Gateway could not turn into a response."""


@dataclass(frozen=True)
class _CompiledRoute:
    route: Route
    segments: tuple[str, ...]
    # Per segment: 0 literal, 1 {param}, 2 {greedy+}; smaller sorts first, which is HTTP API's
    # "most specific match wins" (exact, then path variables, then greedy, then $default).
    rank: tuple[int, ...]

    @classmethod
    def of(cls, route: Route) -> _CompiledRoute:
        if route.method not in METHODS:
            raise ValueError(f"route {route.key}: unknown method {route.method!r}")
        if route.path == "$default":
            return cls(route, (), ())
        if not route.path.startswith("/"):
            raise ValueError(f"route {route.key}: the path must start with '/'")
        segments = tuple(route.path.split("/")[1:])
        rank = []
        for i, segment in enumerate(segments):
            if segment.startswith("{") and segment.endswith("}"):
                greedy = segment.endswith("+}")
                if greedy and i != len(segments) - 1:
                    raise ValueError(f"route {route.key}: a greedy path variable must be last")
                rank.append(2 if greedy else 1)
            elif "{" in segment or "}" in segment:
                raise ValueError(f"route {route.key}: a path variable must be a whole segment")
            else:
                rank.append(0)
        return cls(route, segments, tuple(rank))

    def match(self, parts: list[str]) -> dict[str, str] | None:
        """The path parameters when the route matches the path's segments."""
        if self.route.path == "$default":
            return {}
        params: dict[str, str] = {}
        for i, (segment, kind) in enumerate(zip(self.segments, self.rank, strict=True)):
            if kind == 2:
                rest = "/".join(parts[i:])
                if not rest:
                    return None
                params[segment[1:-2]] = rest
                return params
            if i >= len(parts):
                return None
            if kind == 1:
                if not parts[i]:
                    return None
                params[segment[1:-1]] = parts[i]
            elif parts[i] != segment:
                return None
        return params if len(parts) == len(self.segments) else None

    def sort_key(self) -> tuple[bool, tuple[int, ...], bool]:
        return (self.route.path == "$default", self.rank, self.route.method == "ANY")


@dataclass
class _Request:
    """A request as API Gateway sees it, before it becomes an event."""

    method: str
    path: str
    raw_query: str
    headers: dict[str, str]
    cookies: list[str]
    query: dict[str, str]
    body: bytes
    source_ip: str
    request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    epoch_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    def context(self, route_key: str) -> dict[str, Any]:
        host = self.headers.get("host", "")
        hostname = host.split(":")[0]
        t = time.gmtime(self.epoch_ms / 1000)
        return {
            "accountId": ACCOUNT_ID,
            "apiId": API_ID,
            "domainName": host,
            "domainPrefix": hostname.split(".")[0],
            "http": {
                "method": self.method,
                "path": self.path,
                "protocol": "HTTP/1.1",
                "sourceIp": self.source_ip,
                "userAgent": self.headers.get("user-agent", ""),
            },
            "requestId": self.request_id,
            "routeKey": route_key,
            "stage": STAGE,
            "time": f"{t.tm_mday:02d}/{_MONTHS[t.tm_mon - 1]}/{t.tm_year}:"
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} +0000",
            "timeEpoch": self.epoch_ms,
        }

    def common(self, route_key: str, params: dict[str, str]) -> dict[str, Any]:
        """The fields the integration event and the authorizer event share."""
        event: dict[str, Any] = {
            "version": "2.0",
            "routeKey": route_key,
            "rawPath": self.path,
            "rawQueryString": self.raw_query,
            "headers": dict(self.headers),
            "requestContext": self.context(route_key),
        }
        if self.cookies:
            event["cookies"] = list(self.cookies)
        if self.query:
            event["queryStringParameters"] = dict(self.query)
        if params:
            event["pathParameters"] = dict(params)
        return event


def _parse_request(
    method: str, raw_path: str, query: str, headers: list[tuple[str, str]], body: bytes, source_ip: str
) -> _Request:
    merged: dict[str, str] = {}
    cookies: list[str] = []
    for name, value in headers:
        lower = name.lower()
        if lower == "cookie":  # format 2.0 moves cookies out of the headers into their own list
            cookies.extend(c.strip() for c in value.split(";") if c.strip())
        else:
            merged[lower] = f"{merged[lower]},{value}" if lower in merged else value
    host = merged.get("host", "")
    forwarded = merged.get("x-forwarded-for")
    merged["x-forwarded-for"] = f"{forwarded}, {source_ip}" if forwarded else source_ip
    merged["x-forwarded-port"] = host.rpartition(":")[2] if ":" in host else "80"
    merged["x-forwarded-proto"] = "http"
    merged.setdefault("x-amzn-trace-id", f"Root=1-{int(time.time()):08x}-{uuid.uuid4().hex[:24]}")
    params: dict[str, str] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        params[key] = f"{params[key]},{value}" if key in params else value
    # HTTP API decodes the path once before routing: rawPath is decoded, and so is an encoded "/".
    path = unquote(raw_path or "/", errors="replace")
    return _Request(method.upper(), path, query, merged, cookies, params, body, source_ip)


def _is_text(content_type: str) -> bool:
    media = content_type.split(";")[0].strip().lower()
    return (
        media.startswith("text/")
        or media in TEXT_MEDIA_TYPES
        or media.endswith("+json")
        or media.endswith("+xml")
    )


def _body_fields(request: _Request) -> dict[str, Any]:
    if not request.body:
        return {"isBase64Encoded": False}
    if _is_text(request.headers.get("content-type", "")):
        try:
            return {"body": request.body.decode("utf-8"), "isBase64Encoded": False}
        except UnicodeDecodeError:
            pass
    return {"body": base64.b64encode(request.body).decode("ascii"), "isBase64Encoded": True}


def _round_trip(value: Any) -> Any:
    """What crosses the Lambda boundary is JSON: nothing shared, nothing unserialisable."""
    return json.loads(json.dumps(value))


def _to_response(result: Any, request_id: str) -> Response:
    """Read a function's result the way payload format 2.0 does."""
    headers: list[tuple[str, str]] = []
    if not isinstance(result, dict) or "statusCode" not in result:
        # Valid JSON without a statusCode: 200, application/json, the result itself as the body.
        headers = [("content-type", "application/json"), ("apigw-requestid", request_id)]
        return Response(200, headers, json.dumps(result).encode())
    status = result["statusCode"]
    if not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 599:
        raise _InvalidResult(f"statusCode {status!r} is not an HTTP status")
    for name, value in (result.get("headers") or {}).items():
        if isinstance(value, dict | list):
            raise _InvalidResult(f"header {name!r} is not a string")
        if name.lower() not in _HOP_BY_HOP:
            headers.append((name, str(value).lower() if isinstance(value, bool) else str(value)))
    # Payload 2.0 ignores multiValueHeaders; cookies are the only repeated header it can express.
    for cookie in result.get("cookies") or []:
        if not isinstance(cookie, str):
            raise _InvalidResult("cookies must be strings")
        headers.append(("set-cookie", cookie))
    headers.append(("apigw-requestid", request_id))
    body = result.get("body")
    if body is None:
        return Response(status, headers, b"")
    if not isinstance(body, str):
        raise _InvalidResult("body must be a string")
    if not result.get("isBase64Encoded"):
        return Response(status, headers, body.encode("utf-8"))
    try:
        return Response(status, headers, base64.b64decode(body, validate=True))
    except binascii.Error as e:
        raise _InvalidResult("isBase64Encoded is set but the body is not base64") from e


class Gateway:
    """Routes requests to functions, authorizing them first, exactly as the deployed HTTP API does."""

    def __init__(
        self,
        routes: list[Route],
        invoke: Invoke,
        *,
        authorizer: str | None,
        identity_headers: tuple[str, ...] = ("authorization",),
        authorizer_ttl: float = 300,
        max_body_bytes: int = MAX_BODY_BYTES,
        clock: Callable[[], float] = time.monotonic,
        throttles: dict[str, tuple[float, float]] | None = None,
    ) -> None:
        compiled = [_CompiledRoute.of(route) for route in routes]
        keys = [c.route.key for c in compiled]
        duplicates = sorted({k for k in keys if keys.count(k) > 1})
        if duplicates:
            raise ValueError(f"duplicate routes: {', '.join(duplicates)}")
        self._routes = sorted(compiled, key=_CompiledRoute.sort_key)
        self._invoke = invoke
        self._authorizer = authorizer
        # Without identity sources API Gateway calls the authorizer for every request and caches
        # nothing (caching needs an identity to key on).
        self._identity_headers = tuple(h.lower() for h in identity_headers)
        self._ttl = authorizer_ttl if self._identity_headers else 0
        self._clock = clock
        self.max_body_bytes = max_body_bytes
        self._cache: dict[tuple[str, ...], tuple[float, bool, Any]] = {}
        self._lock = threading.Lock()
        # Route key → its bucket, for the routes the stage's RouteSettings throttle (rate, burst).
        self._buckets = {
            key: _Bucket(rate, burst, burst, clock()) for key, (rate, burst) in (throttles or {}).items()
        }

    def handle(
        self,
        method: str,
        raw_path: str,
        query: str,
        headers: list[tuple[str, str]],
        body: bytes,
        source_ip: str = "127.0.0.1",
    ) -> Response:
        """Turn one HTTP request into events, invoke the authorizer and the function, map the result.

        `raw_path` is the request target's path as received (percent-encoded) and `query` the raw query
        string without its "?".
        """
        request = _parse_request(method, raw_path, query, headers, body, source_ip)
        rid = request.request_id
        if len(body) > self.max_body_bytes:
            return error_response(413, rid)
        found = self._match(request)
        if found is None:
            return error_response(404, rid)
        route, params = found
        bucket = self._buckets.get(route.key)
        if bucket is not None:
            with self._lock:
                admitted = bucket.take(self._clock())
            if not admitted:
                return error_response(429, rid)
        context: Any = None
        guarded = route.authorized and self._authorizer is not None
        if guarded and self._authorizer is not None:
            identities = tuple(request.headers.get(h, "") for h in self._identity_headers)
            if not all(identities):  # a missing identity source is refused without invoking anything
                return error_response(401, rid)
            decision = self._authorize(self._authorizer, identities, request, route, params)
            if decision is None:
                return error_response(500, rid)
            allowed, context = decision
            if not allowed:
                return error_response(403, rid)
        event = request.common(route.key, params) | _body_fields(request)
        if guarded:
            event["requestContext"]["authorizer"] = {"lambda": context}
        try:
            result = _round_trip(self._invoke(route.function, _round_trip(event)))
            return _to_response(result, rid)
        except _InvalidResult as e:
            logger.error("function %s returned a malformed response: %s", route.function, e)
        except Exception:
            # A failed invocation is an HTTP 500 in AWS; the traceback is the developer's only clue.
            logger.exception("function %s failed on %s %s", route.function, request.method, request.path)
        return error_response(500, rid)

    def _match(self, request: _Request) -> tuple[Route, dict[str, str]] | None:
        parts = request.path.split("/")[1:]
        for compiled in self._routes:  # most specific first
            if compiled.route.method not in ("ANY", request.method):
                continue
            params = compiled.match(parts)
            if params is not None:
                return compiled.route, params
        return None

    def _authorize(
        self,
        function: str,
        identities: tuple[str, ...],
        request: _Request,
        route: Route,
        params: dict[str, str],
    ) -> tuple[bool, Any] | None:
        """(allowed, context), or None when the authorizer failed; cached per identity like
        `ReauthorizeEvery`, for every route that uses the authorizer (never without identity sources)."""
        now = self._clock()
        with self._lock:
            cached = self._cache.get(identities) if self._ttl > 0 else None
        if cached is not None and cached[0] > now:
            return cached[1], cached[2]
        event = request.common(route.key, params) | {
            "type": "REQUEST",
            "routeArn": f"arn:aws:execute-api:{REGION}:{ACCOUNT_ID}:{API_ID}/{STAGE}/"
            f"{request.method}{request.path}",
        }
        if identities:
            event["identitySource"] = list(identities)
        try:
            result = _round_trip(self._invoke(function, _round_trip(event)))
        except Exception:
            logger.exception("authorizer %s failed on %s %s", function, request.method, request.path)
            return None
        if (
            not isinstance(result, dict)
            or not isinstance(result.get("isAuthorized"), bool)
            or not isinstance(result.get("context"), dict | None)
        ):
            logger.error("authorizer %s returned a malformed simple response: %r", function, result)
            return None
        allowed, context = result["isAuthorized"], result.get("context")
        if self._ttl > 0:
            with self._lock:
                self._cache[identities] = (now + self._ttl, allowed, context)
        return allowed, context


class _Refused(Exception):
    """A request the gateway answers itself, before any function sees it."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


# Connections the kernel holds for the accept loop. socketserver's default of 5 reset most of 40
# connections opened at once (issue 30); API Gateway takes thousands. Linux caps it at somaxconn (4096
# by default since 5.4), so this asks for what a soak or a burst of clients needs.
LISTEN_BACKLOG = 1024


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG
    gateway: Gateway
    quiet: bool


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive; every response carries Content-Length
    server_version = "stepwise-local"
    sys_version = ""
    timeout = 120  # an idle keep-alive connection frees its thread after this long
    server: _Server

    def _serve(self) -> None:
        started = time.perf_counter()
        path, _, query = self.path.partition("?")
        try:
            body = self._read_body(self.server.gateway.max_body_bytes)
        except _Refused as refused:
            response = error_response(refused.status)
        else:
            if body is None:  # the client left mid-body: there is nobody to answer
                self.close_connection = True
                return
            response = self._handle(path, query, body)
        self._write(response)
        if not self.server.quiet:
            ms = (time.perf_counter() - started) * 1000
            sys.stderr.write(f"{self.command} {path} {response.status} {ms:.0f}ms\n")
            sys.stderr.flush()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _serve

    def __getattr__(self, name: str) -> Any:
        # Any other method (TRACE, PROPFIND, a made-up one) is routed like the rest, as API Gateway
        # does: no route matches it, so 404 {"message":"Not Found"}, where http.server would say 501.
        if name.startswith("do_"):
            return self._serve
        raise AttributeError(name)

    def _handle(self, path: str, query: str, body: bytes) -> Response:
        headers = [(k, v) for k, v in self.headers.items() if k.lower() != "transfer-encoding"]
        if not any(k.lower() == "host" for k, _ in headers):
            host, port = self.server.server_address[:2]
            headers.append(("host", f"{host!s}:{port}"))
        return self.server.gateway.handle(
            self.command, path, query, headers, body, source_ip=self.client_address[0]
        )

    def _read_body(self, limit: int) -> bytes | None:
        """The request body, None when the client hung up before sending all of it."""
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            return self._read_chunked(limit)
        try:
            length = int(self.headers.get("content-length") or 0)
        except ValueError:
            self.close_connection = True
            raise _Refused(400) from None
        if length > limit:
            self._discard(length, limit)
            raise _Refused(413)
        body = self.rfile.read(length) if length > 0 else b""
        return body if len(body) == length else None

    def _read_chunked(self, limit: int) -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        while True:
            line = self.rfile.readline(1024)
            if not line:
                return None
            try:
                n = int(line.split(b";")[0].strip(), 16)
            except ValueError:
                self.close_connection = True
                raise _Refused(400) from None
            if n == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)
            size += n
            if size > limit:
                self.close_connection = True  # the rest of the stream is unread
                raise _Refused(413)
            chunks.append(self.rfile.read(n))
            self.rfile.readline(1024)

    def _discard(self, length: int, limit: int) -> None:
        # Drain a modest excess so the client reads the 413 instead of a reset; close on a huge one.
        if length > 4 * limit:
            self.close_connection = True
            return
        while length > 0:
            chunk = self.rfile.read(min(length, 1 << 16))
            if not chunk:
                self.close_connection = True
                return
            length -= len(chunk)

    def _write(self, response: Response) -> None:
        try:
            self.send_response(response.status)
            for name, value in response.headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(response.body)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(response.body)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away; nothing left to tell it

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass  # _serve logs one compact line once the response is out

    def log_message(self, format: str, *args: Any) -> None:
        if not self.server.quiet:
            sys.stderr.write(f"gateway: {format % args}\n")


def bind(
    gateway: Gateway, host: str = "127.0.0.1", port: int = 3000, *, quiet: bool = False
) -> ThreadingHTTPServer:
    """The gateway's HTTP server, bound and listening but not yet accepting: `serve_forever()` starts
    it (serve() does both)."""
    server = _Server((host, port), _Handler)
    server.gateway = gateway
    server.quiet = quiet
    return server


def serve(
    gateway: Gateway, host: str = "127.0.0.1", port: int = 3000, *, quiet: bool = False
) -> ThreadingHTTPServer:
    """Serve the gateway over HTTP from a daemon thread. Port 0 picks a free port (read it from
    `server.server_address`); stop with `server.shutdown()` then `server.server_close()`."""
    server = bind(gateway, host, port, quiet=quiet)
    # A short poll interval keeps shutdown() quick; it costs nothing measurable on an idle loop.
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="gateway", daemon=True
    )
    thread.start()
    return server
