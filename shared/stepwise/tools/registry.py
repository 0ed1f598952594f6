"""The agent's tools are its allowlist: permission, hooks around each call, and dispatch by type."""

from __future__ import annotations

from types import ModuleType
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from stepwise.agents.models import Agent
from stepwise.attachments.models import Attachment
from stepwise.hooks.run import fire
from stepwise.mcp.models import McpToolRef
from stepwise.runs.models import Run
from stepwise.tools import tables
from stepwise.tools.base import TOOL_RESULT_LIMIT, ToolResult
from stepwise.tools.builtin import Settings, ToolScope, catalog
from stepwise.tools.models import AgentTool, BuiltinTool, CodeTool, DeclaredTool, HttpTool

Decision = Literal["allow", "ask", "deny"]
RESULT_READ = tables.RESULT_READ


class Verdict(BaseModel):
    """What happens to a tool call before it runs."""

    action: Decision
    arguments: dict[str, Any]
    code: str | None = None  # why a call was refused, as the model reads it
    message: str | None = None
    timeout: int | None = None  # seconds an approval may wait
    channels: list[dict[str, Any]] | None = None


# Builtins every run may call without the agent listing them, each declared only once the conversation
# needs it: result_read (a described tool result, stepwise.tools.tables) and attachment_read (the run's
# files). They only read what the run's own session already holds: allowed like any read, unless the
# agent's default denies.
RUN_BUILTINS = frozenset({RESULT_READ, "attachment_read"})


def resolve(agent: Agent, name: str) -> DeclaredTool | McpToolRef | None:
    """The tool a name refers to: one of the agent's own, one of its MCP servers' tools, or a run
    builtin."""
    from stepwise import mcp

    found = agent.tool(name) or mcp.find(agent, name)
    if found is None and name in RUN_BUILTINS:
        denied = agent.permissions.default == "deny"
        found = BuiltinTool(name=name, permission="inherit" if denied else "allow")
    return found


def permission_for(agent: Agent, tool: DeclaredTool | McpToolRef) -> Decision:
    """A tool's own permission wins; `inherit` takes the agent's default."""
    if tool.permission != "inherit":
        return tool.permission
    default = agent.permissions.default
    if default == "allow_reads":
        return "allow" if tool.read_only else "ask"
    return default


def before_tool_use(
    tenant_id: str,
    run: Run,
    agent: Agent,
    tool: DeclaredTool | McpToolRef,
    arguments: dict[str, Any],
) -> Verdict:
    """Permission first (a denied tool calls no hook), then PreToolUse hooks, which may block, rewrite
    the arguments or ask a human; a permission of `ask` asks too."""
    permission = permission_for(agent, tool)
    if permission == "deny":
        return Verdict(
            action="deny",
            arguments=arguments,
            code="permission_denied",
            message=f"tool {tool.name} is not permitted for this agent",
        )
    decision = fire(tenant_id, run.run_id, agent, "PreToolUse", tool_name=tool.name, arguments=arguments)
    if decision.action == "deny":
        return Verdict(action="deny", arguments=arguments, code="blocked_by_hook", message=decision.message)
    arguments = decision.modified_input if decision.modified_input is not None else arguments
    if isinstance(tool, AgentTool):
        # After PreToolUse, for agent tools alone: what is about to be delegated, to whom.
        delegated = fire(
            tenant_id,
            run.run_id,
            agent,
            "OnDelegation",
            tool_name=tool.name,
            arguments={"agent_id": tool.agent_id, "message": tool.child_message(arguments)},
        )
        if delegated.action == "deny":
            return Verdict(
                action="deny", arguments=arguments, code="blocked_by_hook", message=delegated.message
            )
    if decision.action == "ask" and decision.approval is not None:
        channels = [c.model_dump(mode="json") for c in decision.approval.channels]
        return Verdict(
            action="ask", arguments=arguments, timeout=decision.approval.timeout, channels=channels
        )
    return Verdict(action=permission, arguments=arguments)


def after_tool_use(
    tenant_id: str, run: Run, agent: Agent, tool_name: str, arguments: dict[str, Any], result: ToolResult
) -> ToolResult:
    """PostToolUse hooks: `modified_output` replaces the result; a deny withholds it."""
    if not agent.hooks:
        return result
    output = result.output if result.ok else {"error": result.error.model_dump() if result.error else None}
    decision = fire(
        tenant_id, run.run_id, agent, "PostToolUse", tool_name=tool_name, arguments=arguments, output=output
    )
    if decision.action == "deny":
        return ToolResult.failure("blocked_by_hook", decision.message or "the result was withheld by a hook")
    if decision.modified_output is not None:
        return ToolResult(output=decision.modified_output)
    return result


def execute(
    tool: HttpTool | CodeTool | BuiltinTool | McpToolRef,
    arguments: dict[str, Any],
    *,
    scope: ToolScope,
    idempotency_key: str,
) -> ToolResult:
    """Run an allowed call. Scope is injected here, never taken from the model's arguments."""
    from stepwise.tools.http_tool import call_http_tool  # httpx loads only where tools run

    if isinstance(tool, HttpTool):
        return call_http_tool(tool, arguments, idempotency_key=idempotency_key)
    if isinstance(tool, McpToolRef):
        return _call_mcp(tool, arguments, scope)
    from stepwise.settings.accessor import tenant_settings

    if isinstance(tool, CodeTool):
        from stepwise.tools.code_tool import call_code_tool

        return call_code_tool(tool, arguments, settings=tenant_settings(scope.tenant_id))
    config = catalog.load(tool.name).Config.model_validate(tool.config)
    return run_builtin(
        tool.name, arguments, scope=scope, settings=tenant_settings(scope.tenant_id), config=config
    )


def run_builtin(
    name: str, arguments: Any, *, scope: ToolScope, settings: Settings, config: BaseModel
) -> ToolResult:
    """The builtin's `run` on the model's arguments once they are valid; the failure the model reads when
    they are not."""
    module = catalog.load(name)
    parsed = builtin_arguments(module, arguments)
    if isinstance(parsed, ToolResult):
        return parsed
    result: ToolResult = module.run(parsed, scope=scope, settings=settings, config=config)
    return result


def builtin_arguments(module: ModuleType, arguments: Any) -> BaseModel | ToolResult:
    """A builtin's `Arguments` for what the model sent, or the `invalid_arguments` failure it reads.

    The schema the model was given decides, and its message says what is wrong ("limit: 0 is less than
    the minimum of 1"): pydantic alone would coerce what the schema refuses ("5" for an integer). The
    model the schema derives from then gives the tool typed values; what it still refuses (a lone
    surrogate in a string with a length limit) is an argument error too."""
    from stepwise.tools.builtin._provider import invalid_arguments  # httpx loads only where tools run

    prepare = getattr(module.Arguments, "prepare", None)
    if prepare is not None and isinstance(arguments, dict):
        arguments = prepare(arguments)
    failure = invalid_arguments(module.INPUT_SCHEMA, arguments)
    if failure is not None:
        return failure
    try:
        parsed: BaseModel = module.Arguments.model_validate(arguments)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'/'.join(map(str, e['loc'])) or '(arguments)'}: {e['msg']}" for e in exc.errors()
        )
        return ToolResult.failure("invalid_arguments", problems)
    return parsed


def _call_mcp(tool: McpToolRef, arguments: dict[str, Any], scope: ToolScope) -> ToolResult:
    """An MCP call whose images are kept under the run (before the ledger stores the result, which
    holds only their references), for the model to be shown as images."""
    from stepwise import mcp
    from stepwise.attachments import intake

    kept: list[Attachment] = []

    def keep(mime: str, data: bytes) -> str | None:
        attachment = intake.keep_tool_image(scope.tenant_id, scope.run_id, tool.name, mime, data)
        if attachment is None:
            return None
        kept.append(attachment)
        return f"[image {len(kept)}: {attachment.content_type}, {attachment.size} bytes, shown to you]"

    result = mcp.call_tool(
        tool.server,
        tool.tool.name,
        arguments,
        tenant_id=scope.tenant_id,
        agent_id=scope.agent_id,
        on_image=keep,
    )
    return result.model_copy(update={"files": kept}) if kept else result


def result_limit(tool: DeclaredTool | McpToolRef | None) -> int | None:
    """How much of a result the model sees; knowledge search (and delegation) are never cut."""
    if isinstance(tool, BuiltinTool) and not getattr(catalog.load(tool.name), "TRUNCATE", True):
        return None
    return TOOL_RESULT_LIMIT
