"""JSON responses and the contract's error shape."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import Response

from stepwise.errors import ApiError


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """The resolver validates `body` against the route's `Response[Model]` and serializes it."""
    return Response(status_code=status, content_type="application/json", body=body, headers=headers)


def error_response(status: int, code: str, message: str, details: Any = None) -> Response:
    return json_response({"error": {"code": code, "message": message, "details": details}}, status)


def from_error(exc: ApiError) -> Response:
    return error_response(exc.status, exc.code, exc.message, exc.details)
