"""`stepwise keys create` issues a key that the authorizer accepts, for the tenant it names."""

import pytest

from stepwise.store.keys import KEY_PREFIX
from stepwise_cli import main
from stepwise_local.stack import LocalStack


def test_a_created_key_authenticates_as_its_tenant(
    stack: LocalStack, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keys", "create", "--tenant", "cli-tenant", "--table", "ApiKeysTable"]) == 0
    key = capsys.readouterr().out.strip()

    assert key.startswith(KEY_PREFIX) and len(key) > 40
    status, _, created = stack.invoke_api("POST", "/v1/agents", {"name": "from-cli"}, key=key)
    assert status == 201
    assert stack.invoke_api("GET", f"/v1/agents/{created['agent_id']}")[0] == 404  # not tenant `local`
    assert stack.invoke_api("GET", f"/v1/agents/{created['agent_id']}", key=key)[0] == 200
