"""Property-based tests of the API against its own OpenAPI spec, over HTTP on the local stack.

Schemathesis reads `/v1/openapi.json` from the running stack and sends each operation generated requests,
valid and invalid: no answer may be a server error, invalid input must be refused with a 4xx, and every
answer must be one the spec documents, in the documented media type and shape. Bounded: a few examples per
operation, no shrinking, long polls capped. Separate tests check that every private route answers 401
without a key and with a bad one, and pin down the server errors Schemathesis found.

(Schemathesis' own pytest plugin cannot load a spec from a fixture under pytest 9, so each operation is
a plain parametrized test driving the operation's Hypothesis strategy.)
"""

from __future__ import annotations

import base64
import json
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from stepwise.api.auth import is_public
from tests.contract.test_template import http_routes
from tests.e2e.support import KEY
from tests.eventually import eventually

AUTH = {"Authorization": f"Bearer {KEY}"}
MAX_EXAMPLES = 12  # per operation, valid and invalid ones together
LONG_POLL_CAP = 0.2  # seconds of `wait` on the events routes, so that no example waits out a long poll
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
# A2A's JSON-RPC binding answers every call 200, a refused one with a JSON-RPC error (the official client
# raises on any other status and would lose the error), so a request that breaks the schema is not a 4xx.
JSON_RPC_OVER_200 = {("POST", "/a2a/{agent_id}")}
# The spec and the Swagger UI serving it are not described in the spec itself.
UNDESCRIBED = {("GET", "/v1/openapi.json"), ("GET", "/v1/docs")}
# GET /v1/mcp only says 405 (the MCP server opens no stream), so the spec leaves it out (test_openapi).
UNDESCRIBED |= {("GET", "/v1/mcp")}
# The catch-all route for paths and methods no other route answers is no operation (its 404
# `route_not_found` is tested in tests/integration/test_papercuts.py).
UNDESCRIBED |= {("ANY", "$default")}
ROUTES = sorted(
    {(m, p) for _, key, _ in http_routes() for m, p in [key.split(" ", 1)]} - UNDESCRIBED,
    key=lambda route: (route[1], route[0]),
)
PRIVATE = [route for route in ROUTES if not is_public(route[1])]
PUBLIC = [route for route in ROUTES if is_public(route[1])]
# These would delete or rewrite the resources every other example is pinned to (see `targets`): they
# keep their generated ids, so they exercise validation and 404s.
UNPINNED = {
    ("PATCH", "/v1/agents/{agent_id}"),
    ("DELETE", "/v1/agents/{agent_id}"),
    ("DELETE", "/v1/sessions/{session_id}"),
}


counts: Counter[str] = Counter()


@pytest.fixture(scope="module")
def targets(base_url: str) -> Iterator[dict[str, str]]:
    """An agent, a finished run and its session of this module's own, so that examples get past the 404s
    without touching the demo agent that other tests use."""
    with httpx.Client(base_url=base_url, headers=AUTH, timeout=30) as api:
        agent = api.post("/v1/agents", json={"name": "schemathesis", "model": "scripted"})
        assert agent.status_code == 201, agent.text
        agent_id = agent.json()["agent_id"]
        run = api.post(f"/v1/agents/{agent_id}/runs", json={"message": "hello"})
        assert run.status_code == 202, run.text
        run_id, session_id = run.json()["run_id"], run.json()["session_id"]
        eventually(
            lambda: api.get(f"/v1/runs/{run_id}").json()["finished_at"],
            timeout=60,
            interval=0.1,
            what="the run to end",
        )
    yield {"agent_id": agent_id, "run_id": run_id, "session_id": session_id}
    print(f"\nschemathesis: {len(ROUTES)} operations, {dict(counts)}")


@pytest.fixture(scope="module")
def api_schema(base_url: str) -> Any:
    schema = schemathesis.openapi.from_url(f"{base_url}/v1/openapi.json", headers=AUTH, timeout=30)
    schema.config.update(base_url=base_url, request_timeout=30)
    # Every example carries the key (the 401s have their own tests below), and unknown query parameters
    # are ignored by design rather than refused.
    schema.config.generation.update(with_security_parameters=False, allow_extra_parameters=False)
    # Invalid input is refused by any 4xx; a body over the limit, for one, is a 413 before it is validated.
    schema.config.checks.negative_data_rejection.expected_statuses = ["4XX"]
    return schema


def _cap_long_polls(case: Case) -> None:
    wait = (case.query or {}).get("wait")
    if isinstance(wait, int | float) and not isinstance(wait, bool) and wait > LONG_POLL_CAP:
        case.query["wait"] = LONG_POLL_CAP


@pytest.mark.parametrize(("method", "path"), ROUTES, ids=[f"{m} {p}" for m, p in ROUTES])
def test_generated_requests_get_no_server_error_and_documented_answers(
    api_schema: Any, targets: dict[str, str], method: str, path: str
) -> None:
    operation = api_schema[path][method]
    pinned = {} if (method, path) in UNPINNED else {k: v for k, v in targets.items() if f"{{{k}}}" in path}
    strategy = st.one_of(
        operation.as_strategy(generation_mode=mode, path_parameters=pinned or None) for mode in GenerationMode
    )

    @given(case=strategy)
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure is reported as found
        derandomize=True,  # the same examples every run: a failure here reproduces; explore with the CLI
        suppress_health_check=list(HealthCheck),
    )
    def generated(case: Case) -> None:
        _cap_long_polls(case)
        response = case.call(headers=AUTH)
        counts["examples"] += 1
        counts[f"{response.status_code // 100}xx"] += 1
        checks = CHECKS
        if (method, path) in JSON_RPC_OVER_200:
            checks = [c for c in CHECKS if c is not negative_data_rejection]
            if response.status_code == 200 and case.body is not None and not _json_rpc_call(case.body):
                assert "error" in response.json(), response.text  # refused, in the protocol's way
        case.validate_response(response, checks=checks)

    generated()
    counts["operations"] += 1


def _json_rpc_call(body: Any) -> bool:
    """A body the JSON-RPC envelope accepts (its params may still be refused)."""
    return isinstance(body, dict) and body.get("jsonrpc") == "2.0" and isinstance(body.get("method"), str)


def _concrete(path: str) -> str:
    return re.sub(r"{\w+}", "x", path)


@pytest.mark.parametrize(("method", "path"), PRIVATE, ids=[f"{m} {p}" for m, p in PRIVATE])
def test_every_private_route_answers_401_without_a_key_or_with_a_bad_one(
    base_url: str, method: str, path: str
) -> None:
    with httpx.Client(base_url=base_url, timeout=30) as client:
        missing = client.request(method, _concrete(path), json={})
        bad = client.request(method, _concrete(path), json={}, headers={"Authorization": "Bearer sk-nope"})
        not_bearer = client.request(method, _concrete(path), json={}, headers={"Authorization": KEY})

    # The authorizer has no identity source, so even a request without the header reaches it and the
    # API answers in the contract's shape.
    for refused in (missing, bad, not_bearer):
        assert refused.status_code == 401, refused.text
        assert refused.json()["error"]["code"] == "invalid_api_key"


@pytest.mark.parametrize(("method", "path"), PUBLIC, ids=[f"{m} {p}" for m, p in PUBLIC])
def test_public_routes_answer_without_a_key(base_url: str, method: str, path: str) -> None:
    # The console's page and files need none; the others each check their own credential instead: a
    # signed link (403 for a forged one), Slack's signature (checked only where a signing secret is set:
    # 404 without one), an OAuth callback's state.
    expected = {
        ("GET", "/v1/health"): 200,
        ("GET", "/v1/console"): 200,  # the page asks for a key itself
        ("GET", "/v1/console/{asset}"): 404,  # no file named "x"
        ("GET", "/a2a/{agent_id}/.well-known/agent-card.json"): 404,  # no agent "x" opens its A2A door
        ("GET", "/v1/approvals/{token}"): 403,
        ("POST", "/v1/approvals/{token}"): 403,
        ("POST", "/v1/integrations/slack/interactions"): 404,  # the e2e stack has no Slack secret
        ("GET", "/v1/integrations/mcp/oauth/start"): 400,  # no flow: opens no authorization
        ("GET", "/v1/integrations/gmail/oauth/start"): 400,
        ("GET", "/v1/integrations/outlook/oauth/start"): 400,
        ("GET", "/v1/integrations/mcp/oauth/callback"): 400,  # no state: matches no authorization
        ("GET", "/v1/integrations/gmail/oauth/callback"): 400,  # no state, as MCP's
        ("GET", "/v1/integrations/outlook/oauth/callback"): 400,
        ("POST", "/v1/integrations/gmail/push"): 403,  # the e2e stack sets no GmailPushAudience
        ("POST", "/v1/integrations/outlook/notify"): 422,  # no body: not a Graph notification
        ("POST", "/v1/integrations/ses"): 401,  # no body: no SNS signature
        ("POST", "/v1/triggers/{trigger_id}/in"): 404,  # no trigger "x"
    }[(method, path)]
    with httpx.Client(base_url=base_url, timeout=30) as client:
        response = client.request(method, _concrete(path))

    assert response.status_code == expected, response.text


def test_a_next_token_the_api_never_issued_is_a_400(base_url: str) -> None:
    forged = base64.urlsafe_b64encode(json.dumps({"a": {"S": "x"}}).encode()).decode()
    with httpx.Client(base_url=base_url, headers=AUTH, timeout=30) as api:
        response = api.get("/v1/runs", params={"next_token": forged})

    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_next_token"


# --- Server errors Schemathesis found, fixed ------------------------------------------------------


def test_a_json_body_that_is_not_utf8_is_a_400(base_url: str) -> None:
    with httpx.Client(base_url=base_url, headers=AUTH, timeout=30) as api:
        response = api.post("/v1/agents", content=b"\xa5\x93{}", headers={"Content-Type": "application/json"})

    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "malformed_json"


def test_clearing_an_agents_permissions_is_a_422_that_changes_nothing(
    base_url: str, targets: dict[str, str]
) -> None:
    path = f"/v1/agents/{targets['agent_id']}"
    with httpx.Client(base_url=base_url, headers=AUTH, timeout=30) as api:
        before = api.get(path).json()
        response = api.patch(path, json={"permissions": None, "name": "renamed"})
        after = api.get(path).json()

    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"]["errors"][0]["loc"] == ["body", "permissions"]
    assert after == before


def test_a_sync_run_over_the_agents_token_budget_is_a_422(base_url: str) -> None:
    with httpx.Client(base_url=base_url, headers=AUTH, timeout=30) as api:
        agent = api.post("/v1/agents", json={"name": "tiny budget", "max_tokens_budget": 1}).json()
        response = api.post(f"/v1/agents/{agent['agent_id']}/run", json={"message": "hello"})

    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "budget_exceeded"
    assert response.json()["error"]["details"]["run_id"]


def test_slack_clicks_without_a_signing_secret_are_a_404(base_url: str) -> None:
    with httpx.Client(base_url=base_url, timeout=30) as client:
        response = client.post("/v1/integrations/slack/interactions", content=b"payload=%7B%7D")

    assert response.status_code == 404, response.text
    assert response.json()["error"]["code"] == "slack_not_configured"
