"""What the SDK raises: every error is a `StepwiseError` with the contract's stable `.code`.

The API answers errors as `{"error": {"code", "message", "details"}}`; each HTTP status has its own class
(`NotFoundError`, `ConflictError`, ...), so callers catch by kind and branch on `.code` within it.
An answer in another shape (API Gateway's own 401, a proxy's 502) still gets a code: `http_<status>`.
"""

from __future__ import annotations

from typing import Any

import httpx


class StepwiseError(Exception):
    """Base of every SDK error."""

    code: str = "stepwise_error"

    def __init__(
        self, message: str, *, code: str | None = None, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(f"{code or self.code}: {message}")
        self.message = message
        if code is not None:
            self.code = code
        # Always an object, as the API answers it: `{}` when there is nothing more to say.
        self.details: dict[str, Any] = dict(details or {})

    @property
    def field_errors(self) -> list[dict[str, Any]]:
        """A 422's invalid fields (`details.errors`: `[{loc, msg, type}]`); empty for any other error."""
        errors = self.details.get("errors")
        return list(errors) if isinstance(errors, list) else []


class ApiStatusError(StepwiseError):
    """The API answered with a status of 400 or above."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        response: httpx.Response,
    ) -> None:
        super().__init__(message, code=code, details=details)
        self.status = status
        self.response = response


class BadRequestError(ApiStatusError):
    """400: malformed (the body is not JSON, or a value is not one the API issued)."""


class AuthenticationError(ApiStatusError):
    """401: no API key, or one that is not valid."""


class PermissionDeniedError(ApiStatusError):
    """403."""


class NotFoundError(ApiStatusError):
    """404, also for an id that belongs to another tenant."""


class ConflictError(ApiStatusError):
    """409: the request conflicts with the current state (e.g. `session_busy`, `replay_unsafe`)."""


class GoneError(ApiStatusError):
    """410: e.g. a replay whose input is no longer stored (`input_gone`)."""


class PayloadTooLargeError(ApiStatusError):
    """413."""


class UnprocessableError(ApiStatusError):
    """422: validation failed; `field_errors` (`details.errors`) lists the invalid fields."""


class RateLimitError(ApiStatusError):
    """429; `retry_after` is the server's Retry-After in seconds, when it sent one."""

    @property
    def retry_after(self) -> float | None:
        return retry_after(self.response)


class ServerError(ApiStatusError):
    """5xx: the API or what stands in front of it failed."""


class ApiConnectionError(StepwiseError):
    """No HTTP answer at all: nothing listens there, DNS failed, or the connection broke."""

    code = "connection_error"

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot reach {url}: {reason}")
        self.url, self.reason = url, reason


class ApiTimeoutError(ApiConnectionError):
    """The request timed out."""

    code = "timeout"


class InvalidResponse(StepwiseError):
    """A success answer whose body is not the shape the spec gives it (`details.errors`: pydantic's)."""

    code = "invalid_response"


class WaitTimeout(StepwiseError):
    """`runs.wait(..., timeout=)` ran out before the run ended."""

    code = "wait_timeout"


BY_STATUS: dict[int, type[ApiStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    410: GoneError,
    413: PayloadTooLargeError,
    422: UnprocessableError,
    429: RateLimitError,
}


def error_from(response: httpx.Response) -> ApiStatusError:
    """The typed error for an answer of 400 or above."""
    status = response.status_code
    kind = BY_STATUS.get(status, ServerError if status >= 500 else ApiStatusError)
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and "code" in error:
        return kind(
            status,
            str(error["code"]),
            str(error.get("message", "")),
            details=error.get("details") if isinstance(error.get("details"), dict) else None,
            response=response,
        )
    message = body.get("message") if isinstance(body, dict) else None
    text = str(message or response.text.strip() or response.reason_phrase)
    return kind(status, f"http_{status}", text[:500], response=response)


def connection_error(url: str, exc: httpx.TransportError) -> ApiConnectionError:
    if isinstance(exc, httpx.TimeoutException):
        return ApiTimeoutError(url, "the request timed out")
    text = str(exc)
    if "refused" in text.lower() or "errno 111" in text.lower():
        return ApiConnectionError(url, "connection refused")
    return ApiConnectionError(url, text or type(exc).__name__)


def retry_after(response: httpx.Response) -> float | None:
    """Retry-After in seconds (its HTTP-date form is not used by this API)."""
    value = response.headers.get("retry-after")
    try:
        return max(float(value), 0.0) if value is not None else None
    except ValueError:
        return None
