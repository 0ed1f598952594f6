"""MCP servers: remote tools an agent uses over the Model Context Protocol (streamable HTTP only).

What a run needs, none of which imports the `mcp` SDK until a call is made:

- `declarations(agent)`: the model's function declarations for the cached tools of the agent's enabled
  servers, named `mcp__{server}__{tool}`, sorted by name;
- `find(agent, name)`: the `McpToolRef` for a name the model called, or None;
- `call_tool(server, tool_name, arguments)`: run it (`ref.server`, `ref.tool.name`) and get a ToolResult.

Registration and discovery live in stepwise.agents.mcp_servers, the SDK client in stepwise.mcp.client.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stepwise.mcp.models import MCP_TIMEOUT, McpServer, McpTool, McpToolRef
from stepwise.mcp.tools import declarations, find
from stepwise.tools.base import ToolResult

# (mime type, bytes) -> the text that stands for the image in the result, or None to describe it as before.
ImageSink = Callable[[str, bytes], str | None]

__all__ = ["McpServer", "McpTool", "McpToolRef", "call_tool", "declarations", "find"]


def call_tool(
    server: McpServer,
    tool_name: str,
    arguments: dict[str, Any],
    *,
    tenant_id: str,
    agent_id: str,
    timeout: float = MCP_TIMEOUT,
    on_image: ImageSink | None = None,
) -> ToolResult:
    """tools/call `tool_name` (the server's own name) on `server`, an MCP server of the tenant's agent;
    never raises for what the server does (`mcp_tool_error`, `mcp_unavailable`, `blocked_destination`,
    `invalid_arguments`, `mcp_needs_authorization`). `on_image` keeps each image the tool returns and
    says what the text shows in its place."""
    from stepwise.header_secrets import HeaderUnreadable, open_headers
    from stepwise.mcp.authorization import token_source
    from stepwise.mcp.client import call_tool as call  # the SDK loads on the first MCP call
    from stepwise.mcp.grants import DynamoGrantStore

    try:  # the header secrets are opened here, where the call is made, and nowhere else
        server = server.model_copy(update={"headers": open_headers(tenant_id, server.headers)})
    except HeaderUnreadable as exc:
        return ToolResult.failure("mcp_unavailable", f"MCP server {server.name}: {exc}")
    token = token_source(DynamoGrantStore(), tenant_id, agent_id, server)
    return call(server, tool_name, arguments, timeout=timeout, token=token, on_image=on_image)
