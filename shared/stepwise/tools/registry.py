"""The agent's tools are its allowlist: resolving, permission checks and dispatch by tool type."""

from __future__ import annotations

from typing import Any

from stepwise.models import Agent, HttpTool
from stepwise.tools.base import ToolResult

Decision = str  # "allow" | "ask" | "deny"


def permission_for(agent: Agent, tool: HttpTool) -> Decision:
    """A tool's own permission wins; `inherit` takes the agent's default."""
    if tool.permission != "inherit":
        return tool.permission
    default = agent.permissions.default
    if default == "allow_reads":
        return "allow" if tool.read_only else "ask"
    return default


def execute(tool: HttpTool, arguments: dict[str, Any]) -> ToolResult:
    from stepwise.tools.http_tool import call_http_tool  # httpx loads only where tools run

    return call_http_tool(tool, arguments)
