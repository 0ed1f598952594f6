"""AllowedModels (locally STEPWISE_ALLOWED_MODELS): a tenant naming a model outside the operator's
glob patterns gets 422 `model_not_allowed`, when an agent is created or patched and when a run would
use one (an agent stored before the bound narrowed, or the default model outside it)."""

from collections.abc import Iterator

import pytest

from stepwise.agents.bounds import allowed_for_step
from stepwise.core import config
from stepwise.core.errors import ModelForbidden, step_error_code
from stepwise_local.stack import LocalStack


@pytest.fixture
def bound(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    monkeypatch.setenv("STEPWISE_ALLOWED_MODELS", "bedrock/*, scripted")
    config.reset()
    yield monkeypatch
    monkeypatch.undo()
    config.reset()


def test_creating_an_agent_with_a_model_outside_the_bound_is_422(stack: LocalStack, bound: object) -> None:
    status, _, body = stack.invoke_api("POST", "/v1/agents", {"name": "a", "model": "openai/gpt-4o"})

    assert status == 422, body
    assert body["error"]["code"] == "model_not_allowed"
    assert body["error"]["details"]["errors"][0]["loc"] == ["body", "model"]
    assert "bedrock/*" in body["error"]["message"]


def test_models_inside_the_bound_are_accepted(stack: LocalStack, bound: object) -> None:
    for model in ("bedrock/amazon.nova-lite-v1:0", "scripted", None):
        status, _, body = stack.invoke_api("POST", "/v1/agents", {"name": "a", "model": model})
        assert status == 201, (model, body)


def test_patching_an_agent_to_a_model_outside_the_bound_is_422_and_changes_nothing(
    stack: LocalStack, bound: object
) -> None:
    _, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "a", "model": "scripted"})
    path = f"/v1/agents/{agent['agent_id']}"

    status, _, body = stack.invoke_api("PATCH", path, {"model": "anthropic/claude-3-5-haiku-20241022"})

    assert status == 422 and body["error"]["code"] == "model_not_allowed", body
    assert stack.invoke_api("GET", path)[2]["model"] == "scripted"


def test_a_run_of_an_agent_stored_before_the_bound_narrowed_is_422_and_records_nothing(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "old", "model": "openai/gpt-4o"})
    monkeypatch.setenv("STEPWISE_ALLOWED_MODELS", "bedrock/*")
    config.reset()
    try:
        status, _, body = stack.invoke_api("POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "hi"})
        sync = stack.invoke_api("POST", f"/v1/agents/{agent['agent_id']}/run", {"message": "hi"})
        runs = stack.invoke_api("GET", f"/v1/runs?agent_id={agent['agent_id']}")[2]["runs"]
    finally:
        monkeypatch.undo()
        config.reset()

    assert status == 422 and body["error"]["code"] == "model_not_allowed", body
    assert sync[0] == 422 and sync[2]["error"]["code"] == "model_not_allowed", sync
    assert runs == []


def test_an_agent_naming_no_model_cannot_run_when_the_default_is_outside_the_bound(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "default"})
    monkeypatch.setenv("STEPWISE_ALLOWED_MODELS", "bedrock/*")
    config.reset()
    try:
        status, _, body = stack.invoke_api("POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "hi"})
    finally:
        monkeypatch.undo()
        config.reset()

    assert status == 422, body
    assert body["error"]["details"] == {"model": "scripted"}


def test_the_model_step_fails_a_run_whose_model_left_the_bound(bound: pytest.MonkeyPatch) -> None:
    with pytest.raises(ModelForbidden, match="openai/gpt-4o"):
        allowed_for_step("openai/gpt-4o")
    # The run records the stable code the API uses too.
    assert step_error_code("ModelForbidden") == "model_not_allowed"
    assert allowed_for_step("bedrock/amazon.nova-lite-v1:0") == "bedrock/amazon.nova-lite-v1:0"
