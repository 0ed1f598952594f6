"""The SDK (sdk/python) held against the spec the API serves at /v1/openapi.json: each SDK model has the
fields of the spec's component of the same name, each typed alike and required alike; each SDK operation
is a route of the spec with the same request and success bodies; and every route of the spec is in the
SDK or left out of it on purpose. A field added, renamed or retyped on one side fails here."""

from __future__ import annotations

import inspect
import json
from functools import cache
from typing import Any

import pytest
from pydantic import BaseModel, TypeAdapter

from stepwise.api.app import build, spec
from stepwise_sdk import _operations, models
from stepwise_sdk._async import AsyncStepwise
from stepwise_sdk._core import Operation
from stepwise_sdk._sync import Stepwise

pytestmark = pytest.mark.contract

REF = "#/components/schemas/{model}"
# Components the SDK has no use for: API Gateway's own 401 body, Slack's reply to its callback.
NOT_MODELLED = {
    "GatewayError",
    "SlackReply",
    # The AG-UI door's input: AG-UI's own clients send it (@ag-ui/client's HttpAgent), not this SDK.
    "RunAgentInput",
    "MessageIn",
    "ToolIn",
    "ResumeIn",
}
# Routes for browsers and Slack, not for apps (the approval pages, the web console and its files, the link
# a person opens to authorize an MCP server and the page its authorization server sends them back to);
# the SSE stream carries what `runs.events` long-polls.
NOT_IN_SDK = {
    ("GET", "/v1/console"),
    ("GET", "/v1/console/{asset}"),
    ("GET", "/v1/approvals/{token}"),
    ("POST", "/v1/approvals/{token}"),
    ("GET", "/v1/integrations/mcp/oauth/start"),
    ("GET", "/v1/integrations/mcp/oauth/callback"),
    ("POST", "/v1/integrations/slack/interactions"),
    ("GET", "/v1/runs/{run_id}/stream"),
    # The AG-UI door speaks AG-UI's events to AG-UI's clients; the SDK follows the same run natively.
    ("POST", "/v1/agents/{agent_id}/ag-ui"),
    # The MCP door is for MCP clients (the `mcp` SDK); stepwise_sdk opens it on an agent (`mcp` field).
    ("POST", "/v1/mcp"),
    # The A2A door: its clients are the official A2A SDKs (a2a-sdk, @a2a-js/sdk), not this one.
    ("GET", "/a2a/{agent_id}/.well-known/agent-card.json"),
    ("POST", "/a2a/{agent_id}"),
    # A webhook trigger's intake: the sender (GitHub, Stripe, a Standard Webhooks sender) posts there.
    ("POST", "/v1/triggers/{trigger_id}/in"),
    # SES's mail, posted by SNS to the public route.
    ("POST", "/v1/integrations/ses"),
    # Gmail's Pub/Sub pushes, the link a person opens to authorize, and the page Google sends them back to.
    ("POST", "/v1/integrations/gmail/push"),
    ("GET", "/v1/integrations/gmail/oauth/start"),
    ("GET", "/v1/integrations/gmail/oauth/callback"),
    # Microsoft Graph's notifications, the link a person opens to authorize, and the page Microsoft sends
    # them back to.
    ("POST", "/v1/integrations/outlook/notify"),
    ("GET", "/v1/integrations/outlook/oauth/start"),
    ("GET", "/v1/integrations/outlook/oauth/callback"),
}
# Fields the SDK reads as an open enum (the spec's values, or any other string a newer server sends).
OPEN_ENUMS = {("RunEvent", "type")}


@cache
def document() -> dict[str, Any]:
    built: dict[str, Any] = json.loads(spec(build()))
    return built


def components() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = document()["components"]["schemas"]
    return found


def shape(schema: dict[str, Any]) -> Any:
    """What a JSON Schema says about a value's type, without titles, descriptions, defaults or limits."""
    if "$ref" in schema:
        return ("ref", schema["$ref"].rsplit("/", 1)[1])
    alternatives = schema.get("anyOf") or schema.get("oneOf")
    if alternatives:
        shapes = frozenset(shape(alternative) for alternative in alternatives)
        return next(iter(shapes)) if len(shapes) == 1 else ("union", shapes)
    if "enum" in schema or "const" in schema:
        return ("enum", frozenset(schema.get("enum", [schema.get("const")])))
    kind = schema.get("type")
    if kind == "array":
        return ("array", shape(schema.get("items", {})))
    if kind == "object":
        extra = schema.get("additionalProperties")
        return ("dict", shape(extra)) if isinstance(extra, dict) and extra else ("object",)
    if kind == "string" and "format" in schema:
        return ("string", schema["format"])
    return (kind,) if kind else ("any",)


def fields(schema: dict[str, Any]) -> dict[str, tuple[Any, bool]]:
    required = set(schema.get("required", []))
    return {name: (shape(prop), name in required) for name, prop in schema.get("properties", {}).items()}


def sdk_models() -> dict[str, type[BaseModel]]:
    return {
        name: value
        for name, value in vars(models).items()
        if inspect.isclass(value)
        and issubclass(value, BaseModel)
        and value not in (models.Model, models.Request)
        and value.__module__ == models.__name__
    }


def open_enum(found: Any) -> Any:
    """An SDK union of an enum and any string, read as the enum it widens."""
    if found[0] == "union" and ("string",) in found[1] and len(found[1]) == 2:
        return next(alternative for alternative in found[1] if alternative != ("string",))
    return found


MODELLED = sorted(set(components()) - NOT_MODELLED)


def test_the_sdk_models_exactly_the_spec_s_components() -> None:
    assert set(sdk_models()) == set(MODELLED), {
        "in the spec, not in the SDK": sorted(set(MODELLED) - set(sdk_models())),
        "in the SDK, not in the spec": sorted(set(sdk_models()) - set(MODELLED)),
    }


@pytest.mark.parametrize("name", MODELLED)
def test_an_sdk_model_has_the_component_s_fields_typed_and_required_alike(name: str) -> None:
    expected = fields(components()[name])
    model = sdk_models()[name]
    found = fields(model.model_json_schema(ref_template=REF))
    for field in {f for model_name, f in OPEN_ENUMS if model_name == name} & set(found):
        found[field] = (open_enum(found[field][0]), found[field][1])

    assert found == expected


@pytest.mark.parametrize("name", MODELLED)
def test_request_bodies_refuse_unknown_fields_and_answers_keep_them(name: str) -> None:
    is_body = any(
        shape(body) == ("ref", name)
        for operation in document_operations().values()
        for body in [request_schema(operation)]
        if body is not None
    )

    assert issubclass(sdk_models()[name], models.Request) == is_body


def document_operations() -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (method.upper(), path): operation
        for path, item in document()["paths"].items()
        for method, operation in item.items()
    }


def request_schema(operation: dict[str, Any]) -> dict[str, Any] | None:
    content = operation.get("requestBody", {}).get("content", {})
    json_body: dict[str, Any] | None = content.get("application/json", {}).get("schema")
    return json_body


def type_shape(kind: Any) -> Any:
    if inspect.isclass(kind) and issubclass(kind, BaseModel):
        return ("ref", kind.__name__)
    return shape(TypeAdapter(kind).json_schema(ref_template=REF))


SDK_OPERATIONS = {(o.method, o.path): o for o in _operations.ALL}


def test_every_route_of_the_spec_is_in_the_sdk_or_left_out_on_purpose() -> None:
    described = set(document_operations()) - {("GET", "/v1/openapi.json"), ("GET", "/v1/docs")}

    assert set(SDK_OPERATIONS) == described - NOT_IN_SDK
    assert len(SDK_OPERATIONS) == len(_operations.ALL), "one operation per route"


@pytest.mark.parametrize("route", sorted(SDK_OPERATIONS), ids=" ".join)
def test_an_sdk_operation_sends_and_reads_the_spec_s_bodies(route: tuple[str, str]) -> None:
    operation: Operation[Any] = SDK_OPERATIONS[route]
    described = document_operations()[route]
    successes = {code: r for code, r in described["responses"].items() if code.startswith("2")}
    (code, success), *_ = successes.items()
    body = request_schema(described)

    assert (type_shape(operation.body) if operation.body else None) == (shape(body) if body else None)
    if operation.response is None:
        assert code == "204" and not success.get("content")
    else:
        assert type_shape(operation.response) == shape(success["content"]["application/json"]["schema"])


def public_methods(cls: type) -> dict[str, list[str]]:
    return {
        name: list(inspect.signature(member).parameters)
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    }


def test_the_async_client_has_the_sync_client_s_surface() -> None:
    sync = Stepwise("http://x.test", "k")
    asynchronous = AsyncStepwise("http://x.test", "k")
    resources = [
        name for name, value in vars(sync).items() if not name.startswith("_") and hasattr(value, "_client")
    ]

    assert resources
    assert public_methods(Stepwise).keys() - {"close"} == public_methods(AsyncStepwise).keys() - {"close"}
    for name in resources:
        assert public_methods(type(getattr(sync, name))) == public_methods(
            type(getattr(asynchronous, name))
        ), name
    sync.close()
