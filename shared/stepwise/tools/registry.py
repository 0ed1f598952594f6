"""The tools of the tools package as a call runs them: dispatch by type, and a builtin's arguments
checked once, against the schema the model was given, before its `run` (stepwise.tools.builtin).

Which tool a name means for an agent, its permission and the hooks around a call are the loop's
(stepwise.loop.gating and stepwise.loop.execution); so are MCP tools, which the loop calls itself.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from pydantic import BaseModel, ValidationError

from stepwise.tools import tables
from stepwise.tools.base import TOOL_RESULT_LIMIT, ToolResult
from stepwise.tools.builtin import Settings, ToolScope, catalog
from stepwise.tools.models import BuiltinTool, CodeTool, HttpTool

RESULT_READ = tables.RESULT_READ

# Builtins every run may call without the agent listing them, each declared only once the conversation
# needs it: result_read (a described tool result, stepwise.tools.tables) and attachment_read (the run's
# files). They only read what the run's own session already holds: allowed like any read, unless the
# agent's default denies.
RUN_BUILTINS = frozenset({RESULT_READ, "attachment_read"})


def run(
    tool: HttpTool | CodeTool | BuiltinTool,
    arguments: dict[str, Any],
    *,
    scope: ToolScope,
    idempotency_key: str,
) -> ToolResult:
    """Run an allowed call. Scope is injected here, never taken from the model's arguments."""
    from stepwise.tools.http_tool import call_http_tool  # httpx loads only where tools run

    if isinstance(tool, HttpTool):
        from stepwise.header_secrets import HeaderUnreadable, open_headers

        try:  # the header secrets are opened here, where the call is made, and nowhere else
            sent = tool.model_copy(update={"headers": open_headers(scope.tenant_id, tool.headers)})
        except HeaderUnreadable as exc:
            return ToolResult.failure("invalid_tool", f"{tool.name}: {exc}")
        return call_http_tool(sent, arguments, idempotency_key=idempotency_key)
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


def result_limit(tool: object) -> int | None:
    """How much of a result the model sees of any tool's call: a builtin may ask never to be cut
    (knowledge search); everything else is cut at TOOL_RESULT_LIMIT."""
    if isinstance(tool, BuiltinTool) and not getattr(catalog.load(tool.name), "TRUNCATE", True):
        return None
    return TOOL_RESULT_LIMIT
