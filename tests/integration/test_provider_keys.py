"""Tenants' own provider keys (issue 24, section 5): the agent's, else the tenant's, else the
deployment's; never shown; the operator can require them."""

import json
from collections.abc import Iterator
from typing import Any

import pytest

from stepwise.core.ids import new_id
from stepwise.store import keys
from stepwise_local.stack import LocalStack
from tests.fakes.openai_server import FakeOpenAI
from tests.integration.support import wait_for_run

MODEL = "openai/gpt-fake"
DEPLOYMENT_KEY = "sk-deployment-0000"
TENANT_KEY = "sk-tenant-own-1111"
AGENT_KEY = "sk-agent-own-2222"
SETTING = "providers.openai.api_key"


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
    monkeypatch.setenv("OPENAI_API_KEY", DEPLOYMENT_KEY)
    yield fake
    fake.close()


def _tenant() -> str:
    key = f"sk-{new_id('key')}"
    keys.store_key(key, new_id("ten"))
    return key


def _agent(stack: LocalStack, key: str) -> str:
    status, _, body = stack.invoke_api("POST", "/v1/agents", {"name": "byok", "model": MODEL}, key=key)
    assert status == 201, body
    return str(body["agent_id"])


def _run(stack: LocalStack, key: str, agent_id: str) -> dict[str, Any]:
    _, _, accepted = stack.invoke_api("POST", f"/v1/agents/{agent_id}/runs", {"message": "hi"}, key=key)
    return wait_for_run(stack, accepted["run_id"], key=key)


def _sent_key(model: FakeOpenAI) -> str:
    return model.requests[-1].headers["authorization"].removeprefix("Bearer ")


def test_the_agents_key_else_the_tenants_else_the_deployments(stack: LocalStack, model: FakeOpenAI) -> None:
    key = _tenant()
    agent_id, other_agent = _agent(stack, key), _agent(stack, key)

    model.text("with the deployment's")
    assert _run(stack, key, agent_id)["status"] == "succeeded"
    deployment = _sent_key(model)
    put = stack.invoke_api("PUT", f"/v1/settings/{SETTING}", {"value": TENANT_KEY}, key=key)
    model.text("with the tenant's")
    assert _run(stack, key, agent_id)["status"] == "succeeded"
    tenants = _sent_key(model)
    own = stack.invoke_api(
        "PUT", f"/v1/settings/{SETTING}?agent_id={agent_id}", {"value": AGENT_KEY}, key=key
    )
    model.text("with the agent's")
    finished = _run(stack, key, agent_id)
    agents = _sent_key(model)
    model.text("another agent: the tenant's")
    _run(stack, key, other_agent)

    assert (deployment, tenants, agents) == (DEPLOYMENT_KEY, TENANT_KEY, AGENT_KEY)
    assert _sent_key(model) == TENANT_KEY
    # Never shown: not by the writes, the listing, the agent or the run.
    _, _, listed = stack.invoke_api("GET", "/v1/settings", key=key)
    assert {(s["key"], s["agent_id"]) for s in listed["settings"]} == {(SETTING, None), (SETTING, agent_id)}
    _, _, agent = stack.invoke_api("GET", f"/v1/agents/{agent_id}", key=key)
    _, _, events = stack.invoke_api("GET", f"/v1/runs/{finished['run_id']}/events", key=key)
    shown = json.dumps([put[2], own[2], listed, agent, finished, events])
    assert TENANT_KEY not in shown and AGENT_KEY not in shown
    # Deleting the agent's key falls back to the tenant's.
    deleted = stack.invoke_api("DELETE", f"/v1/settings/{SETTING}?agent_id={agent_id}", key=key)
    model.text("the tenant's again")
    _run(stack, key, agent_id)
    assert deleted[0] == 204 and _sent_key(model) == TENANT_KEY
    # An agent's own key goes with the agent.
    stack.invoke_api("PUT", f"/v1/settings/{SETTING}?agent_id={agent_id}", {"value": AGENT_KEY}, key=key)
    assert stack.invoke_api("DELETE", f"/v1/agents/{agent_id}", key=key)[0] == 204
    _, _, after = stack.invoke_api("GET", "/v1/settings", key=key)
    assert [s["agent_id"] for s in after["settings"]] == [None]


def test_an_agents_setting_is_only_a_provider_key_of_the_tenants_own_agent(stack: LocalStack) -> None:
    key = _tenant()
    agent_id = _agent(stack, key)
    someone_elses = _agent(stack, _tenant())

    plain = stack.invoke_api("PUT", f"/v1/settings/EXA_API_KEY?agent_id={agent_id}", {"value": "x"}, key=key)
    foreign = stack.invoke_api(
        "PUT", f"/v1/settings/{SETTING}?agent_id={someone_elses}", {"value": "x"}, key=key
    )
    odd = stack.invoke_api("PUT", "/v1/settings/providers.OpenAI.api_key", {"value": "x"}, key=key)

    assert plain[0] == 422, plain
    assert foreign[0] == 404 and foreign[2]["error"]["code"] == "agent_not_found", foreign
    # provider names are lower case, as litellm names them: a key no setting can have, like an unknown id
    assert odd[0] == 404 and odd[2]["error"]["code"] == "setting_not_found", odd


def test_required_tenant_keys_fail_a_run_without_one(
    stack: LocalStack, model: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEPWISE_REQUIRE_TENANT_KEYS", "true")
    key = _tenant()
    agent_id = _agent(stack, key)
    asked = len(model.requests)

    run = _run(stack, key, agent_id)

    assert run["status"] == "failed"
    assert run["error"]["code"] == "provider_key_missing", run["error"]
    assert SETTING in run["error"]["message"]
    assert len(model.requests) == asked  # the deployment's key was never sent
