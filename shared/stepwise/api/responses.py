"""JSON responses, the contract's error shape, and how routes document both in the OpenAPI spec."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from pydantic import BaseModel, Field

from stepwise.core.errors import ApiError

JSON = "application/json"
HTML = "text/html; charset=utf-8"


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """The resolver validates `body` against the route's `Response[Model]` and serializes it."""
    return Response(status_code=status, content_type=JSON, body=body, headers=headers)


def error_response(
    status: int, code: str, message: str, details: Any = None, headers: dict[str, str] | None = None
) -> Response:
    body = {"error": {"code": code, "message": message, "details": details}}
    return json_response(body, status, headers or None)


def from_error(exc: ApiError) -> Response:
    return error_response(exc.status, exc.code, exc.message, exc.details, exc.headers())


# --- OpenAPI ---------------------------------------------------------------------------------------


class ErrorInfo(BaseModel):
    code: str = Field(description="Stable and machine-readable, e.g. `agent_not_found`")
    message: str = Field(description="For humans; may change")
    details: Any = Field(default=None, description="More about the error (e.g. the invalid fields), or null")


class Error(BaseModel):
    """Every error the API answers itself."""

    error: ErrorInfo


ERRORS: dict[int, str] = {
    400: "Malformed: the body is not JSON, or a value is not one this API issued",
    401: "No API key, or one that is not valid",
    403: "Forbidden",
    404: "Not found; an id that belongs to another tenant is a 404 too",
    409: "Conflict with the current state",
    410: "Gone",
    413: "The body is over 1 MiB",
    422: "Validation error: `details` lists the invalid fields",
    429: "A per-tenant quota is reached (`quota_exceeded`); `Retry-After` says when to try again",
    502: "The model behind the call failed",
    503: "The model is rate limited or unavailable; retry later",
}


def responses(
    status: int,
    description: str,
    *errors: int,
    public: bool = False,
    content: dict[str, Any] | None = None,
    described: dict[int, str] | None = None,
) -> dict[int, OpenAPIResponse]:
    """A route's documented responses: the success one, then its errors in the contract's shape.

    Without `content`, the success body's schema is the route's return annotation (`Response[Model]`);
    `content={}` documents an empty body (204). A private route can always answer 401, and any route
    422 (the resolver validates every parameter and body). `described` words an error for this route.
    """
    documented: dict[int, OpenAPIResponse] = {status: {"description": description}}
    if content is not None:
        documented[status]["content"] = content
    for code in sorted({*errors, 422} | (set() if public else {401})):
        wording = (described or {}).get(code, ERRORS[code])
        documented[code] = {"description": wording, "content": {JSON: {"model": Error}}}
    return documented


def model_content(model: Any, media_type: str = JSON) -> dict[str, Any]:
    """A documented body whose schema is `model`, for routes whose return annotation is looser."""
    return {media_type: {"model": model}}
