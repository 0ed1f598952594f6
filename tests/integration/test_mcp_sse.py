"""`transport: "sse"`: an MCP server speaking the 2024-11-05 HTTP+SSE transport, the official
@modelcontextprotocol/server-everything in its `sse` mode (pinned in tests/conformance's lock), registered
through the API, discovered, and called through the same client the runs use."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from stepwise.agents import mcp_store
from stepwise.mcp.client import call_tool
from stepwise_local.stack import DEFAULT_TENANT, LocalStack
from tests.eventually import eventually
from tests.integration.support import CONFORMANCE, node

EVERYTHING = (
    CONFORMANCE / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
)
LOOPBACK_ONLY = Path(__file__).resolve().parents[1] / "fakes" / "loopback_listen.cjs"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def everything() -> Iterator[str]:
    assert EVERYTHING.exists(), "npm ci --prefix tests/conformance"
    port = free_port()
    process = subprocess.Popen(
        [node(), "--require", str(LOOPBACK_ONLY), str(EVERYTHING), "sse"],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        eventually(lambda: listening(port), timeout=60, what="server-everything to listen")
        yield f"http://127.0.0.1:{port}/sse"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_an_sse_server_is_discovered_and_its_tools_called(stack: LocalStack, everything: str) -> None:
    _, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "sse"})
    body = {
        "name": "everything",
        "url": everything,
        "transport": "sse",
        "tools": {"allow": ["echo", "get-sum"]},
    }

    status, _, registered = stack.invoke_api("POST", f"/v1/agents/{agent['agent_id']}/mcp-servers", body)

    assert status == 201, registered
    assert registered["transport"] == "sse" and registered["last_error"] is None, registered
    declared = sorted(t["name"] for t in registered["tools"] if t["declared"])
    assert declared == ["echo", "get-sum"] and len(registered["tools"]) > 2
    server = mcp_store.get_server(DEFAULT_TENANT, agent["agent_id"], "everything")
    result = call_tool(server, "echo", {"message": "over SSE"})
    assert result.ok and "over SSE" in str(result.output), result
