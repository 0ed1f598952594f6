"""JSON responses, the contract's error shape, and how routes document both in the OpenAPI spec."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from pydantic import BaseModel, ConfigDict, Field

from stepwise.core.errors import ApiError, error_details

JSON = "application/json"
HTML = "text/html; charset=utf-8"


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """The resolver validates `body` against the route's `Response[Model]` and serializes it."""
    return Response(status_code=status, content_type=JSON, body=body, headers=headers)


def error_response(
    status: int, code: str, message: str, details: Any = None, headers: dict[str, str] | None = None
) -> Response:
    body = {"error": {"code": code, "message": message, "details": error_details(details)}}
    return json_response(body, status, headers or None)


def from_error(exc: ApiError) -> Response:
    return error_response(exc.status, exc.code, exc.message, exc.details, exc.headers())


# --- OpenAPI ---------------------------------------------------------------------------------------


class FieldError(BaseModel):
    loc: list[str] = Field(description="Where: `body`, `query`, `path` or `header`, then the field's path")
    msg: str
    type: str = Field(description="Stable and machine-readable, e.g. `missing`, `string_too_long`")


class ErrorDetails(BaseModel):
    """Always an object: `{}` when there is nothing more to say. A validation error (422) lists the
    invalid fields under `errors`; other errors name what they are about (`run_id`, `active_run_id`,
    `quota` and `limit`, `tool_call_ids`…)."""

    model_config = ConfigDict(extra="allow")

    errors: list[FieldError] | None = Field(default=None, description="The invalid fields (422)")


class ErrorInfo(BaseModel):
    code: str = Field(description="Stable and machine-readable, e.g. `agent_not_found`")
    message: str = Field(description="For humans; may change")
    details: ErrorDetails = Field(description="More about the error; always an object")


class Error(BaseModel):
    """Every error the API answers itself."""

    error: ErrorInfo


ERRORS: dict[int, str] = {
    400: "Malformed: the body is not JSON, or a value is not one this API issued",
    401: "No API key, or one that is not valid",
    403: "Forbidden; on any private route `tenant_suspended` when the operator suspended the tenant",
    404: "Not found; an id that belongs to another tenant is a 404 too",
    409: "Conflict with the current state",
    410: "Gone",
    413: "The body is over 1 MiB",
    422: "Validation error: `details.errors` lists the invalid fields",
    429: "A per-tenant quota is reached (`quota_exceeded`); `Retry-After` says when to try again",
    500: "Something went wrong on our side (`internal_error`); it was logged",
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
    `content={}` documents an empty body (204). What every route can answer is added here: any route
    422 (the resolver validates every parameter and body) and 500 (`internal_error`); a private route
    401 and 403 (`tenant_suspended`, checked before routing). `described` words an error for this route.
    tests/contract/test_declared_statuses.py derives the rest from the errors a route's code raises.
    """
    documented: dict[int, OpenAPIResponse] = {status: {"description": description}}
    if content is not None:
        documented[status]["content"] = content
    for code in sorted({*errors, 422, 500} | (set() if public else {401, 403})):
        wording = (described or {}).get(code, ERRORS[code])
        documented[code] = {"description": wording, "content": {JSON: {"model": Error}}}
    return documented


def model_content(model: Any, media_type: str = JSON) -> dict[str, Any]:
    """A documented body whose schema is `model`, for routes whose return annotation is looser."""
    return {media_type: {"model": model}}
