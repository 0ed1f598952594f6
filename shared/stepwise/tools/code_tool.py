"""Executing a code tool: the tenant's function runs in the tenant's code sandbox, never here.

The model's arguments are checked against the tool's schema first (nothing reaches the sandbox
otherwise), then the harness (stepwise.tools.code_source) goes to the sandbox through code_execute's
client, with the same settings (`CODE_SANDBOX_URL`, `CODE_SANDBOX_API_KEY`) and the same SSRF guard. What
the code can do wrong is a result the model reads, each with its own code:

    invalid_arguments  the arguments break the tool's input_schema (the sandbox is not called)
    not_configured     no CODE_SANDBOX_URL
    timeout            the code ran past the tool's timeout_seconds (the sandbox stopped it)
    code_error         run raised (or the source failed to load, or the process died without a result)
    invalid_result     run returned something that is not JSON
    invalid_tool       the source defines no callable run
and the sandbox's own failures as code_execute reports them (provider_error, provider_auth, …).
"""

from __future__ import annotations

import json
from typing import Any

from referencing.exceptions import Unresolvable

from stepwise.net.ssrf import AllowHosts
from stepwise.tools.base import ToolResult
from stepwise.tools.builtin import Settings
from stepwise.tools.builtin._provider import cap, invalid_arguments
from stepwise.tools.builtin.code_execute import SandboxAnswer, call_sandbox
from stepwise.tools.code_source import new_mark, program
from stepwise.tools.models import CodeTool

DETAIL_LIMIT = 4_000  # characters of a traceback or of stderr quoted to the model


def call_code_tool(
    tool: CodeTool,
    arguments: dict[str, Any],
    *,
    settings: Settings,
    http_timeout: float | None = None,
    allow_hosts: AllowHosts = None,
) -> ToolResult:
    """Run `tool` with `arguments` in the sandbox: its JSON return value, or a failure the model reads.
    `http_timeout` replaces the tool's timeout plus code_execute's margin (for tests)."""
    try:
        failure = invalid_arguments(tool.input_schema, arguments)
    except Unresolvable as exc:
        return ToolResult.failure(
            "invalid_tool", f"{tool.name}: input_schema has an unresolvable $ref: {exc}"
        )
    if failure is not None:
        return failure
    try:
        arguments_json = json.dumps(arguments, ensure_ascii=False, allow_nan=False)
    except ValueError as exc:
        return ToolResult.failure("invalid_arguments", f"arguments must be plain JSON: {exc}")
    mark = new_mark()
    payload = {
        "language": tool.language,
        "code": program(tool.language, tool.source, arguments_json, mark),
        "timeout_seconds": tool.timeout_seconds,
    }
    answer = call_sandbox(payload, settings=settings, http_timeout=http_timeout, allow_hosts=allow_hosts)
    if isinstance(answer, ToolResult):
        return answer
    return outcome(tool, answer, mark)


def outcome(tool: CodeTool, answer: SandboxAnswer, mark: str) -> ToolResult:
    """The tool's result from the sandbox's answer to the harness."""
    if answer.timed_out:
        return ToolResult.failure(
            "timeout", f"{tool.name} did not finish within {tool.timeout_seconds} seconds and was stopped"
        )
    envelope = _envelope(answer.stdout, mark)
    if envelope is None:
        # No result line: the process died (a crash, out of memory, os._exit) before the harness wrote.
        stderr = cap(answer.stderr.strip(), DETAIL_LIMIT)
        detail = f": {stderr}" if stderr else ""
        return ToolResult.failure(
            "code_error", f"{tool.name} ended without a result (exit code {answer.exit_code}){detail}"
        )
    status = envelope.get("status")
    if status == "ok":
        return ToolResult(output=envelope.get("value"))
    if status == "no_entry":
        entry = "def run(args)" if tool.language == "python" else "export function run(args)"
        return ToolResult.failure("invalid_tool", f"{tool.name}: the source defines no callable {entry}")
    if status == "not_json":
        kind, why = envelope.get("type"), envelope.get("message")
        return ToolResult.failure(
            "invalid_result", f"{tool.name} returned a value that is not JSON ({kind}): {why}"
        )
    where = "failed to load" if status == "load_error" else "raised"
    trace = cap(str(envelope.get("traceback") or "").strip(), DETAIL_LIMIT)
    message = f"{tool.name} {where} {envelope.get('type')}: {envelope.get('message')}"
    return ToolResult.failure("code_error", f"{message}\n{trace}" if trace else message)


def _envelope(stdout: str, mark: str) -> dict[str, Any] | None:
    """The harness's envelope: the last line after the marker (the tool's own prints come before it)."""
    at = stdout.rfind(mark)
    if at < 0:
        return None
    line = stdout[at + len(mark) :].split("\n", 1)[0]
    try:
        envelope = json.loads(line)
    except ValueError:
        return None
    return envelope if isinstance(envelope, dict) else None
