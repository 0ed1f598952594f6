"""The local stack honours its environment and answers as API Gateway does: every template parameter
is read from the variable its functions know it by, methods without a route are a 404 (never a 501),
and the authorizer runs for every request, so a missing key gets the contract's 401 and a revoked key
stops at once."""

import http.client
import json
from collections.abc import Iterator

import pytest

from stepwise.core.schema import utcnow
from stepwise.core.tables import ApiKeyItem, bind
from stepwise.store import keys
from stepwise_local.cfn_yaml import load_template
from stepwise_local.gateway import serve
from stepwise_local.stack import (
    DEPLOY_ONLY_PARAMETERS,
    TEMPLATE,
    LocalStack,
    Resolver,
    _parameters,
    parameter_env,
)


@pytest.fixture(scope="module")
def template() -> dict:  # type: ignore[type-arg]
    return load_template(TEMPLATE)


def test_every_parameter_that_reaches_a_function_has_its_variable(template: dict) -> None:  # type: ignore[type-arg]
    mapping = parameter_env(template)
    assert set(mapping) | DEPLOY_ONLY_PARAMETERS == set(template["Parameters"])
    assert mapping["ApprovalSender"] == "APPROVAL_SENDER"
    assert mapping["DefaultModel"] == "STEPWISE_MODEL"


def test_the_developers_environment_reaches_the_functions(
    template: dict,  # type: ignore[type-arg]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("APPROVAL_SENDER", "approvals@example.com")
    monkeypatch.setenv("STEPWISE_EVENTS_TTL_DAYS", "7")
    # What the stack sets each function's `VAR: !Ref Param` to.
    resolver = Resolver(template, _parameters(template))
    env = {variable: resolver.resolve({"Ref": name}) for name, variable in parameter_env(template).items()}
    assert env["APPROVAL_SENDER"] == "approvals@example.com"
    assert env["STEPWISE_EVENTS_TTL_DAYS"] == "7"


def test_an_unset_variable_keeps_the_parameters_default(
    template: dict,  # type: ignore[type-arg]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("APPROVAL_SENDER", raising=False)
    assert _parameters(template)["ApprovalSender"] == template["Parameters"]["ApprovalSender"]["Default"]


@pytest.fixture
def server(stack: LocalStack) -> Iterator[tuple[str, int]]:
    running = serve(stack.gateway, port=0, quiet=True)
    yield running.server_address[:2]  # type: ignore[misc]
    running.shutdown()
    running.server_close()


@pytest.mark.parametrize("method", ["TRACE", "PROPFIND", "BREW", "CONNECT"])
def test_a_method_without_a_route_is_the_contracts_404_not_501(server: tuple[str, int], method: str) -> None:
    """The $default route takes what no route matches: the API's 404 `route_not_found`."""
    connection = http.client.HTTPConnection(*server, timeout=10)
    connection.request(method, "/v1/agents", headers={"Authorization": "Bearer sk-local-dev"})
    response = connection.getresponse()
    assert response.status == 404
    assert json.loads(response.read())["error"]["code"] == "route_not_found"
    connection.close()


def test_a_missing_key_over_http_is_the_contracts_401(server: tuple[str, int]) -> None:
    connection = http.client.HTTPConnection(*server, timeout=10)
    connection.request("GET", "/v1/agents")
    response = connection.getresponse()
    body = json.loads(response.read())
    assert response.status == 401 and body["error"]["code"] == "invalid_api_key"
    connection.close()


def test_a_revoked_key_stops_at_the_next_request(stack: LocalStack) -> None:
    key = keys.generate_key()
    keys.store_key(key, "local")
    assert stack.invoke_api("GET", "/v1/agents", key=key)[0] == 200
    bind()
    ApiKeyItem(keys.hash_key(key)).update(actions=[ApiKeyItem.revoked_at.set(utcnow())])
    status, _, body = stack.invoke_api("GET", "/v1/agents", key=key)  # no cached decision lets it in
    assert status == 401 and body["error"]["code"] == "invalid_api_key"


def test_the_slack_signing_secret_is_the_developers_variable_locally(monkeypatch: pytest.MonkeyPatch) -> None:
    """No template parameter carries it any more (in AWS it is a Secrets Manager secret): locally the
    variable itself is the source, read when a request needs it."""
    from stepwise.approvals.channels import slack

    monkeypatch.setenv("STEPWISE_SECRETS", "env")
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "local-slack-secret")
    assert slack.signing_secret() == "local-slack-secret"
