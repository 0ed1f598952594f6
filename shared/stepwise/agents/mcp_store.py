"""MCP servers, kept as entries of their agent's item (`Agent.mcp_servers`) with their cached tools, so a
run reads its agent, its tools and its MCP servers' tools in one read. Writes go through
`agents.modify`: each change is applied to the agent as stored and saved under its version."""

from __future__ import annotations

from typing import Any

from stepwise.agents import store as agents
from stepwise.agents.models import Agent
from stepwise.core.errors import Conflict, NotFound
from stepwise.mcp.models import MAX_SERVERS, McpServer, servers_of


def _not_found(agent_id: str, name: str) -> NotFound:
    return NotFound(f"agent {agent_id} has no MCP server named {name}", code="mcp_server_not_found")


def _stored(servers: list[McpServer]) -> list[dict[str, Any]]:
    return [s.model_dump(mode="json") for s in servers]


def list_servers(tenant_id: str, agent_id: str) -> list[McpServer]:
    return servers_of(agents.get(tenant_id, agent_id))


def get_server(tenant_id: str, agent_id: str, name: str) -> McpServer:
    server = next((s for s in list_servers(tenant_id, agent_id) if s.name == name), None)
    if server is None:
        raise _not_found(agent_id, name)
    return server


def ensure_addable(tenant_id: str, agent_id: str, name: str) -> None:
    """Raise what `add_server` would for `name` (404, 409), before the work of discovering its tools."""
    _check_addable(agent_id, list_servers(tenant_id, agent_id), name)


def _check_addable(agent_id: str, current: list[McpServer], name: str) -> None:
    if any(s.name == name for s in current):
        raise Conflict(f"agent {agent_id} already has an MCP server named {name}", code="mcp_server_exists")
    if len(current) >= MAX_SERVERS:
        raise Conflict(
            f"agent {agent_id} already has {MAX_SERVERS} MCP servers, the most an agent can have",
            code="mcp_server_limit",
        )


def add_server(tenant_id: str, agent_id: str, server: McpServer) -> McpServer:
    def adding(agent: Agent) -> dict[str, Any]:
        current = servers_of(agent)
        _check_addable(agent_id, current, server.name)
        return {"mcp_servers": _stored([*current, server])}

    agents.modify(tenant_id, agent_id, adding)
    return server


def remove_server(tenant_id: str, agent_id: str, name: str) -> None:
    def removing(agent: Agent) -> dict[str, Any]:
        current = servers_of(agent)
        if not any(s.name == name for s in current):
            raise _not_found(agent_id, name)
        return {"mcp_servers": _stored([s for s in current if s.name != name])}

    agents.modify(tenant_id, agent_id, removing)


def save_discoveries(tenant_id: str, agent_id: str, discovered: list[McpServer]) -> list[McpServer]:
    """Store the tools, time and error of fresh discoveries, and return the entries as stored.

    Only the discovery fields are written, and only to the registration they were made for (same name and
    `created_at`): a server deleted, or deleted and registered again, meanwhile is left as it is.
    """
    fresh = {(s.name, s.created_at): s for s in discovered}
    stored: list[McpServer] = []

    def merging(agent: Agent) -> dict[str, Any] | None:
        merged: list[McpServer] = []
        for server in servers_of(agent):
            found = fresh.get((server.name, server.created_at))
            if found is not None:
                server = server.model_copy(
                    update={
                        "tools": found.tools,
                        "discovered_at": found.discovered_at,
                        "last_error": found.last_error,
                    }
                )
            merged.append(server)
        stored[:] = [s for s in merged if (s.name, s.created_at) in fresh]
        return {"mcp_servers": _stored(merged)} if stored else None

    agents.modify(tenant_id, agent_id, merging)
    return stored
