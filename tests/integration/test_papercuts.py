"""The API read as a client author reads it (issue 29): one shape for one thing, the statuses the spec
declares, lists that page to their end."""

from __future__ import annotations

import re
from typing import Any

from stepwise.core.schema import RFC3339_PATTERN
from stepwise_local.cfn_yaml import load_template
from stepwise_local.gateway import Gateway
from stepwise_local.stack import ROOT, LocalStack, Resolver, _routes, route_throttles
from tests.fakes.receiver import Receiver
from tests.integration.test_approvals import start_waiting

TIME = re.compile(RFC3339_PATTERN)


def create_agent(stack: LocalStack, **fields: Any) -> str:
    status, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "papercuts", **fields})
    assert status == 201, agent
    return str(agent["agent_id"])


def sync_run(stack: LocalStack, agent_id: str, **fields: Any) -> tuple[int, dict[str, Any]]:
    status, _, body = stack.invoke_api("POST", f"/v1/agents/{agent_id}/run", {"message": "ping", **fields})
    return status, body


# --- 7: details is always an object -------------------------------------------------------------


def test_details_is_always_an_object_with_field_errors_under_errors(stack: LocalStack) -> None:
    status, _, invalid = stack.invoke_api("POST", "/v1/agents", {"name": 3})
    missing_status, _, missing = stack.invoke_api("GET", "/v1/runs/run_01M8ZPZHBHTYJYK5TXE2GFWM4T")

    assert status == 422 and invalid["error"]["code"] == "validation_error"
    (field,) = invalid["error"]["details"]["errors"]
    assert field["loc"] == ["body", "name"] and field["msg"] and field["type"]
    assert missing_status == 404 and missing["error"]["details"] == {}


# --- 8: unknown routes ---------------------------------------------------------------------------


def test_an_unknown_route_or_method_is_the_contracts_404(stack: LocalStack) -> None:
    for method, path in [("GET", "/v1/nothing-here"), ("DELETE", "/v1/health"), ("GET", "/")]:
        status, _, body = stack.invoke_api(method, path, key=None)

        assert status == 404, (method, path, body)
        assert body["error"] == {"code": "route_not_found", "message": "no such route", "details": {}}


def test_the_catch_all_route_is_throttled_by_api_gateway_itself() -> None:
    """The template's RouteSettings cap $default at UnknownRouteThrottleBurst (10) at once; the 11th
    request is API Gateway's own 429 and invokes nothing. (A frozen clock: no refill.)"""
    template = load_template(ROOT / "template.yaml")
    resolver = Resolver(template, {"UnknownRouteThrottleRate": "5", "UnknownRouteThrottleBurst": "10"})
    functions = {k: r for k, r in resolver.resources.items() if r["Type"] == "AWS::Serverless::Function"}
    invoked: list[str] = []

    def invoke(function: str, event: dict[str, Any]) -> dict[str, Any]:
        invoked.append(event["routeKey"])
        return {"statusCode": 404, "body": "{}"}

    throttles = route_throttles(resolver.resources, resolver.resolve)
    gateway = Gateway(_routes(functions), invoke, authorizer=None, throttles=throttles, clock=lambda: 0.0)

    answers = [gateway.handle("GET", f"/junk/{i}", "", [], b"") for i in range(12)]

    assert throttles == {"$default": (5.0, 10.0)}
    assert [a.status for a in answers] == [404] * 10 + [429] * 2
    assert answers[-1].body == b'{"message":"Too Many Requests"}'
    assert invoked == ["$default"] * 10
    # A real route is not held by the catch-all's bucket.
    assert gateway.handle("GET", "/v1/health", "", [], b"").status == 404  # the fake's answer, invoked
    assert invoked[-1] == "GET /v1/health"


# --- 5, 9, 10: path and query parameters ---------------------------------------------------------


def test_mcp_server_routes_check_the_agent_id_like_the_others(stack: LocalStack) -> None:
    for method, path in [
        ("GET", "/v1/agents/not-an-id/mcp-servers"),
        ("POST", "/v1/agents/not-an-id/mcp-servers/x/authorize"),
    ]:
        status, _, body = stack.invoke_api(method, path)

        assert (status, body["error"]["code"]) == (404, "agent_not_found"), (method, path, body)


def test_a_wait_past_the_cap_is_clamped_and_echoed(stack: LocalStack) -> None:
    agent_id = create_agent(stack)
    status, run = sync_run(stack, agent_id)
    assert status == 200, run

    status, _, page = stack.invoke_api("GET", f"/v1/runs/{run['run_id']}/events?after=0&wait=60")
    stream_status, headers, _ = stack.invoke_api("GET", f"/v1/runs/{run['run_id']}/stream?wait=90")

    assert status == 200 and page["wait"] == 25 and page["done"] is True, page
    assert stream_status == 200 and headers["stepwise-wait"] == "25"
    # Times: RFC 3339, Z, milliseconds, on the run and on its events (11).
    _, _, view = stack.invoke_api("GET", f"/v1/runs/{run['run_id']}")
    assert TIME.match(view["created_at"]) and TIME.match(view["finished_at"]), view
    assert all(TIME.match(event["at"]) for event in page["events"])


# --- 6, 11: answering approvals ------------------------------------------------------------------


def test_approve_answers_like_respond_and_its_times_have_one_shape(
    stack: LocalStack, receiver: Receiver
) -> None:
    approval = start_waiting(stack, receiver)
    run_id = approval["run_id"]

    assert TIME.match(approval["expires_at"]), approval["expires_at"]
    _, _, listed = stack.invoke_api("GET", f"/v1/sessions/{approval['session_id']}/interactions")
    (interaction,) = listed["interactions"]
    assert TIME.match(interaction["created_at"]), interaction
    status, _, answered = stack.invoke_api("POST", f"/v1/runs/{run_id}/approve", {"approved": False})
    again, _, error = stack.invoke_api("POST", f"/v1/runs/{run_id}/approve", {"approved": False})

    assert status == 202 and answered["status"] == "answered"
    assert (again, error["error"]["code"]) == (409, "already_answered")


# --- 13, 14, 15: lists ---------------------------------------------------------------------------


def test_filtered_run_lists_fill_pages_and_apply_every_filter(stack: LocalStack) -> None:
    """Two failed runs, then a succeeded one, in one session. A page of one succeeded run is that run
    with no token (nothing else matches); failed ones page one by one to the end. The session's runs of
    another agent are none: both filters apply."""
    agent_id = create_agent(stack)
    other = create_agent(stack)
    stack.invoke_api("PATCH", f"/v1/agents/{agent_id}", {"model": "no-such-provider/x"})
    status, failed = sync_run(stack, agent_id)
    assert status == 502, failed
    session_id = stack.invoke_api("GET", f"/v1/runs/{failed['error']['details']['run_id']}")[2]["session_id"]
    assert sync_run(stack, agent_id, session_id=session_id)[0] == 502
    stack.invoke_api("PATCH", f"/v1/agents/{agent_id}", {"model": "scripted"})
    status, succeeded = sync_run(stack, agent_id, session_id=session_id)
    assert status == 200, succeeded

    def page(query: str) -> dict[str, Any]:
        status, _, body = stack.invoke_api("GET", f"/v1/runs?{query}")
        assert status == 200, body
        return dict(body)

    ok = page(f"agent_id={agent_id}&status=succeeded&limit=1")
    first = page(f"agent_id={agent_id}&status=failed&limit=1")
    second = page(f"agent_id={agent_id}&status=failed&limit=1&next_token={first['next_token']}")
    mine = page(f"session_id={session_id}&agent_id={agent_id}")
    theirs = page(f"session_id={session_id}&agent_id={other}")

    assert [r["run_id"] for r in ok["runs"]] == [succeeded["run_id"]] and ok["next_token"] is None
    assert len(first["runs"]) == 1 and first["next_token"]
    assert len(second["runs"]) == 1 and second["next_token"] is None
    assert len(mine["runs"]) == 3 and theirs["runs"] == []

    # 15: the session pages its runs (newest page first, oldest first within it); usage sums them all.
    status, _, newest = stack.invoke_api("GET", f"/v1/sessions/{session_id}?limit=2")
    assert status == 200 and len(newest["runs"]) == 2 and newest["next_token"], newest
    _, _, oldest = stack.invoke_api(
        "GET", f"/v1/sessions/{session_id}?limit=2&next_token={newest['next_token']}"
    )
    assert len(oldest["runs"]) == 1 and oldest["next_token"] is None
    assert newest["runs"][-1]["run_id"] == succeeded["run_id"]
    assert {r["run_id"] for r in newest["runs"] + oldest["runs"]} == {r["run_id"] for r in mine["runs"]}
    assert newest["usage"] == oldest["usage"] and newest["usage"]["input_tokens"] > 0
