"""Executing a custom HTTP tool: the model's arguments go to the tenant's endpoint, its answer comes back.

Everything the endpoint or the model can get wrong (bad arguments, a blocked or unreachable host, a
slow or huge or failing response) becomes a ToolResult failure the model can read and react to.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Callable
from typing import Any

import httpx
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from referencing import Registry
from referencing.exceptions import Unresolvable

from stepwise.core import safejson
from stepwise.net.outbound import OutboundRefused
from stepwise.net.ssrf import AllowHosts, guarded_client
from stepwise.tools.base import ToolResult
from stepwise.tools.models import HttpTool

# Bytes of an endpoint's answer read and kept whole: a big answer is a table to describe or a text to
# page (stepwise.loop.results keeps it whole in S3 for result_read), not something to cut before anyone
# looked at it. Under the outbound guard's RESPONSE_LIMIT (8 MiB), so the guard never trips first.
HTTP_READ_LIMIT = 5 * 1024 * 1024
ERROR_BODY_LIMIT = 10_000  # characters of a failing answer's body quoted in its error: a diagnosis, not data
USER_AGENT = "stepwise/0.1"


def truncation_marker(limit: int | None = None) -> str:
    """What ends a body cut at `limit` bytes (None: the read limit in force)."""
    return f"\n…[truncated: the response exceeded {limit or HTTP_READ_LIMIT:,} bytes]"


TRUNCATION_MARKER = truncation_marker(HTTP_READ_LIMIT)
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def call_http_tool(
    tool: HttpTool,
    arguments: dict[str, Any],
    *,
    idempotency_key: str | None = None,
    allow_hosts: AllowHosts = None,
    timeout: float = 30.0,
) -> ToolResult:
    """Call `tool`'s endpoint with `arguments` and return its response, or a failure the model can read.

    `allow_hosts` None reads STEPWISE_ALLOW_HOSTS. `timeout` bounds the whole exchange (ssrf.guarded_client).
    """
    try:
        problem = schema_problem(tool.input_schema, arguments)
    except Unresolvable as exc:
        return ToolResult.failure(
            "invalid_tool", f"{tool.name}: input_schema has an unresolvable $ref: {exc}"
        )
    if problem is not None:
        return ToolResult.failure("invalid_arguments", problem)
    try:
        # Encoded here rather than by httpx so NaN/Infinity (which Python's json parser lets through from
        # a model) is an argument error, not an exception.
        body = json.dumps(arguments, ensure_ascii=False, allow_nan=False)
    except ValueError as exc:
        return ToolResult.failure("invalid_arguments", f"arguments must be plain JSON: {exc}")

    # The tool's headers may replace the User-Agent but not the two the runtime owns.
    headers = httpx.Headers({"User-Agent": USER_AGENT})
    try:
        headers.update(tool.headers)
    except UnicodeEncodeError:
        return ToolResult.failure("invalid_tool", f"{tool.name}: header values must be ASCII")
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    content: bytes | None = None
    if tool.method in _BODY_METHODS:
        headers["Content-Type"] = "application/json"
        content = body.encode()

    try:
        url = httpx.URL(tool.endpoint)
        if content is None:
            # Merged by hand: httpx's `params=` would replace the endpoint's own query, and the endpoint's
            # parameters win over same-named arguments so the model cannot override what the tenant fixed.
            url = url.copy_with(params=httpx.QueryParams(query_params(arguments)).merge(url.params))
        hooks = {"request": [_drop_secrets_off_origin(url, tool.headers)]}
        with (
            guarded_client(timeout=timeout, allow_hosts=allow_hosts, event_hooks=hooks) as client,
            client.stream(tool.method, url, headers=headers, content=content) as response,
        ):
            text, truncated = _read_capped(response)
    except OutboundRefused as exc:  # a blocked destination, a body too large or in stacked encodings
        return ToolResult.failure(exc.code, f"{tool.name}: {exc.message}")
    except httpx.TimeoutException:
        return ToolResult.failure("timeout", f"{tool.name}: no response within {timeout:g} seconds")
    except (httpx.ConnectError, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
        return ToolResult.failure("unreachable", f"{tool.name}: could not reach the endpoint: {exc}")
    except httpx.TooManyRedirects:
        return ToolResult.failure("http_error", f"{tool.name}: the endpoint redirected too many times")
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
        return ToolResult.failure("invalid_endpoint", f"{tool.name}: the endpoint URL is not usable: {exc}")
    except httpx.HTTPError as exc:
        return ToolResult.failure("http_error", f"{tool.name}: {type(exc).__name__}: {exc}")

    if not response.is_success:
        if len(text) > ERROR_BODY_LIMIT:
            text = (
                text[:ERROR_BODY_LIMIT]
                + f"\n…[truncated: {len(text) - ERROR_BODY_LIMIT:,} characters omitted]"
            )
        return ToolResult.failure("http_error", f"HTTP {response.status_code}: {text}")
    if truncated:
        text += truncation_marker()
    if not truncated and _is_json(response):
        try:
            return ToolResult(output=safejson.loads(text))
        except ValueError:
            pass
    return ToolResult(output=text)


def schema_problem(schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """The most relevant way `arguments` break `schema`, as "<path>: <message>", or None when they fit.

    Raises referencing's Unresolvable for a `$ref` outside the schema.
    """
    # An empty registry: by default jsonschema fetches a remote `$ref` with urllib, outside the SSRF guard.
    validator = Draft202012Validator(schema, registry=Registry())
    error = best_match(validator.iter_errors(arguments))
    if error is None:
        return None
    path = "/".join(str(part) for part in error.absolute_path) or "(arguments)"
    return f"{path}: {error.message}"


def query_params(arguments: dict[str, Any]) -> dict[str, str]:
    """GET arguments as query parameters: strings as they are, other values JSON-encoded, nulls left out."""
    return {
        name: value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, allow_nan=False)
        for name, value in arguments.items()
        if value is not None
    }


def _drop_secrets_off_origin(
    origin: httpx.URL, tool_headers: dict[str, str]
) -> Callable[[httpx.Request], None]:
    """A request hook that keeps the tool's own headers (API keys, mostly) from following a redirect to
    another origin; httpx itself only drops Authorization."""

    def hook(request: httpx.Request) -> None:
        if (request.url.scheme, request.url.host, request.url.port) != (
            origin.scheme,
            origin.host,
            origin.port,
        ):
            for name in tool_headers:
                request.headers.pop(name, None)

    return hook


def _read_capped(response: httpx.Response) -> tuple[str, bool]:
    """The body as text, up to HTTP_READ_LIMIT bytes of it, and whether there was more.

    Streams, and stops reading at the limit, so a huge body is never downloaded (the guarded client
    bounds decoding and time; this bounds what is kept). A character cut by the limit is dropped.
    """
    limit = HTTP_READ_LIMIT  # read when called, so a test can lower it
    body = bytearray()
    truncated = False
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > limit:
            del body[limit:]
            truncated = True
            break
    try:
        decoder = codecs.getincrementaldecoder(response.encoding or "utf-8")(errors="replace")
    except LookupError:  # a charset Python does not know: read it as UTF-8
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    return decoder.decode(bytes(body), final=not truncated), truncated


def _is_json(response: httpx.Response) -> bool:
    media_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
    return media_type == "application/json" or media_type.endswith("+json")
