"""Bad input gets a clear error with a stable code, and leaves nothing behind."""

from typing import Any

import pytest

from stepwise.api.resolver import MAX_BODY_BYTES
from stepwise_local.stack import LocalStack
from tests.integration.support import OTHER_KEY, wait_for_run


@pytest.fixture(scope="module")
def agent(stack: LocalStack) -> dict[str, Any]:
    status, _, body = stack.invoke_api("POST", "/v1/agents", {"name": "errors"})
    assert status == 201
    return body


@pytest.fixture(scope="module")
def finished_run(stack: LocalStack, agent: dict[str, Any]) -> dict[str, Any]:
    _, _, accepted = stack.invoke_api("POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "x"})
    return wait_for_run(stack, accepted["run_id"])


def error_code(body: Any) -> str:
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}, body
    return str(body["error"]["code"])


def test_health_needs_no_key(stack: LocalStack) -> None:
    assert stack.invoke_api("GET", "/v1/health", key=None)[::2] == (200, {"status": "ok"})


def test_a_missing_key_is_401_with_the_error_shape(stack: LocalStack) -> None:
    # The authorizer has no identity source (template.yaml), so API Gateway calls it for a request
    # without Authorization too, and the API answers in the contract's shape, not the gateway's.
    calls = stack.lambdas.invocations["AuthorizerFunction"]
    status, _, body = stack.invoke_api("GET", "/v1/agents", key=None)
    assert status == 401 and error_code(body) == "invalid_api_key"
    assert stack.lambdas.invocations["AuthorizerFunction"] == calls + 1


@pytest.mark.parametrize("key", ["sk-wrong", "sw_unknownkey", "   "])
def test_a_wrong_key_is_401_with_the_error_shape(stack: LocalStack, key: str) -> None:
    status, _, body = stack.invoke_api(
        "GET", "/v1/agents", key=None, headers={"Authorization": f"Bearer {key}"}
    )
    assert status == 401 and error_code(body) == "invalid_api_key"


def test_a_key_without_bearer_is_401(stack: LocalStack) -> None:
    status, _, body = stack.invoke_api(
        "GET", "/v1/agents", key=None, headers={"Authorization": "sk-local-dev"}
    )
    assert status == 401 and error_code(body) == "invalid_api_key"


def test_malformed_json_is_400_and_creates_nothing(stack: LocalStack) -> None:
    _, _, before = stack.invoke_api("GET", "/v1/agents")
    status, _, body = stack.invoke_api("POST", "/v1/agents", raw=b'{"name": "x"')
    assert status == 400 and error_code(body) == "malformed_json"
    assert stack.invoke_api("GET", "/v1/agents")[2] == before


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"name": 5},
        {"name": "x", "max_steps": 0},
        {"name": "x", "temperature": "hot"},
        {"name": "x", "unknown_field": 1},
        {
            "name": "x",
            "tools": [
                {
                    "type": "http",
                    "name": "bad name",
                    "description": "d",
                    "input_schema": {},
                    "endpoint": "http://e",
                }
            ],
        },
        {
            "name": "x",
            "tools": [
                {
                    "type": "http",
                    "name": "t",
                    "description": "d",
                    "input_schema": {"type": "object"},
                    "endpoint": "ftp://e",
                }
            ],
        },
        {"name": "x", "script": [{"text": "a", "tool_calls": []}]},
    ],
)
def test_invalid_agents_are_422(stack: LocalStack, body: dict[str, Any]) -> None:
    status, _, response = stack.invoke_api("POST", "/v1/agents", body)
    assert status == 422 and error_code(response) == "validation_error"
    assert response["error"]["details"]


@pytest.mark.parametrize("body", [{}, {"message": ""}, {"message": 3}, {"message": "x", "max_steps": 1000}])
def test_invalid_runs_are_422_and_start_nothing(
    stack: LocalStack, agent: dict[str, Any], body: dict[str, Any]
) -> None:
    _, _, before = stack.invoke_api("GET", f"/v1/runs?agent_id={agent['agent_id']}")
    status, _, response = stack.invoke_api("POST", f"/v1/agents/{agent['agent_id']}/runs", body)
    assert status == 422 and error_code(response) == "validation_error"
    assert stack.invoke_api("GET", f"/v1/runs?agent_id={agent['agent_id']}")[2]["runs"] == before["runs"]


def test_a_body_over_the_limit_is_413(stack: LocalStack) -> None:
    status, _, body = stack.invoke_api(
        "POST", "/v1/agents", raw=b'{"name": "' + b"x" * MAX_BODY_BYTES + b'"}'
    )
    assert status == 413 and error_code(body) == "payload_too_large"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/agents/agt_nope"),
        ("PATCH", "/v1/agents/agt_nope"),
        ("DELETE", "/v1/agents/agt_nope"),
        ("GET", "/v1/agents/agt_nope/tools"),
        ("POST", "/v1/agents/agt_nope/runs"),
        ("POST", "/v1/agents/agt_nope/run"),
        ("GET", "/v1/runs/run_nope"),
        ("GET", "/v1/runs/run_nope/events"),
        ("GET", "/v1/runs/run_nope/stream"),
        ("GET", "/v1/sessions/ses_nope"),
        ("DELETE", "/v1/sessions/ses_nope"),
    ],
)
def test_unknown_ids_are_404(stack: LocalStack, method: str, path: str) -> None:
    body = (
        {"message": "x"}
        if path.endswith(("/runs", "/run"))
        else ({"name": "y"} if method == "PATCH" else None)
    )
    status, _, response = stack.invoke_api(method, path, body)
    assert status == 404 and error_code(response).endswith("not_found")


def test_another_tenants_ids_are_404_exactly_like_unknown_ones(
    stack: LocalStack, agent: dict[str, Any], finished_run: dict[str, Any]
) -> None:
    agent_id, run_id, session_id = agent["agent_id"], finished_run["run_id"], finished_run["session_id"]
    for method, path, body in [
        ("GET", f"/v1/agents/{agent_id}", None),
        ("PATCH", f"/v1/agents/{agent_id}", {"name": "stolen"}),
        ("DELETE", f"/v1/agents/{agent_id}", None),
        ("POST", f"/v1/agents/{agent_id}/runs", {"message": "x"}),
        ("POST", f"/v1/agents/{agent_id}/run", {"message": "x"}),
        ("GET", f"/v1/runs/{run_id}", None),
        ("GET", f"/v1/runs/{run_id}/events", None),
        ("GET", f"/v1/sessions/{session_id}", None),
        ("DELETE", f"/v1/sessions/{session_id}", None),
    ]:
        status, _, response = stack.invoke_api(method, path, body, key=OTHER_KEY)
        assert status == 404, (method, path, response)
    other_runs = stack.invoke_api("GET", f"/v1/runs?agent_id={agent_id}", key=OTHER_KEY)[2]["runs"]
    assert other_runs == []
    assert agent_id not in [
        a["agent_id"] for a in stack.invoke_api("GET", "/v1/agents", key=OTHER_KEY)[2]["agents"]
    ]
    assert stack.invoke_api("GET", f"/v1/agents/{agent_id}")[2]["name"] == "errors"  # untouched


def test_a_session_of_another_agent_cannot_be_continued(
    stack: LocalStack, finished_run: dict[str, Any]
) -> None:
    _, _, other = stack.invoke_api("POST", "/v1/agents", {"name": "other"})
    status, _, body = stack.invoke_api(
        "POST",
        f"/v1/agents/{other['agent_id']}/runs",
        {"message": "x", "session_id": finished_run["session_id"]},
    )
    assert status == 409 and error_code(body) == "session_agent_mismatch"


def test_tools_are_added_listed_and_deleted(stack: LocalStack) -> None:
    _, _, created = stack.invoke_api("POST", "/v1/agents", {"name": "tools"})
    base = f"/v1/agents/{created['agent_id']}/tools"
    tool = {
        "type": "http",
        "name": "t1",
        "description": "d",
        "input_schema": {"type": "object"},
        "endpoint": "https://example.com/t",
    }

    assert stack.invoke_api("POST", base, tool)[0] == 201
    status, _, body = stack.invoke_api("POST", base, tool)
    assert status == 409 and error_code(body) == "tool_exists"
    assert [t["name"] for t in stack.invoke_api("GET", base)[2]["tools"]] == ["t1"]
    assert stack.invoke_api("DELETE", f"{base}/t1")[0] == 204
    assert stack.invoke_api("DELETE", f"{base}/t1")[0] == 404
    assert stack.invoke_api("GET", base)[2]["tools"] == []


def test_agents_are_patched_and_deleted(stack: LocalStack) -> None:
    _, _, created = stack.invoke_api("POST", "/v1/agents", {"name": "patch-me", "temperature": 0.5})
    path = f"/v1/agents/{created['agent_id']}"

    status, _, patched = stack.invoke_api("PATCH", path, {"system_prompt": "new", "temperature": None})
    assert status == 200
    assert (
        patched["system_prompt"] == "new" and patched["temperature"] is None and patched["name"] == "patch-me"
    )
    assert stack.invoke_api("PATCH", path, {"name": None})[0] == 422
    assert stack.invoke_api("DELETE", path)[0] == 204
    assert stack.invoke_api("GET", path)[0] == 404


def test_runs_are_listed_newest_first_with_pagination(stack: LocalStack) -> None:
    _, _, created = stack.invoke_api("POST", "/v1/agents", {"name": "lister"})
    agent_id = created["agent_id"]
    ids = [
        stack.invoke_api("POST", f"/v1/agents/{agent_id}/runs", {"message": str(i)})[2]["run_id"]
        for i in range(3)
    ]
    for run_id in ids:
        wait_for_run(stack, run_id)

    _, _, first = stack.invoke_api("GET", f"/v1/runs?agent_id={agent_id}&limit=2")
    _, _, second = stack.invoke_api(
        "GET", f"/v1/runs?agent_id={agent_id}&limit=2&next_token={first['next_token']}"
    )

    assert [r["run_id"] for r in first["runs"] + second["runs"]] == list(reversed(ids))
    _, _, done = stack.invoke_api("GET", f"/v1/runs?agent_id={agent_id}&status=succeeded")
    assert len(done["runs"]) == 3
    assert stack.invoke_api("GET", f"/v1/runs?agent_id={agent_id}&status=failed")[2]["runs"] == []
    assert stack.invoke_api("GET", "/v1/runs?status=nonsense")[0] == 422
    status, _, body = stack.invoke_api("GET", "/v1/runs?next_token=garbage")
    assert status == 400 and error_code(body) == "invalid_next_token"
    # a page token is bound to its tenant and listing: replayed elsewhere it is refused, not followed
    borrowed = f"/v1/runs?agent_id={agent_id}&limit=2&next_token={first['next_token']}"
    assert stack.invoke_api("GET", borrowed, key=OTHER_KEY)[0] == 400
    assert stack.invoke_api("GET", f"/v1/runs?limit=2&next_token={first['next_token']}")[0] == 400


def test_a_session_is_deleted_with_its_messages(stack: LocalStack, agent: dict[str, Any]) -> None:
    _, _, accepted = stack.invoke_api("POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "bye"})
    run = wait_for_run(stack, accepted["run_id"])

    assert stack.invoke_api("DELETE", f"/v1/sessions/{run['session_id']}")[0] == 204
    assert stack.invoke_api("GET", f"/v1/sessions/{run['session_id']}")[0] == 404
    assert stack.invoke_api("GET", f"/v1/runs/{run['run_id']}")[0] == 200  # run records are kept


def test_the_openapi_spec_lists_the_routes(stack: LocalStack) -> None:
    status, _, spec = stack.invoke_api("GET", "/v1/openapi.json")
    assert status == 200
    assert {"/v1/agents", "/v1/agents/{agent_id}/runs", "/v1/runs/{run_id}/events"} <= set(spec["paths"])
    status, headers, page = stack.invoke_api("GET", "/v1/docs")
    assert status == 200 and "text/html" in headers["content-type"] and "swagger" in page.lower()
