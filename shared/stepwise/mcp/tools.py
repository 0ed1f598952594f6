"""An agent's MCP tools as a run sees them: declarations for the model and lookup by name.

Both read only the tool lists cached in the agent's item: building a step's tool set never opens a
connection and never imports the `mcp` SDK. A server that is disabled, or whose discovery failed and
so has no cached tools, contributes nothing (fail-open: the run goes on without it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from stepwise.mcp.models import McpServer, McpTool, McpToolRef, ServerOwner, servers_of
from stepwise.mcp.naming import PREFIX, exposed_names
from stepwise.tools.models import Permission


def _exposed(agent: ServerOwner) -> Iterator[tuple[str, McpServer, McpTool]]:
    for server in servers_of(agent):
        if not server.enabled:
            continue
        names = exposed_names(server.name, [t.name for t in server.tools])
        seen: set[str] = set()
        for tool in server.tools:
            if tool.name not in seen and server.declared(tool):
                seen.add(tool.name)
                yield names[tool.name], server, tool


def declarations(agent: ServerOwner) -> list[dict[str, Any]]:
    """OpenAI-style function declarations of every enabled server's cached tools, sorted by name, with
    keys sorted inside each schema: the same cached tools always give the same bytes."""
    out = [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": tool.description or f"{tool.name} (from MCP server {server.name})",
                "parameters": json.loads(json.dumps(tool.input_schema, sort_keys=True)),
            },
        }
        for name, server, tool in _exposed(agent)
    ]
    return sorted(out, key=lambda d: d["function"]["name"])


def find(agent: ServerOwner, name: str) -> McpToolRef | None:
    """The MCP tool the model calls `name` (mcp__{server}__{tool}), or None when no enabled server of
    the agent has it cached."""
    if not name.startswith(PREFIX):
        return None
    for exposed, server, tool in _exposed(agent):
        if exposed == name:
            ref = McpToolRef(name=exposed, server=server, tool=tool, permission="inherit")
            return ref.model_copy(update={"permission": _permission(agent, ref)})
    return None


def _permission(agent: ServerOwner, ref: McpToolRef) -> Permission:
    """The rules in order (then stepwise.loop.gating.permission_for resolves `inherit` with the agent's
    default): the tool's own permission on its server, the server's permission, `ask` for a destructive
    tool (`deny` when the agent denies by default)."""
    own = ref.server.permissions.get(ref.tool.name)
    if own is not None:
        return own
    if ref.server.permission != "inherit":
        return ref.server.permission
    if ref.destructive:  # as McpToolRef judges it: an untrusted server's tools all are
        # A destructive tool asks a human first, unless the agent denies by default anyway.
        return "deny" if agent.permissions.default == "deny" else "ask"
    return "inherit"
