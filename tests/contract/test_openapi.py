"""The OpenAPI spec the API serves at /v1/openapi.json, built in process and held against template.yaml.

Every route API Gateway routes is described, with its request body's schema, its success response and its
errors in the contract's shape, and the bearer key required exactly where the authorizer guards the route.
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

import pytest

from stepwise.api.app import build, spec
from tests.contract.test_template import http_routes, template

pytestmark = pytest.mark.contract

# The spec and the Swagger UI that serves it are not described in the spec itself.
UNDESCRIBED = {("GET", "/v1/openapi.json"), ("GET", "/v1/docs")}
# MCP's streamable HTTP has a server that offers no server-sent stream answer GET with 405: that is all
# GET /v1/mcp does (POST /v1/mcp documents the door).
UNDESCRIBED |= {("GET", "/v1/mcp")}
# The catch-all route: whatever no route matches, answered 404 `route_not_found` (no operation to describe).
UNDESCRIBED |= {("ANY", "$default")}
# Successes without a body besides 204: MCP acknowledges a notification with 202 and nothing else.
EMPTY_ACCEPTED = {("POST", "/v1/mcp")}
# Links a browser opens whose success is a redirect (302 with `Location`, no body): the OAuth start links,
# which send the person on to the authorization server (stepwise.api.oauth_flow).
REDIRECTS = {
    ("GET", "/v1/integrations/mcp/oauth/start"),
    ("GET", "/v1/integrations/gmail/oauth/start"),
    ("GET", "/v1/integrations/outlook/oauth/start"),
}
# Routes that take a JSON body (DESIGN.md's HTTP API table).
JSON_BODIES = {
    ("POST", "/v1/workflows"),
    ("PUT", "/v1/workflows/{workflow_id}"),
    ("POST", "/v1/workflows/{workflow_id}/runs"),
    ("POST", "/v1/workflows/{workflow_id}/schedules"),
    ("POST", "/v1/triggers"),
    ("PATCH", "/v1/triggers/{trigger_id}"),
    ("POST", "/v1/triggers/{trigger_id}/secret"),
    ("POST", "/v1/triggers/{trigger_id}/in"),
    ("POST", "/v1/integrations/ses"),
    ("POST", "/v1/integrations/gmail/push"),
    ("POST", "/v1/integrations/outlook/notify"),
    ("POST", "/v1/agents"),
    ("POST", "/v1/runs/{run_id}/what-if"),
    ("PATCH", "/v1/agents/{agent_id}"),
    ("POST", "/v1/agents/{agent_id}/tools"),
    ("POST", "/v1/agents/{agent_id}/mcp-servers"),
    ("POST", "/v1/agents/{agent_id}/hooks"),
    ("POST", "/v1/agents/{agent_id}/schedules"),
    ("POST", "/v1/agents/{agent_id}/runs"),
    ("POST", "/v1/agents/{agent_id}/run"),
    ("POST", "/v1/runs/{run_id}/approve"),
    ("POST", "/v1/runs:cancel"),
    ("POST", "/v1/sessions/interactions/{interaction_id}/respond"),
    ("PUT", "/v1/settings/{key}"),
    ("PUT", "/v1/budgets/{scope}"),
    ("POST", "/v1/uploads"),
    ("POST", "/v1/responses"),
    ("POST", "/v1/agents/{agent_id}/ag-ui"),
    ("POST", "/a2a/{agent_id}"),  # a JSON-RPC envelope (the A2A door)
    ("POST", "/v1/evals"),
    ("POST", "/v1/evals/{eval_id}/cases:from-runs"),
    ("POST", "/v1/evals/{eval_id}/runs"),
    ("POST", "/v1/effects/{key}/resolve"),
}
# Public routes that read a form: the approval page's buttons and Slack's interactions.
FORM_BODIES = {("POST", "/v1/approvals/{token}"), ("POST", "/v1/integrations/slack/interactions")}
ERROR_REF = "#/components/schemas/Error"
BEARER = [{"apiKey": []}]


@cache
def document() -> dict[str, Any]:
    built: dict[str, Any] = json.loads(spec(build()))
    return built


def operations() -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (method.upper(), path): operation
        for path, item in document()["paths"].items()
        for method, operation in item.items()
    }


def template_routes() -> dict[tuple[str, str], bool]:
    """(method, path) → whether API Gateway's authorizer guards it."""
    default = template()["Resources"]["HttpApi"]["Properties"]["Auth"]["DefaultAuthorizer"]
    routes = {}
    for _, key, event in http_routes():
        method, path = key.split(" ", 1)
        authorizer = event["Properties"].get("Auth", {}).get("Authorizer", default)
        routes[(method, path)] = authorizer != "NONE"
    return routes


def resolve(schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    resolved: dict[str, Any] = document()["components"]["schemas"][ref.rsplit("/", 1)[1]]
    return resolved


def refs(schema: dict[str, Any]) -> set[str]:
    """The component refs a response schema names, directly or as an alternative."""
    found = {schema["$ref"]} if "$ref" in schema else set()
    for alternative in schema.get("anyOf", []) + schema.get("oneOf", []):
        found |= refs(alternative)
    return found


ROUTES = sorted(set(template_routes()) - UNDESCRIBED, key=lambda route: (route[1], route[0]))
IDS = [f"{method} {path}" for method, path in ROUTES]


def test_the_spec_describes_exactly_the_routes_api_gateway_routes() -> None:
    described = set(operations())

    assert described == set(ROUTES), {
        "in the template, not in the spec": sorted(set(ROUTES) - described),
        "in the spec, not in the template": sorted(described - set(ROUTES)),
    }


def test_the_spec_is_openapi_3_1_with_a_bearer_scheme() -> None:
    doc = document()

    assert doc["openapi"].startswith("3.1")
    assert doc["info"]["title"] == "Stepwise" and doc["info"]["description"]
    assert doc["components"]["securitySchemes"]["apiKey"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "Authorization: Bearer <api key>",
    }
    assert doc["security"] == BEARER


def test_the_error_shape_is_a_component() -> None:
    error = document()["components"]["schemas"]["Error"]
    info = resolve(error["properties"]["error"])

    assert error["required"] == ["error"]
    assert set(info["properties"]) == {"code", "message", "details"}
    assert {"code", "message"} <= set(info["required"])


@pytest.mark.parametrize(("method", "path"), ROUTES, ids=IDS)
def test_the_bearer_key_is_required_exactly_where_the_authorizer_guards(method: str, path: str) -> None:
    operation = operations()[(method, path)]
    effective = operation.get("security", document()["security"])

    assert effective == (BEARER if template_routes()[(method, path)] else [])


@pytest.mark.parametrize(("method", "path"), ROUTES, ids=IDS)
def test_every_operation_has_a_summary_and_a_tag(method: str, path: str) -> None:
    operation = operations()[(method, path)]

    assert operation["summary"] != f"{method} {path}", "Powertools' placeholder summary"
    assert operation.get("tags")


def test_operation_ids_are_unique() -> None:
    ids = [operation["operationId"] for operation in operations().values()]

    assert len(ids) == len(set(ids))


@pytest.mark.parametrize(("method", "path"), ROUTES, ids=IDS)
def test_request_bodies_have_a_schema(method: str, path: str) -> None:
    body = operations()[(method, path)].get("requestBody")
    takes_body = (method, path) in JSON_BODIES | FORM_BODIES

    assert (body is not None) == takes_body
    if body is not None:
        media = "application/json" if (method, path) in JSON_BODIES else "application/x-www-form-urlencoded"
        assert body["required"] is True
        assert list(body["content"]) == [media]
        schema = resolve(body["content"][media]["schema"])
        assert schema.get("properties") or schema.get("oneOf") or schema.get("anyOf"), schema


@pytest.mark.parametrize(("method", "path"), ROUTES, ids=IDS)
def test_responses_document_success_and_errors_in_the_contract_shape(method: str, path: str) -> None:
    operation = operations()[(method, path)]
    responses = operation["responses"]
    redirect = (method, path) in REDIRECTS
    successes = [code for code in responses if code.startswith("3" if redirect else "2")]
    errors = [code for code in responses if code.startswith(("4", "5"))]

    assert successes, "no success response"
    for code in successes:
        content = responses[code].get("content", {})
        if code == "204" or redirect or (code == "202" and (method, path) in EMPTY_ACCEPTED):
            assert not content, f"{code} has no body"
        else:
            assert content and all(media.get("schema") for media in content.values()), code
    assert "422" in errors
    if template_routes()[(method, path)]:
        assert "401" in errors, "a private route answers 401 without a key"
    for code in errors:
        for media_type, media in responses[code]["content"].items():
            if media_type.startswith("text/html"):
                continue  # the approval pages answer humans with a page
            assert ERROR_REF in refs(media["schema"]), (code, media["schema"])


@pytest.mark.parametrize(("method", "path"), ROUTES, ids=IDS)
def test_path_parameters_match_the_template_path(method: str, path: str) -> None:
    parameters = operations()[(method, path)].get("parameters", [])
    in_path = {p["name"] for p in parameters if p["in"] == "path"}

    assert in_path == set(re.findall(r"{(\w+)}", path))
