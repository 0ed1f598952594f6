"""http_request: the model calls any public HTTP(S) URL and reads the answer.

Unlike the peer runtime's tool of the same name, every connection (redirects included) goes through the
SSRF guard: loopback, private, link-local and metadata addresses are refused (`blocked_destination`),
unless STEPWISE_ALLOW_HOSTS exempts them. A tenant can narrow the tool further with `allowed_hosts`.

The result is `{status, headers, body}` for any HTTP status (a 404 is an answer the model can act on,
not a failure of the tool): `headers` keeps only content-type, content-length and location; `body` is
parsed JSON when the response says it is JSON and was not cut, else text; it is read up to 5 MiB (the
limit the custom HTTP tools use, with their marker beyond it), and the loop describes a big table or
pages a long text (stepwise.loop.results), as for any tool.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator

from stepwise.core import safejson
from stepwise.net.outbound import OutboundRefused
from stepwise.net.ssrf import AllowHosts, guarded_client
from stepwise.tools.base import ToolResult
from stepwise.tools.builtin import Settings, ToolScope, input_schema
from stepwise.tools.builtin._provider import http_url
from stepwise.tools.http_tool import (
    HTTP_READ_LIMIT,
    USER_AGENT,
    _drop_secrets_off_origin,
    _is_json,
    _read_capped,
    truncation_marker,
)

NAME = "http_request"
Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"]
RESPONSE_LIMIT = HTTP_READ_LIMIT  # bytes of the body read; a big one is described or paged by the loop
RESPONSE_HEADERS = ("content-type", "content-length", "location")
TIMEOUT_SECONDS = 30.0
# Framing headers belong to the HTTP client: a model-written Content-Length or Host would only corrupt
# the request (the SSRF guard checks where the socket goes, whatever Host says).
_CLIENT_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 token
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")

DESCRIPTION = (
    "Send an HTTP request to a public http(s) URL and read the response: its status, its content-type, "
    "content-length and location headers, and its body (parsed when it is JSON), read up to "
    f"{RESPONSE_LIMIT // (1024 * 1024)} MiB. Internal and private network addresses are refused."
)


class Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    method: Method = Field(description="The HTTP method.")
    # Checked as an http(s) URL when the request is built (http_url): "format" is only what the model reads.
    url: str = Field(json_schema_extra={"format": "uri"}, description="An absolute http or https URL.")
    headers: dict[str, str] | None = Field(None, description="Request headers, e.g. Authorization or Accept.")
    body: str | dict[str, Any] | None = Field(
        None,
        description="The request body: a JSON object is sent as application/json; a string is sent "
        "as it is (set a Content-Type header for it).",
    )

    @classmethod
    def prepare(cls, arguments: dict[str, Any]) -> dict[str, Any]:
        """The method in upper case, as the schema lists it: a model writing `get` means GET."""
        if isinstance(arguments.get("method"), str):
            return {**arguments, "method": arguments["method"].upper()}
        return arguments


INPUT_SCHEMA: dict[str, Any] = input_schema(Arguments)
READ_ONLY = False
EFFECT: Literal["undeclared"] = "undeclared"
KEY_FIELDS: list[str] = []


class Config(BaseModel):
    """`allowed_hosts`: when set, the only hostnames the tool may request (exact names, any port;
    redirects included). It narrows the SSRF guard, never widens it."""

    model_config = ConfigDict(extra="forbid")

    allowed_hosts: list[str] | None = None

    @field_validator("allowed_hosts")
    @classmethod
    def _hostnames(cls, hosts: list[str] | None) -> list[str] | None:
        if hosts is None:
            return None
        names = []
        for host in hosts:
            name = _normal_host(host)
            if not name or any(char in name for char in "/:@ ?#"):
                raise ValueError(f"{host!r} is not a hostname (no scheme, port or path)")
            names.append(name)
        return names


class HostNotAllowed(Exception):
    def __init__(self, host: str) -> None:
        super().__init__(host)
        self.host = host


def run(arguments: Arguments, *, scope: ToolScope, settings: Settings, config: Config) -> ToolResult:
    return send(arguments, config=config)


def send(
    arguments: Arguments,
    *,
    config: Config,
    timeout: float = TIMEOUT_SECONDS,
    allow_hosts: AllowHosts = None,
) -> ToolResult:
    """Make the request the model asked for. `allow_hosts` None reads STEPWISE_ALLOW_HOSTS."""
    try:
        method, url, headers, content = build_request(arguments)
    except ValueError as exc:
        return ToolResult.failure("invalid_arguments", str(exc))

    # The model's headers (a token it was given, say) do not follow a redirect to another origin.
    hooks: dict[str, list[Callable[[httpx.Request], None]]] = {
        "request": [_drop_secrets_off_origin(url, dict(arguments.headers or {}))]
    }
    if config.allowed_hosts is not None:
        hooks["request"].insert(0, _only_hosts(frozenset(config.allowed_hosts)))
    try:
        with (
            guarded_client(timeout=timeout, allow_hosts=allow_hosts, event_hooks=hooks) as client,
            client.stream(method, url, headers=headers, content=content) as response,
        ):
            text, truncated = _read_capped(response)
    except HostNotAllowed as exc:
        allowed = ", ".join(config.allowed_hosts or []) or "none"
        return ToolResult.failure(
            "host_not_allowed", f"host {exc.host!r} is not one this agent may request (allowed: {allowed})"
        )
    except OutboundRefused as exc:  # a blocked destination, a body too large or in stacked encodings
        return ToolResult.failure(exc.code, exc.message)
    except httpx.TimeoutException:
        return ToolResult.failure("timeout", f"no response from {url.host} within {timeout:g} seconds")
    except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
        return ToolResult.failure("unreachable", f"could not reach {url.host}: {exc}")
    except httpx.TooManyRedirects:
        return ToolResult.failure("http_error", f"{url.host} redirected too many times")
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
        return ToolResult.failure("invalid_arguments", f"url: not a usable URL: {exc}")
    except httpx.HTTPError as exc:
        return ToolResult.failure("http_error", f"{type(exc).__name__}: {exc}")

    body: Any = text + truncation_marker() if truncated else text
    if not truncated and text and _is_json(response):
        with contextlib.suppress(ValueError):  # a body that only claims to be JSON stays text
            body = safejson.loads(text)
    kept = {name: response.headers[name] for name in RESPONSE_HEADERS if name in response.headers}
    return ToolResult(output={"status": response.status_code, "headers": kept, "body": body})


def build_request(arguments: Arguments) -> tuple[str, httpx.URL, httpx.Headers, bytes | None]:
    """Method, URL, headers and body; ValueError for what the schema cannot say."""
    url = http_url(arguments.url)
    headers = httpx.Headers({"User-Agent": USER_AGENT})
    for name, value in (arguments.headers or {}).items():
        if not _HEADER_NAME.fullmatch(name):
            raise ValueError(f"headers: {name!r} is not a valid header name")
        if not _HEADER_VALUE.fullmatch(value):
            raise ValueError(f"headers/{name}: header values must be printable ASCII on one line")
        if name.lower() not in _CLIENT_HEADERS:
            headers[name] = value
    body = arguments.body
    content: bytes | None = None
    if isinstance(body, dict):
        try:
            content = json.dumps(body, ensure_ascii=False, allow_nan=False).encode()
        except ValueError as exc:
            raise ValueError(f"body: must be plain JSON: {exc}") from None
        headers.setdefault("Content-Type", "application/json")
    elif isinstance(body, str):
        content = body.encode()
    return arguments.method, url, headers, content


def _only_hosts(allowed: frozenset[str]) -> Callable[[httpx.Request], None]:
    """A request hook (it runs for every redirect too) refusing hosts outside the tenant's list."""

    def hook(request: httpx.Request) -> None:
        if _normal_host(request.url.host) not in allowed:
            raise HostNotAllowed(request.url.host)

    return hook


def _normal_host(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()
