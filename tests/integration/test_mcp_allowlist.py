"""An MCP server's allowlist and per-tool permissions through the API: kept on registration, shown, kept
across a refresh, which reports the allowlisted names the server no longer offers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stepwise.agents import store as agents
from stepwise.loop.gating import permission_for
from stepwise.mcp import declarations, find
from stepwise_local.stack import DEFAULT_TENANT, LocalStack
from tests.fakes.mcp_server import FakeMcpServer


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeMcpServer]:
    server = FakeMcpServer()
    yield server
    server.close()


def test_the_allowlist_and_permissions_are_kept_shown_and_survive_a_refresh(
    stack: LocalStack, fake: FakeMcpServer
) -> None:
    _, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "allowlist"})
    agent_id = agent["agent_id"]
    body = {
        "name": "shop",
        "url": fake.url,
        "tools": {"allow": ["lookup", "delete_item", "export_all"], "deny": ["delete_item"]},
        "permissions": {"lookup": "ask"},
        "permission": "allow",
    }

    status, _, registered = stack.invoke_api("POST", f"/v1/agents/{agent_id}/mcp-servers", body)
    _, _, refreshed = stack.invoke_api("POST", f"/v1/agents/{agent_id}/mcp-servers/shop/refresh")

    assert status == 201, registered
    for shown in (registered, refreshed):
        assert shown["tool_filter"] == {
            "allow": ["lookup", "delete_item", "export_all"],
            "deny": ["delete_item"],
        }
        assert shown["permissions"] == {"lookup": "ask"}
        assert shown["missing_tools"] == ["export_all"]  # allowlisted, not offered: reported, kept
        assert {t["name"]: t["declared"] for t in shown["tools"]} == {
            "lookup": True,
            "delete_item": False,
            "fail": False,
        }
    stored = agents.get(DEFAULT_TENANT, agent_id)
    assert [d["function"]["name"] for d in declarations(stored)] == ["mcp__shop__lookup"]
    assert find(stored, "mcp__shop__delete_item") is None
    lookup = find(stored, "mcp__shop__lookup")
    assert lookup is not None and permission_for(stored, lookup) == "ask"  # its own, before the server's


def test_a_filter_with_a_bad_name_is_refused(stack: LocalStack, fake: FakeMcpServer) -> None:
    _, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "allowlist-bad"})
    body = {"name": "shop", "url": fake.url, "tools": {"allow": [""]}}

    status, _, answer = stack.invoke_api("POST", f"/v1/agents/{agent['agent_id']}/mcp-servers", body)

    assert status == 422, answer
