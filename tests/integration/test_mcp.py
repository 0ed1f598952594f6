"""MCP servers on the local stack against a real MCP server on loopback (the official SDK's).

Registration discovers and caches the tools in the agent's item, responses never show header values,
failing servers are recorded and skipped, and calls go through tools/call with the configured headers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from stepwise import mcp
from stepwise.agents import mcp_servers as servers
from stepwise.agents import mcp_store as store
from stepwise.agents import store as agents
from stepwise.core.masking import MASK, is_sealed
from stepwise.header_secrets import open_headers
from stepwise.mcp.models import MAX_SERVERS
from stepwise_local.stack import DEFAULT_TENANT, LocalStack
from tests.fakes.mcp_server import API_KEY_HEADER, FakeMcpServer
from tests.integration.support import OTHER_KEY

KEY = "test"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeMcpServer]:
    server = FakeMcpServer(api_key=KEY)
    yield server
    server.close()


@pytest.fixture
def agent_id(stack: LocalStack) -> str:
    status, _, body = stack.invoke_api("POST", "/v1/agents", {"name": "mcp"})
    assert status == 201, body
    return str(body["agent_id"])


def register(stack: LocalStack, agent_id: str, **body: Any) -> tuple[int, Any]:
    status, _, answer = stack.invoke_api("POST", f"/v1/agents/{agent_id}/mcp-servers", body)
    return status, answer


def register_fake(
    stack: LocalStack, agent_id: str, fake: FakeMcpServer, name: str = "fake", **extra: Any
) -> Any:
    status, body = register(stack, agent_id, name=name, url=fake.url, headers={API_KEY_HEADER: KEY}, **extra)
    assert status == 201, body
    return body


def test_registration_discovers_and_caches_the_tools_and_masks_headers(
    stack: LocalStack, agent_id: str, fake: FakeMcpServer
) -> None:
    # When a server is registered with the header it requires
    body = register_fake(stack, agent_id, fake)
    assert body["trusted"] is False  # unless registered so, its hints are not believed

    # Then even its read-only tool asks first and is not effect-free
    lookup = mcp.find(agents.get(DEFAULT_TENANT, agent_id), "mcp__fake__lookup")
    assert lookup is not None and lookup.permission == "ask" and lookup.effect == "undeclared"

    # Then its tools were discovered (so the header was sent), with their annotations
    tools = {t["name"]: t for t in body["tools"]}
    assert set(tools) == {"lookup", "delete_item", "fail"}
    assert tools["lookup"]["annotations"]["readOnlyHint"] is True
    assert tools["delete_item"]["annotations"]["destructiveHint"] is True
    assert tools["lookup"]["input_schema"]["required"] == ["q"]
    assert tools["lookup"]["exposed_name"] == "mcp__fake__lookup"
    assert body["discovered_at"] and body["last_error"] is None and body["enabled"] is True

    # And no answer shows the header's value
    assert body["headers"] == {API_KEY_HEADER: MASK}
    _, _, listed = stack.invoke_api("GET", f"/v1/agents/{agent_id}/mcp-servers")
    _, _, one = stack.invoke_api("GET", f"/v1/agents/{agent_id}/mcp-servers/fake")
    assert [s["name"] for s in listed["mcp_servers"]] == ["fake"]
    assert listed["mcp_servers"][0]["headers"] == one["headers"] == {API_KEY_HEADER: MASK}
    assert one["tools"] == body["tools"]

    # And the tools are cached in the agent's item, where a run reads them without a connection
    cached = store.get_server(DEFAULT_TENANT, agent_id, "fake")
    assert {t.name for t in cached.tools} == set(tools)
    assert is_sealed(cached.headers[API_KEY_HEADER])  # sealed at rest (stepwise.header_secrets)
    assert open_headers(DEFAULT_TENANT, cached.headers) == {API_KEY_HEADER: KEY}
    requests_before = fake.requests
    names = [d["function"]["name"] for d in mcp.declarations(agents.get(DEFAULT_TENANT, agent_id))]
    assert names == ["mcp__fake__delete_item", "mcp__fake__fail", "mcp__fake__lookup"]
    assert fake.requests == requests_before


def test_a_duplicate_name_is_409(stack: LocalStack, agent_id: str, fake: FakeMcpServer) -> None:
    register_fake(stack, agent_id, fake)
    status, body = register(stack, agent_id, name="fake", url=fake.url)
    assert status == 409 and body["error"]["code"] == "mcp_server_exists"


@pytest.mark.parametrize(
    "body",
    [
        {"name": "local", "command": "npx", "args": ["@modelcontextprotocol/server-everything"]},
        {"name": "local", "url": "stdio://server-everything"},
    ],
)
def test_stdio_is_refused_with_422(stack: LocalStack, agent_id: str, body: dict[str, Any]) -> None:
    status, answer = register(stack, agent_id, **body)
    assert status == 422 and "stdio" in json.dumps(answer["error"]["details"])
    assert store.list_servers(DEFAULT_TENANT, agent_id) == []


def test_an_internal_url_is_refused_at_registration(stack: LocalStack, agent_id: str) -> None:
    status, body = register(stack, agent_id, name="metadata", url="http://169.254.169.254/mcp")
    assert status == 422 and body["error"]["code"] == "blocked_destination"
    assert store.list_servers(DEFAULT_TENANT, agent_id) == []


def test_a_wrong_header_is_recorded_and_the_server_skipped(
    stack: LocalStack, agent_id: str, fake: FakeMcpServer
) -> None:
    # When a server is registered with a header it refuses
    status, body = register(stack, agent_id, name="locked", url=fake.url, headers={API_KEY_HEADER: "wrong"})

    # Then it is registered, with the error and no tools
    assert status == 201, body
    assert body["tools"] == [] and body["discovered_at"] is None
    assert "401" in body["last_error"]

    # And runs go on without it, next to a server that works
    register_fake(stack, agent_id, fake, name="good")
    subject = agents.get(DEFAULT_TENANT, agent_id)
    assert {d["function"]["name"].split("__")[1] for d in mcp.declarations(subject)} == {"good"}
    assert mcp.find(subject, "mcp__locked__lookup") is None


def test_refresh_rediscovers_and_records_failures(stack: LocalStack, agent_id: str) -> None:
    own = FakeMcpServer(api_key=KEY)
    try:
        first = register_fake(stack, agent_id, own)
        path = f"/v1/agents/{agent_id}/mcp-servers/fake/refresh"

        # When the server starts refusing the key, a refresh records it and drops the tools
        own.api_key = "rotated"
        status, _, failed = stack.invoke_api("POST", path)
        assert status == 200 and failed["tools"] == [] and "401" in failed["last_error"]
        assert failed["discovered_at"] == first["discovered_at"]  # the last discovery that succeeded

        # When it takes the key again, a refresh brings the tools back
        own.api_key = KEY
        status, _, refreshed = stack.invoke_api("POST", path)
        assert status == 200 and refreshed["last_error"] is None
        assert {t["name"] for t in refreshed["tools"]} == {"lookup", "delete_item", "fail"}
        assert refreshed["discovered_at"] > first["discovered_at"]
        assert store.get_server(DEFAULT_TENANT, agent_id, "fake").discovered_at is not None
    finally:
        own.close()


def test_refresh_if_stale_only_touches_stale_servers(
    stack: LocalStack, agent_id: str, fake: FakeMcpServer
) -> None:
    register_fake(stack, agent_id, fake, name="one")
    register_fake(stack, agent_id, fake, name="two")
    register(stack, agent_id, name="off", url=fake.url, enabled=False)

    # Fresh servers are left alone: no connection is made
    before = fake.requests
    assert servers.refresh_if_stale(DEFAULT_TENANT, agent_id) == []
    assert fake.requests == before

    # Stale ones are rediscovered (enabled ones only)
    refreshed = servers.refresh_if_stale(DEFAULT_TENANT, agent_id, max_age=timedelta(0))
    assert sorted(s.name for s in refreshed) == ["one", "two"]
    assert all(len(s.tools) == 3 and s.last_error is None for s in refreshed)


def test_a_disabled_server_is_not_discovered_declared_or_called(
    stack: LocalStack, agent_id: str, fake: FakeMcpServer
) -> None:
    before = fake.requests
    status, body = register(stack, agent_id, name="off", url=fake.url, enabled=False)

    assert status == 201 and body["enabled"] is False and body["tools"] == []
    assert fake.requests == before
    assert mcp.declarations(agents.get(DEFAULT_TENANT, agent_id)) == []
    result = mcp.call_tool(
        store.get_server(DEFAULT_TENANT, agent_id, "off"),
        "lookup",
        {"q": "x"},
        tenant_id=DEFAULT_TENANT,
        agent_id=agent_id,
    )
    assert result.error is not None and result.error.code == "mcp_unavailable"
    assert fake.requests == before


def test_call_tool_success_is_error_and_bad_arguments(
    stack: LocalStack, agent_id: str, fake: FakeMcpServer
) -> None:
    # A server registered as trusted: its readOnlyHint makes lookup parallel-safe
    body = register_fake(stack, agent_id, fake, trusted=True)
    assert body["trusted"] is True
    subject = agents.get(DEFAULT_TENANT, agent_id)

    # A call the model makes by its exposed name reaches the server's own tool, with the headers
    ref = mcp.find(subject, "mcp__fake__lookup")
    assert ref is not None and ref.parallel_safe
    result = mcp.call_tool(
        ref.server, ref.tool.name, {"q": "stepwise"}, tenant_id=DEFAULT_TENANT, agent_id=agent_id
    )
    assert result.ok and result.output == "found: stepwise"
    assert {"q": "stepwise"} in fake.tool_calls("lookup")

    # A tool that fails reports isError, which the model reads as mcp_tool_error
    failing = mcp.find(subject, "mcp__fake__fail")
    assert failing is not None
    failed = mcp.call_tool(failing.server, failing.tool.name, {}, tenant_id=DEFAULT_TENANT, agent_id=agent_id)
    assert failed.error is not None and failed.error.code == "mcp_tool_error"
    assert "failed on purpose" in failed.error.message

    # Arguments that break the cached schema never leave
    calls = len(fake.calls)
    bad = mcp.call_tool(ref.server, "lookup", {"q": 1}, tenant_id=DEFAULT_TENANT, agent_id=agent_id)
    assert bad.error is not None and bad.error.code == "invalid_arguments" and len(fake.calls) == calls

    # A destructive tool asks first
    destructive = mcp.find(subject, "mcp__fake__delete_item")
    assert destructive is not None and destructive.permission == "ask" and not destructive.parallel_safe


def test_call_tool_when_the_server_is_down_or_refuses_the_key(stack: LocalStack, agent_id: str) -> None:
    own = FakeMcpServer(api_key=KEY)
    register_fake(stack, agent_id, own)
    server = store.get_server(DEFAULT_TENANT, agent_id, "fake")

    own.api_key = "rotated"
    refused = mcp.call_tool(server, "lookup", {"q": "x"}, tenant_id=DEFAULT_TENANT, agent_id=agent_id)
    assert (
        refused.error is not None
        and refused.error.code == "mcp_unavailable"
        and "401" in refused.error.message
    )

    own.close()
    down = mcp.call_tool(server, "lookup", {"q": "x"}, tenant_id=DEFAULT_TENANT, agent_id=agent_id)
    assert down.error is not None and down.error.code == "mcp_unavailable"
    assert "could not reach" in down.error.message


def test_declarations_are_sorted_and_stable_across_servers(
    stack: LocalStack, agent_id: str, fake: FakeMcpServer
) -> None:
    register_fake(stack, agent_id, fake, name="zeta")
    register_fake(stack, agent_id, fake, name="alpha")

    first = mcp.declarations(agents.get(DEFAULT_TENANT, agent_id))
    servers.refresh(DEFAULT_TENANT, agent_id, "zeta")  # rediscovery changes the time, not the declarations
    again = mcp.declarations(agents.get(DEFAULT_TENANT, agent_id))

    names = [d["function"]["name"] for d in first]
    assert names == sorted(names) and names[0] == "mcp__alpha__delete_item" and len(names) == 6
    assert json.dumps(first) == json.dumps(again)


def test_delete(stack: LocalStack, agent_id: str, fake: FakeMcpServer) -> None:
    register_fake(stack, agent_id, fake)
    path = f"/v1/agents/{agent_id}/mcp-servers/fake"

    assert stack.invoke_api("DELETE", path)[0] == 204
    status, _, body = stack.invoke_api("GET", path)
    assert status == 404 and body["error"]["code"] == "mcp_server_not_found"
    assert stack.invoke_api("DELETE", path)[0] == 404
    assert stack.invoke_api("POST", f"{path}/refresh")[0] == 404
    assert mcp.declarations(agents.get(DEFAULT_TENANT, agent_id)) == []


def test_an_agent_holds_a_bounded_number_of_servers(stack: LocalStack, agent_id: str) -> None:
    for i in range(MAX_SERVERS):
        assert (
            register(stack, agent_id, name=f"s{i}", url="https://mcp.example.com/mcp", enabled=False)[0]
            == 201
        )
    status, body = register(
        stack, agent_id, name="one-more", url="https://mcp.example.com/mcp", enabled=False
    )
    assert status == 409 and body["error"]["code"] == "mcp_server_limit"


def test_another_tenants_agent_is_404_on_every_route(
    stack: LocalStack, agent_id: str, fake: FakeMcpServer
) -> None:
    register_fake(stack, agent_id, fake)
    base = f"/v1/agents/{agent_id}/mcp-servers"
    before = fake.requests

    for method, path, body in [
        ("POST", base, {"name": "mine", "url": fake.url}),
        ("GET", base, None),
        ("GET", f"{base}/fake", None),
        ("POST", f"{base}/fake/refresh", None),
        ("DELETE", f"{base}/fake", None),
    ]:
        status, _, answer = stack.invoke_api(method, path, body, key=OTHER_KEY)
        assert status == 404 and answer["error"]["code"] == "agent_not_found", (method, path, answer)

    assert fake.requests == before  # nothing was discovered on the other tenant's behalf
    assert [s.name for s in store.list_servers(DEFAULT_TENANT, agent_id)] == ["fake"]


def test_agent_views_never_show_mcp_header_values(stack: LocalStack) -> None:
    from stepwise.agents import store as agent_store

    _, _, created = stack.invoke_api("POST", "/v1/agents", {"name": "masked"})
    agent_store.update(
        "local",
        created["agent_id"],
        {
            "mcp_servers": [
                {
                    "name": "srv",
                    "url": "https://mcp.example/mcp",
                    "headers": {"X-Api-Key": "hunter2"},
                    "created_at": "2026-01-01T00:00:00+00:00",
                }
            ]
        },
    )

    # A whole entry, as registration writes it: a malformed one would make these views 500 (where the
    # secret is trivially absent) and break every later test that lists the local tenant's agents.
    for path in (f"/v1/agents/{created['agent_id']}", "/v1/agents"):
        status, _, body = stack.invoke_api("GET", path)
        assert status == 200, body
        assert "hunter2" not in json.dumps(body)
        assert "srv" in json.dumps(body)
