"""What every resolver of ours shares: the checks before routing and the error mapping, in one place
for the API function (stepwise.api.app) and the light events function (stepwise.api.light)."""

import base64
import json
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError

from stepwise.api.auth import is_public, tenant_from_event
from stepwise.api.params import NOT_FOUND, NOT_FOUND_UNDER
from stepwise.api.responses import error_response, json_response
from stepwise.core import safejson
from stepwise.core.errors import ApiError, Malformed, PayloadTooLarge
from stepwise.runs import suspension

MAX_BODY_BYTES = 1024 * 1024  # well under API Gateway's 10 MB: agent inputs are text, not uploads
# Starting a run may carry inline attachments (5 MiB of base64): its body may be as large as a Lambda
# request can be (6 MB, the envelope included); bigger files go through POST /v1/uploads.
RUN_BODY_BYTES = 6_000_000
BODY_LIMITS = {"POST /v1/agents/{agent_id}/runs": RUN_BODY_BYTES}
DEFAULT_ROUTE = "$default"  # API Gateway's catch-all route key (template.yaml: ApiFunction's UnknownRoute)

logger = Logger(service="stepwise")

# A protocol door answers errors in its protocol's shape: under its path prefix, the door's renderer
# (status, code, message, details) → body replaces the contract's `{"error": {code, message, details}}`.
# The door's routes module registers it (shape_errors) when it is imported, i.e. when a resolver
# includes its routes. The checks before routing (`refused`: the key, the body's size) keep ours.
ErrorShape = Callable[[int, str, str, Any], Any]
_SHAPES: dict[str, ErrorShape] = {}


def shape_errors(prefix: str, render: ErrorShape) -> None:
    _SHAPES[prefix] = render


def _shaped(
    app: APIGatewayHttpResolver,
    status: int,
    code: str,
    message: str,
    details: Any = None,
    headers: dict[str, str] | None = None,
) -> Response:
    event = getattr(app, "current_event", None)
    path = event.path if event is not None else ""
    for prefix, render in _SHAPES.items():
        if path == prefix or path.startswith(prefix + "/"):
            return json_response(render(status, code, message, details), status, headers or None)
    return error_response(status, code, message, details, headers)


def _jsonable_errors(errors: Any) -> list[dict[str, Any]]:
    return [
        {
            "loc": [str(part) for part in e.get("loc", ())],
            "msg": str(e.get("msg", "")),
            "type": str(e.get("type", "")),
        }
        for e in errors
    ]


# Powertools adds these to every spec it generates, in a `{detail: [...]}` shape this API never answers
# (its 422 is the `Error` schema, declared on every route): a generated client would model them for nothing.
POWERTOOLS_SCHEMAS = ("HTTPValidationError", "ResponseValidationError", "ValidationError")


class Resolver(APIGatewayHttpResolver):
    """Powertools' resolver, with a spec that carries only the schemas it uses (the one at
    /v1/openapi.json and the one the Swagger UI at /v1/docs embeds are both built here)."""

    def get_openapi_schema(self, **kwargs: Any) -> Any:
        schema = super().get_openapi_schema(**kwargs)
        schemas = schema.components.schemas if schema.components is not None else None
        if schemas:
            dead = {name: schemas.pop(name) for name in POWERTOOLS_SCHEMAS if name in schemas}
            rest = schema.model_dump_json(by_alias=True)
            if any(f'/{name}"' in rest for name in dead):  # still referred to: keep them all
                schemas.update(dead)
        return schema


# The class every new resolver is: ours, or the local stack's per-thread one
# (stepwise_local.resolvers.per_thread sets it before serving, as route modules load on first use).
resolver_class: type[Resolver] = Resolver


def new_resolver() -> APIGatewayHttpResolver:
    """A resolver as every function of ours builds it: validating, reading bodies with the JSON depth
    cap (a body nested too deep is a 422 `json_too_deep`, never a RecursionError), our error mapping.
    Powertools' resolver as it is: one request at a time per execution environment (the local stack,
    which serves many on threads, makes its state per thread: stepwise_local.resolvers)."""
    app = resolver_class(enable_validation=True, json_body_deserializer=safejson.loads)
    install_error_handlers(app)
    return app


def _unknown_path_id(errors: Any, path: str) -> str | None:
    """The not-found code when a path id (or a setting's key) does not have the shape of the ones we
    issue (or store)."""
    codes = dict(NOT_FOUND)
    for prefix, under in NOT_FOUND_UNDER.items():
        if path.startswith(prefix):
            codes.update(under)
    for e in errors:
        loc = tuple(e.get("loc", ()))
        if len(loc) == 2 and loc[0] == "path" and e.get("type") == "string_pattern_mismatch":
            code = codes.get(str(loc[1]))
            if code is not None:
                return code
    return None


def install_error_handlers(app: APIGatewayHttpResolver) -> None:
    """Each domain error becomes its status in the contract's shape; nothing else leaks."""

    @app.exception_handler(ApiError)
    def api_error(exc: ApiError) -> Response:
        return _shaped(app, exc.status, exc.code, exc.message, exc.details, exc.headers())

    @app.exception_handler(safejson.TooDeep)
    def too_deep(exc: safejson.TooDeep) -> Response:
        return _shaped(app, 422, "json_too_deep", f"the request body is not accepted: {exc}")

    @app.exception_handler(RequestValidationError)
    def invalid(exc: RequestValidationError) -> Response:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return _shaped(app, 400, "malformed_json", "the request body is not valid JSON")
        event = getattr(app, "current_event", None)
        unknown = _unknown_path_id(errors, event.path if event is not None else "")
        if unknown is not None:
            # An id that cannot be ours names nothing: the same 404 as an id that does not exist.
            return _shaped(app, 404, unknown, "no such resource (the id is not one this API issued)")
        return _shaped(
            app, 422, "validation_error", "the request is not valid", {"errors": _jsonable_errors(errors)}
        )

    @app.not_found
    def not_found(_: NotFoundError) -> Response:
        return _shaped(app, 404, "route_not_found", "no such route")

    @app.exception_handler(Exception)
    def unexpected(exc: Exception) -> Response:
        logger.exception("unhandled error", exc_info=exc)
        return _shaped(app, 500, "internal_error", "something went wrong on our side; it was logged")


def refused(event: dict[str, Any]) -> dict[str, Any] | None:
    """Checks that need no routing happen first: a request that fails them touches nothing. The
    response to send instead, or None to go on."""
    path = event.get("rawPath", "")
    if event.get("routeKey") == DEFAULT_ROUTE:
        # API Gateway matched no route of ours: the contract's 404, without a key check (the route is
        # public: nothing exists to guard) and without building the resolver (junk traffic stays cheap).
        return _to_proxy(error_response(404, "route_not_found", "no such route"))
    try:
        limit = BODY_LIMITS.get(str(event.get("routeKey")), MAX_BODY_BYTES)
        if _body_size(event) > limit:
            hint = "; upload files with POST /v1/uploads instead" if limit != MAX_BODY_BYTES else ""
            raise PayloadTooLarge(f"the body is over {limit} bytes{hint}")
        if not is_public(path):
            suspension.check_request(tenant_from_event(event))
            _as_json(event)
    except ApiError as exc:
        return _to_proxy(error_response(exc.status, exc.code, exc.message, exc.details))
    return None


def _body_size(event: dict[str, Any]) -> int:
    body = event.get("body") or ""
    return len(base64.b64decode(body)) if event.get("isBase64Encoded") else len(body.encode())


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
