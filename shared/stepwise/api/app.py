"""The API function's resolver: routers, authentication, body limits and the error mapping."""

import base64
import json
from functools import cache
from typing import Any, Literal

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.models import HTTPBearer, Server
from pydantic import BaseModel

from stepwise.api import (
    agents,
    approvals,
    hooks,
    interactions,
    mcp_servers,
    runs,
    schedules,
    sessions,
    settings,
)
from stepwise.api.auth import PUBLIC, is_public, tenant_from_event
from stepwise.api.responses import error_response, from_error, json_response, responses
from stepwise.errors import ApiError, Malformed, PayloadTooLarge

MAX_BODY_BYTES = 1024 * 1024  # well under API Gateway's 10 MB: agent inputs are text, not uploads
TITLE = "Stepwise"
VERSION = "0.1.0"
DESCRIPTION = (
    "A serverless runtime for LLM agents: define agents, start runs, follow their events and answer the "
    "approvals and client tools they wait on.\n\n"
    "Every route but `/v1/health`, `/v1/approvals/*` and `/v1/integrations/*` needs "
    '`Authorization: Bearer <api key>`. Errors are `{"error": {"code", "message", "details"}}` '
    "(the `Error` schema); an id that belongs to another tenant is a 404, like one that does not exist."
)
# What the spec says about itself, the same at /v1/openapi.json and in the Swagger UI at /v1/docs.
SPEC_INFO: dict[str, Any] = {
    "title": TITLE,
    "version": VERSION,
    "description": DESCRIPTION,
    "security_schemes": {"apiKey": HTTPBearer(description="Authorization: Bearer <api key>")},
    "security": [{"apiKey": []}],
}

logger = Logger(service="stepwise")


class Health(BaseModel):
    status: Literal["ok"]


def _jsonable_errors(errors: Any) -> list[dict[str, Any]]:
    return [
        {
            "loc": [str(part) for part in e.get("loc", ())],
            "msg": str(e.get("msg", "")),
            "type": str(e.get("type", "")),
        }
        for e in errors
    ]


@cache
def build() -> APIGatewayHttpResolver:
    app = APIGatewayHttpResolver(enable_validation=True)
    app.include_router(agents.router)
    app.include_router(runs.router)
    app.include_router(sessions.router)
    app.include_router(interactions.router)
    app.include_router(hooks.router)
    app.include_router(mcp_servers.router)
    app.include_router(approvals.router)
    app.include_router(schedules.router)
    app.include_router(settings.router)

    @app.get(
        "/v1/health",
        summary="Health check",
        description="Public: answers without a key.",
        responses=responses(200, "The API is up", public=True),
        tags=["health"],
        openapi_extensions=PUBLIC,
    )
    def health() -> Response[Health]:
        return json_response({"status": "ok"})

    @app.get("/v1/openapi.json", include_in_schema=False)
    def openapi() -> Response[dict[str, Any]]:
        return json_response(json.loads(spec(app)))

    app.enable_swagger(path="/v1/docs", **SPEC_INFO)

    @app.exception_handler(ApiError)
    def api_error(exc: ApiError) -> Response:
        return from_error(exc)

    @app.exception_handler(RequestValidationError)
    def invalid(exc: RequestValidationError) -> Response:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return error_response(400, "malformed_json", "the request body is not valid JSON")
        return error_response(422, "validation_error", "the request is not valid", _jsonable_errors(errors))

    @app.not_found
    def not_found(_: NotFoundError) -> Response:
        return error_response(404, "route_not_found", "no such route")

    @app.exception_handler(Exception)
    def unexpected(exc: Exception) -> Response:
        logger.exception("unhandled error", exc_info=exc)
        return error_response(500, "internal_error", "something went wrong on our side; it was logged")

    return app


def spec(app: APIGatewayHttpResolver) -> str:
    return app.get_openapi_json_schema(servers=[Server(url="/")], **SPEC_INFO)


def _body_size(event: dict[str, Any]) -> int:
    body = event.get("body") or ""
    return len(base64.b64decode(body)) if event.get("isBase64Encoded") else len(body.encode())


def handle(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Checks that need no routing happen first: a request that fails them touches nothing."""
    path = event.get("rawPath", "")
    try:
        if _body_size(event) > MAX_BODY_BYTES:
            raise PayloadTooLarge(f"the body is over {MAX_BODY_BYTES} bytes")
        if not is_public(path):
            tenant_from_event(event)
            _as_json(event)
    except ApiError as exc:
        return _to_proxy(error_response(exc.status, exc.code, exc.message, exc.details))
    return build().resolve(event, context)


def _as_json(event: dict[str, Any]) -> None:
    """Authenticated routes speak JSON only: a body sent without a JSON content type (curl's -d default
    is a form) is read as JSON rather than misparsed as a form. API Gateway base64-encodes a body that is
    not text whatever its content type says, so any encoded body is decoded here: bytes that are not
    UTF-8 are not JSON (400), not a crash in the resolver's body parsing."""
    headers = event.setdefault("headers", {})
    if not event.get("body"):
        return
    if "json" not in headers.get("content-type", ""):
        headers["content-type"] = "application/json"
    if event.get("isBase64Encoded"):
        try:
            event["body"] = base64.b64decode(event["body"]).decode()
        except UnicodeDecodeError:
            raise Malformed("the request body is not valid JSON", code="malformed_json") from None
        event["isBase64Encoded"] = False


def _to_proxy(response: Response) -> dict[str, Any]:
    return {
        "statusCode": response.status_code,
        "headers": {"Content-Type": response.headers.get("Content-Type", "application/json")},
        "body": json.dumps(response.body),
        "isBase64Encoded": False,
    }
