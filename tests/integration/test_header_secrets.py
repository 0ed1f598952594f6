"""Static header secrets at rest: a custom HTTP tool's, an http hook's and an MCP server's header values
are stored as KMS ciphertext bound to the tenant, never in the clear, masked when shown, and sent as
given where the call is made. An agent stored before sealing still works, and the migration seals it."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from stepwise import mcp
from stepwise.agents import mcp_store
from stepwise.core.masking import MASK, is_sealed
from stepwise.core.tables import AgentItem
from stepwise.header_secrets import HeaderUnreadable, open_headers
from stepwise_cli import main
from stepwise_local.stack import DEFAULT_TENANT, LocalStack
from tests.fakes.mcp_server import API_KEY_HEADER, FakeMcpServer
from tests.fakes.receiver import Receiver
from tests.integration.support import wait_for_run

SECRET = "sk-live-header-5f0c2c1d"
CALL = [{"tool_calls": [{"name": "send", "arguments": {"q": "x"}}]}, {"text": "done"}]


def http_tool(url: str) -> dict[str, Any]:
    return {
        "type": "http",
        "name": "send",
        "description": "send",
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
        "endpoint": url,
        "headers": {"X-Api-Key": SECRET},
    }


def stored_doc(agent_id: str) -> dict[str, Any]:
    return dict(AgentItem.get(DEFAULT_TENANT, agent_id, consistent_read=True).doc)


def test_tool_and_hook_headers_are_sealed_at_rest_and_sent_in_the_clear(
    stack: LocalStack, receiver: Receiver
) -> None:
    _, _, agent = stack.invoke_api(
        "POST", "/v1/agents", {"name": "sealed", "tools": [http_tool(f"{receiver.url}/send")]}
    )
    agent_id = agent["agent_id"]
    hook = {
        "event": "PostToolUse",
        "type": "http",
        "config": {"url": f"{receiver.url}/hook", "headers": {"Authorization": f"Bearer {SECRET}"}},
    }
    assert stack.invoke_api("POST", f"/v1/agents/{agent_id}/hooks", hook)[0] == 201

    _, _, accepted = stack.invoke_api(
        "POST", f"/v1/agents/{agent_id}/runs", {"message": "go", "script": CALL}
    )
    assert wait_for_run(stack, accepted["run_id"], timeout=120)["status"] == "succeeded"

    doc = stored_doc(agent_id)
    assert SECRET not in json.dumps(doc)  # nowhere in the item
    assert is_sealed(doc["tools"][0]["headers"]["X-Api-Key"])
    assert is_sealed(doc["hooks"][0]["config"]["headers"]["Authorization"])
    shown = stack.invoke_api("GET", f"/v1/agents/{agent_id}")[2]
    assert shown["tools"][0]["headers"] == {"X-Api-Key": MASK}
    assert [r.headers.get("x-api-key") for r in receiver.to("/send")] == [SECRET]
    assert [r.headers.get("authorization") for r in receiver.to("/hook")] == [f"Bearer {SECRET}"]
    # bound to its tenant: the same ciphertext does not open for another
    with pytest.raises(HeaderUnreadable):
        open_headers("other", doc["tools"][0]["headers"])


def test_mcp_server_headers_are_sealed_and_opened_for_discovery_and_calls(stack: LocalStack) -> None:
    server = FakeMcpServer(api_key=SECRET)  # 401 without the header
    try:
        _, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "sealed-mcp"})
        body = {"name": "fake", "url": server.url, "headers": {API_KEY_HEADER: SECRET}}
        assert stack.invoke_api("POST", f"/v1/agents/{agent['agent_id']}/mcp-servers", body)[0] == 201

        refreshed = stack.invoke_api("POST", f"/v1/agents/{agent['agent_id']}/mcp-servers/fake/refresh")[2]
        stored = mcp_store.get_server(DEFAULT_TENANT, agent["agent_id"], "fake")
        result = mcp.call_tool(
            stored, "lookup", {"q": "x"}, tenant_id=DEFAULT_TENANT, agent_id=agent["agent_id"]
        )
    finally:
        server.close()

    assert refreshed["last_error"] is None and refreshed["headers"] == {API_KEY_HEADER: MASK}
    assert is_sealed(stored.headers[API_KEY_HEADER]) and SECRET not in json.dumps(
        stored_doc(agent["agent_id"])
    )
    assert result.ok and result.output == "found: x"


def test_an_agent_stored_in_the_clear_still_works_and_the_migration_seals_it(
    stack: LocalStack, receiver: Receiver
) -> None:
    _, _, agent = stack.invoke_api(
        "POST", "/v1/agents", {"name": "plain", "tools": [http_tool(f"{receiver.url}/send")]}
    )
    agent_id = agent["agent_id"]
    item = AgentItem.get(DEFAULT_TENANT, agent_id, consistent_read=True)
    item.doc = {**item.doc, "tools": [{**item.doc["tools"][0], "headers": {"X-Api-Key": SECRET}}]}
    item.save()  # as an agent written before sealing was stored
    _, _, accepted = stack.invoke_api(
        "POST", f"/v1/agents/{agent_id}/runs", {"message": "go", "script": CALL}
    )
    assert wait_for_run(stack, accepted["run_id"], timeout=120)["status"] == "succeeded"
    assert [r.headers.get("x-api-key") for r in receiver.to("/send")] == [SECRET]

    out = io.StringIO()
    code = main(
        ["migrate", "seal-headers", "--agents-table", "unused", "--settings-key", "unused", "--json"],
        environ={},
        stdout=out,
    )

    assert code == 0 and json.loads(out.getvalue())["sealed_agents"] >= 1
    assert is_sealed(stored_doc(agent_id)["tools"][0]["headers"]["X-Api-Key"])
    out = io.StringIO()
    assert (
        main(
            ["migrate", "seal-headers", "--agents-table", "x", "--settings-key", "x", "--json"],
            environ={},
            stdout=out,
        )
        == 0
    )
    assert json.loads(out.getvalue())["sealed_agents"] == 0  # idempotent
