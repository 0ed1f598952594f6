"""A run as MCP shows it (stepwise.protocols.mcp_server's vocabulary): a task of the 2025-11-25 tasks
utility, a tool result, a line of progress. Pure: the caller reads the run and its open waits."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import mcp_types as types
from pydantic import BaseModel

from stepwise.approvals import display
from stepwise.core.schema import rfc3339
from stepwise.interactions.models import Interaction
from stepwise.runs import progress
from stepwise.runs.models import Run, RunEvent

POLL_INTERVAL_MS = 5000  # what tasks/get suggests: each poll is an invocation of the API function
LATER = {"result_type", "ttl_ms", "cache_scope"}  # result fields of a later revision than any served
QUIET_EVENTS = frozenset({"chunk"})  # too many and too small to be progress
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "run_id": {"type": "string"},
        "session_id": {"type": "string"},
        "status": {"type": "string"},
        "output": {"type": ["string", "null"]},
        "error": {"type": ["object", "null"]},
    },
    "required": ["run_id", "session_id", "status"],
}


def tool_result(run: Run) -> types.CallToolResult:
    answer: dict[str, Any] = {
        "run_id": run.run_id,
        "session_id": run.session_id,
        "status": run.status,
        "output": run.output,
        "error": run.error.model_dump() if run.error else None,
    }
    if run.status == "succeeded":
        return types.CallToolResult(content=[text(run.output or "")], structured_content=answer)
    reason = f": {run.error.code}: {run.error.message}" if run.error else ""
    return types.CallToolResult(
        content=[text(f"The run {run.status}{reason}")], structured_content=answer, is_error=True
    )


def task(run: Run, pending: list[Interaction]) -> types.Task:
    if run.status == "succeeded":
        status, message = "completed", "The run succeeded."
    elif run.status in ("failed", "timed_out"):
        reason = f": {run.error.code}: {run.error.message}" if run.error else ""
        status, message = "failed", f"The run {run.status}{reason}"
    elif run.status == "cancelled":
        reason = f": {run.error.message}" if run.error else ""
        status, message = "cancelled", f"The run was cancelled{reason}."
    elif pending:
        status, message = "input_required", " ".join(awaited(i) for i in pending)
    else:
        status, message = "working", working(run)
    times = [run.created_at, *(i.created_at for i in pending)]
    return types.Task(
        task_id=run.run_id,
        status=status,
        status_message=message,
        created_at=iso(run.created_at),
        last_updated_at=iso(run.finished_at or max(times)),
        ttl=None,  # a task lives as long as its run's record
        poll_interval=None if run.done else POLL_INTERVAL_MS,
    )


def task_dump(run: Run, pending: list[Interaction]) -> dict[str, Any]:
    return with_ttl(dump(task(run, pending)), None)


def working(run: Run) -> str:
    if run.status == "queued":
        return "The run is queued: it starts when its session's active run ends."
    if run.status == "waiting":
        return "The run waits on a delegated run, a budget or the model provider; it goes on by itself."
    return f"The run is working (step {run.steps})."


def awaited(interaction: Interaction) -> str:
    """Which wait, what it is about, and how to answer it through the API."""
    arguments = display.truncate(
        display.reveal_hidden(json.dumps(interaction.arguments, ensure_ascii=False, default=str)), 1000
    )
    respond = progress.respond_call(interaction)
    if interaction.kind == "approval":
        return (
            f"Approval {interaction.interaction_id} awaited: may run {interaction.run_id} call "
            f"{interaction.tool_name} with {arguments}? Answer with {respond}."
        )
    return (
        f"Client tool {interaction.interaction_id} awaited: {interaction.tool_name} with {arguments} "
        f"(tool_call_id {interaction.tool_call_id}). Answer with {respond}."
    )


def describe(event: RunEvent) -> str:
    data = event.data
    tool = data.get("tool_name")
    described = {
        "step_started": f"step {data.get('step', '')} started".replace("  ", " "),
        "tool_call": f"calling {tool}",
        "tool_result": f"{tool} answered",
        "approval_requested": f"waiting for approval of {tool} (interaction {data.get('interaction_id')})",
        "client_tool_requested": f"waiting for client tool {tool} (interaction {data.get('interaction_id')})",
        "delegation_started": f"delegated to agent {data.get('agent_id')} (run {data.get('child_run_id')})",
    }
    return described.get(event.type, event.type.replace("_", " "))


def text(value: str) -> types.TextContent:
    return types.TextContent(type="text", text=value)


def dump(model: BaseModel) -> dict[str, Any]:
    # `resultType` and the cache hints are 2026-07-28's; the revisions served here do not have them.
    dumped: dict[str, Any] = model.model_dump(by_alias=True, mode="json", exclude_none=True, exclude=LATER)
    return dumped


def with_ttl(dumped: dict[str, Any], key: str | None) -> dict[str, Any]:
    """A task's `ttl` is required even when null (unlimited), which exclude_none drops."""
    (dumped[key] if key else dumped).setdefault("ttl", None)
    return dumped


def iso(moment: datetime) -> str:
    return rfc3339(moment)
