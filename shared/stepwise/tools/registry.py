"""The agent's tools are its allowlist: permission, hooks around each call, and dispatch by type."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from stepwise.models import Agent, ClientTool, HttpTool, Run
from stepwise.tools.base import ToolResult

Decision = Literal["allow", "ask", "deny"]


class Verdict(BaseModel):
    """What happens to a tool call before it runs."""

    action: Decision
    arguments: dict[str, Any]
    code: str | None = None  # why a call was refused, as the model reads it
    message: str | None = None
    timeout: int | None = None  # seconds an approval may wait
    channels: list[dict[str, Any]] | None = None


def permission_for(agent: Agent, tool: HttpTool | ClientTool) -> Decision:
    """A tool's own permission wins; `inherit` takes the agent's default."""
    if tool.permission != "inherit":
        return tool.permission
    default = agent.permissions.default
    if default == "allow_reads":
        return "allow" if tool.read_only else "ask"
    return default


def before_tool_use(
    tenant_id: str, run: Run, agent: Agent, tool: HttpTool | ClientTool, arguments: dict[str, Any]
) -> Verdict:
    decision = permission_for(agent, tool)
    if decision == "deny":
        return Verdict(
            action="deny",
            arguments=arguments,
            code="permission_denied",
            message=f"tool {tool.name} is not permitted for this agent",
        )
    return Verdict(action=decision, arguments=arguments)


def after_tool_use(
    tenant_id: str, run: Run, agent: Agent, tool_name: str, arguments: dict[str, Any], result: ToolResult
) -> ToolResult:
    return result


def execute(tool: HttpTool, arguments: dict[str, Any]) -> ToolResult:
    from stepwise.tools.http_tool import call_http_tool  # httpx loads only where tools run

    return call_http_tool(tool, arguments)
