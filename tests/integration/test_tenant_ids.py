"""Tenant ids and the ids in keys: a tenant id cannot hold the key separator, an id from a path, a query
string or a body must have the shape of the ids we issue, and a query never returns another tenant's
item even when its key says otherwise."""

import re
from typing import Any
from urllib.parse import quote

import pytest

from stepwise.api.auth import authorize
from stepwise.core.ids import (
    AGENT_ID,
    HOOK_ID,
    INTERACTION_ID,
    RUN_ID,
    SCHEDULE_ID,
    SESSION_ID,
    InvalidTenant,
    new_id,
    valid_tenant,
)
from stepwise.core.schema import utcnow
from stepwise.core.tables import ApiKeyItem, RunItem, bind, tenant_key
from stepwise.store import keys, runs
from stepwise_local.stack import LocalStack, local_api_keys

BAD_TENANTS = ["a#b", "", "tenant with spaces", "x" * 65, "-leading-dash", "a/b", "a:b"]


def error_code(body: Any) -> str:
    assert set(body) == {"error"}, body
    return str(body["error"]["code"])


@pytest.fixture(scope="module")
def agent(stack: LocalStack) -> dict[str, Any]:
    status, _, body = stack.invoke_api("POST", "/v1/agents", {"name": "ids"})
    assert status == 201
    return body


@pytest.mark.parametrize("tenant", BAD_TENANTS)
def test_a_tenant_id_that_could_spell_another_key_is_refused_everywhere_keys_are_made(
    stack: LocalStack, tenant: str
) -> None:
    with pytest.raises(InvalidTenant):
        valid_tenant(tenant)
    with pytest.raises(InvalidTenant):
        tenant_key(tenant, "ses_X")
    with pytest.raises(InvalidTenant):
        keys.store_key(keys.generate_key(), tenant)


def test_local_keys_refuse_a_bad_tenant_at_start() -> None:
    with pytest.raises(ValueError, match="tenant id"):
        local_api_keys({"STEPWISE_LOCAL_API_KEYS": "sk-a:good,sk-b:evil#tenant"})
    assert local_api_keys({"STEPWISE_LOCAL_API_KEYS": "sk-a:ten_01.x-y"})["sk-a"] == "ten_01.x-y"


def test_the_authorizer_refuses_a_key_stored_for_a_bad_tenant(stack: LocalStack) -> None:
    # Written around store_key, as an older version or a hand-edited table could have.
    bind()
    key = keys.generate_key()
    ApiKeyItem(keys.hash_key(key), tenant_id="local#agt_X", key_prefix=key[:8], created_at=utcnow()).save()
    assert authorize(f"Bearer {key}") == {"isAuthorized": True, "context": {"auth_error": "invalid_api_key"}}
    status, _, body = stack.invoke_api("GET", "/v1/agents", key=key)
    assert status == 401 and error_code(body) == "invalid_api_key"


def test_the_api_refuses_a_bad_tenant_in_the_authorizer_context() -> None:
    from stepwise.api.app import handle

    event = {
        "version": "2.0",
        "routeKey": "GET /v1/agents",
        "rawPath": "/v1/agents",
        "rawQueryString": "",
        "headers": {},
        "requestContext": {
            "http": {"method": "GET", "path": "/v1/agents"},
            "authorizer": {"lambda": {"tenant_id": "local#x"}},
        },
    }
    response = handle(event, None)
    assert response["statusCode"] == 401 and '"invalid_api_key"' in response["body"]


def test_issued_ids_match_their_patterns() -> None:
    for prefix, pattern in [
        ("agt", AGENT_ID),
        ("run", RUN_ID),
        ("ses", SESSION_ID),
        ("hook", HOOK_ID),
        ("sch", SCHEDULE_ID),
    ]:
        assert re.fullmatch(pattern, new_id(prefix)), prefix
    run_id = new_id("run")
    # The shape stepwise.loop.calls derives an interaction id in.
    assert re.fullmatch(INTERACTION_ID, f"int_{run_id.removeprefix('run_')}_12_3")
    assert not re.fullmatch(RUN_ID, run_id + "#x") and not re.fullmatch(RUN_ID, run_id.lower())


@pytest.mark.parametrize(
    ("method", "path", "code"),
    [
        ("GET", "/v1/agents/{agent}%3Ax", "agent_not_found"),
        ("GET", "/v1/agents/agt_lowercase", "agent_not_found"),
        ("GET", "/v1/runs/{run}%3Ax", "run_not_found"),
        ("GET", "/v1/runs/{run}%3Ax/events", "run_not_found"),
        ("GET", "/v1/sessions/{session}%3Ax", "session_not_found"),
        ("GET", "/v1/sessions/{session}%3Ax/interactions", "session_not_found"),
        ("DELETE", "/v1/agents/{agent}/hooks/hook_%3Ax", "hook_not_found"),
        ("DELETE", "/v1/agents/{agent}/schedules/sch_x:y", "schedule_not_found"),
    ],
)
def test_a_path_id_of_another_shape_is_the_404_of_an_unknown_id(
    stack: LocalStack, agent: dict[str, Any], method: str, path: str, code: str
) -> None:
    run_id, session_id = new_id("run"), new_id("ses")
    url = path.format(agent=agent["agent_id"], run=run_id, session=session_id)
    status, _, body = stack.invoke_api(method, url)
    assert status == 404 and error_code(body) == code
    # A "#" never even matches a route (the resolver's path variables exclude it): a 404 all the same.
    status, _, body = stack.invoke_api(method, url.replace("%3A", "%23").replace(":", "%23"))
    assert status == 404 and error_code(body).endswith("not_found")


@pytest.mark.parametrize("name", ["agent_id", "session_id"])
def test_an_id_in_a_query_string_is_checked(stack: LocalStack, agent: dict[str, Any], name: str) -> None:
    value = quote(f"{agent['agent_id']}#x" if name == "agent_id" else "other#ses_x")
    status, _, body = stack.invoke_api("GET", f"/v1/runs?{name}={value}")
    assert status == 422 and error_code(body) == "validation_error"
    assert body["error"]["details"]["errors"][0]["loc"] == ["query", name]


def test_a_session_id_in_a_body_is_checked(stack: LocalStack, agent: dict[str, Any]) -> None:
    status, _, body = stack.invoke_api(
        "POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "x", "session_id": "other#ses_x"}
    )
    assert status == 422 and error_code(body) == "validation_error"


def test_a_query_drops_an_item_of_another_tenant_even_under_this_tenants_key(
    stack: LocalStack, agent: dict[str, Any]
) -> None:
    # An item whose index key says tenant `local` but which belongs to `other`: a query by that key
    # finds it in DynamoDB, and the store must still not hand it to `local`.
    bind()
    agent_id, now = agent["agent_id"], utcnow()
    planted = new_id("run")
    RunItem(
        "other",
        planted,
        agent_id=agent_id,
        session_id=new_id("ses"),
        agent_key=tenant_key("local", agent_id),
        session_key=tenant_key("local", "ses_planted"),
        status="succeeded",
        input="x",
        max_steps=1,
        created_at=now,
    ).save()
    found, _ = runs.list_runs("local", agent_id=agent_id)
    assert planted not in {r.run_id for r in found}
    status, _, body = stack.invoke_api("GET", f"/v1/runs?agent_id={agent_id}")
    assert status == 200 and planted not in {r["run_id"] for r in body["runs"]}
