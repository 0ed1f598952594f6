"""The spec says what the API answers (issue 29): no schemas it never answers, enums where the values are
closed, the same id patterns on every route, one error shape, creations as 201."""

from __future__ import annotations

from typing import Any

import pytest

from stepwise.core import ids
from tests.contract.test_openapi import document, operations, resolve

pytestmark = pytest.mark.contract


def schema(name: str) -> dict[str, Any]:
    found: dict[str, Any] = document()["components"]["schemas"][name]
    return found


def test_no_schema_describes_a_shape_the_api_never_answers() -> None:
    components = set(document()["components"]["schemas"])

    assert not components & {"HTTPValidationError", "ResponseValidationError", "ValidationError"}


def test_interaction_kind_and_status_are_enums() -> None:
    properties = schema("InteractionView")["properties"]

    assert set(properties["kind"]["enum"]) == {"approval", "client_tool", "budget", "provider"}
    assert set(properties["status"]["enum"]) == {"pending", "answered", "expired"}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/agents/{agent_id}/mcp-servers"),
        ("POST", "/v1/agents/{agent_id}/mcp-servers/{name}/authorize"),
    ],
)
def test_mcp_server_routes_take_the_agent_id_pattern(method: str, path: str) -> None:
    (agent_id,) = [p for p in operations()[(method, path)]["parameters"] if p["name"] == "agent_id"]

    assert agent_id["schema"]["pattern"] == ids.AGENT_ID


def test_details_is_always_an_object_with_field_errors_under_errors() -> None:
    info = resolve(schema("Error")["properties"]["error"])
    details = resolve(info["properties"]["details"])
    errors = details["properties"]["errors"]["anyOf"][0]

    assert "details" in info["required"]
    assert details["type"] == "object" and details["additionalProperties"] is True
    assert set(resolve(errors["items"])["properties"]) == {"loc", "msg", "type"}


def test_statuses_that_were_out_of_step() -> None:
    responses = {key: set(op["responses"]) for key, op in operations().items()}

    assert {"202", "410"} <= responses[("POST", "/v1/runs/{run_id}/approve")]
    assert "200" not in responses[("POST", "/v1/runs/{run_id}/approve")]  # answers as respond does
    assert "201" in responses[("POST", "/v1/webhooks/secret")]
    assert "404" in responses[("PUT", "/v1/settings/{key}")]
    wait = [p for p in operations()[("GET", "/v1/runs/{run_id}/events")]["parameters"] if p["name"] == "wait"]
    assert "maximum" not in wait[0]["schema"]  # clamped, never refused


def test_a_session_pages_its_runs() -> None:
    parameters = {p["name"] for p in operations()[("GET", "/v1/sessions/{session_id}")]["parameters"]}

    assert {"limit", "next_token"} <= parameters
    assert "next_token" in schema("SessionView")["properties"]
