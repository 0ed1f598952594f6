"""What the builtin tools share: argument checks, caps with a visible marker, and calls to a provider's
JSON API (Exa, Firecrawl, the code sandbox) through the SSRF guard, with every way such a call can fail
turned into an error code the model can read.

Error codes, the same for every provider:

    not_configured     a setting the tool needs (an API key, the sandbox URL) is missing
    invalid_arguments  the model's arguments break the tool's schema
    blocked_destination  the SSRF guard refused the destination
    timeout            no answer in time (also the provider's own 408)
    unreachable        no connection (refused, reset, DNS)
    rate_limited       the provider answered 429
    provider_auth      the provider answered 401 or 403: the key is wrong or lacks access
    provider_error     the provider answered 5xx, redirected, or sent something that is not its JSON
    provider_rejected  any other 4xx: the provider refused this request (its message says why)
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from stepwise.core import safejson
from stepwise.net.outbound import OutboundRefused, ResponseTooLarge
from stepwise.net.ssrf import AllowHosts, guarded_client
from stepwise.tools.base import ToolResult
from stepwise.tools.builtin import Settings
from stepwise.tools.http_tool import USER_AGENT, schema_problem

# Bytes of a provider's answer read into memory at most, whatever the tool keeps of it afterwards: a
# provider (or whatever a base-URL override points at) cannot exhaust the Lambda's memory.
PROVIDER_RESPONSE_BYTES = 8 * 1024 * 1024
ERROR_DETAIL_LIMIT = 500  # characters of a provider's error message quoted to the model


def truncation_marker(omitted: int, total: int) -> str:
    return f"\n…[truncated: {omitted} of {total} characters omitted]"


def cap(text: str, limit: int) -> str:
    """`text` cut at `limit` characters, with a marker the model can see when anything was cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + truncation_marker(len(text) - limit, len(text))


def invalid_arguments(schema: dict[str, Any], arguments: Any) -> ToolResult | None:
    """The failure for arguments that break `schema`, or None when they fit."""
    if not isinstance(arguments, dict):
        return ToolResult.failure("invalid_arguments", "(arguments): must be an object")
    problem = schema_problem(schema, arguments)
    return None if problem is None else ToolResult.failure("invalid_arguments", problem)


def http_url(value: str, field: str = "url") -> httpx.URL:
    """`value` as an absolute http(s) URL; ValueError naming `field` otherwise."""
    try:
        url = httpx.URL(value)
    except httpx.InvalidURL as exc:
        raise ValueError(f"{field}: not a valid URL: {exc}") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError(f"{field}: must be an absolute http or https URL")
    return url


def setting(settings: Settings, key: str) -> str | None:
    """A setting's value, or None when it is missing or blank."""
    value = settings.get(key)
    return value.strip() if value and value.strip() else None


def not_configured(tool: str, key: str) -> ToolResult:
    return ToolResult.failure(
        "not_configured", f"{tool} needs the {key} setting: set it with PUT /v1/settings/{key}"
    )


def base_url(configured: str | None, default: str) -> str:
    """The provider's base URL: `configured` (from the environment, read per call) overrides it."""
    return (configured or default).rstrip("/")


def post_json(
    url: str,
    payload: dict[str, Any],
    *,
    provider: str,
    headers: dict[str, str],
    timeout: float,
    allow_hosts: AllowHosts = None,
) -> ToolResult:
    """POST `payload` as JSON to a provider and return its JSON answer as the output, or a failure.

    Redirects are not followed: a provider's API has no reason to redirect a POST, and following one would
    carry the API key to wherever it points. `timeout` bounds the whole exchange, and the answer may decode
    to at most PROVIDER_RESPONSE_BYTES (ssrf.guarded_client).
    """
    body = json.dumps(payload, ensure_ascii=False).encode()
    request_headers = {
        "User-Agent": USER_AGENT,
        "Accept": "application/json",
        "Content-Type": "application/json",
        **headers,
    }
    try:
        with (
            guarded_client(
                timeout=timeout,
                max_response_bytes=PROVIDER_RESPONSE_BYTES,
                allow_hosts=allow_hosts,
                follow_redirects=False,
            ) as client,
            client.stream("POST", url, headers=request_headers, content=body) as response,
        ):
            raw = response.read()
            status = response.status_code
    except ResponseTooLarge:
        return ToolResult.failure(
            "provider_error", f"{provider} answered with more than {PROVIDER_RESPONSE_BYTES} bytes"
        )
    except OutboundRefused as exc:  # a blocked destination, or an answer in stacked encodings
        return ToolResult.failure(exc.code, f"{provider}: {exc.message}")
    except UnicodeEncodeError:
        # Only the tenant's settings (keys) reach these headers; the model's words go in the body.
        return ToolResult.failure(
            "not_configured", f"{provider}: a key or setting sent in a header is not ASCII"
        )
    except httpx.TimeoutException:
        return ToolResult.failure("timeout", f"{provider} did not answer within {timeout:g} seconds")
    except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
        return ToolResult.failure("unreachable", f"could not reach {provider}: {exc}")
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
        return ToolResult.failure("not_configured", f"{provider}: the URL {url!r} is not usable: {exc}")
    except httpx.HTTPError as exc:
        return ToolResult.failure("provider_error", f"{provider}: {type(exc).__name__}: {exc}")

    text = raw.decode("utf-8", errors="replace")
    if not 200 <= status < 300:
        return status_failure(provider, status, text, response.headers.get("retry-after"))
    try:
        return ToolResult(output=safejson.loads(text))
    except ValueError:
        return ToolResult.failure(
            "provider_error", f"{provider} answered HTTP {status} with a body that is not JSON"
        )


def status_failure(provider: str, status: int, body: str, retry_after: str | None = None) -> ToolResult:
    """The failure for a provider's non-2xx answer, quoting the provider's own message."""
    detail = error_detail(body)
    suffix = f": {detail}" if detail else ""
    if status == 429:
        wait = f" (retry after {retry_after} seconds)" if retry_after else ""
        return ToolResult.failure("rate_limited", f"{provider} is rate limiting requests{wait}{suffix}")
    if status in (401, 403):
        return ToolResult.failure(
            "provider_auth", f"{provider} refused the credentials (HTTP {status}){suffix}"
        )
    if status == 408:
        return ToolResult.failure("timeout", f"{provider} timed out (HTTP 408){suffix}")
    if status >= 500:
        return ToolResult.failure("provider_error", f"{provider} failed (HTTP {status}){suffix}")
    if 300 <= status < 400:
        return ToolResult.failure("provider_error", f"{provider} answered with a redirect (HTTP {status})")
    return ToolResult.failure("provider_rejected", f"{provider} rejected the request (HTTP {status}){suffix}")


def error_detail(body: str) -> str:
    """The message in a provider's error body (`error`, `message` or `detail`, as JSON), else the body."""
    try:
        parsed = safejson.loads(body)
    except ValueError:
        return cap(body.strip(), ERROR_DETAIL_LIMIT)
    if isinstance(parsed, dict):
        for key in ("error", "message", "detail"):
            value = parsed.get(key)
            if isinstance(value, dict):
                value = value.get("message", value)
            if value:
                text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
                return cap(text, ERROR_DETAIL_LIMIT)
    return cap(body.strip(), ERROR_DETAIL_LIMIT)
