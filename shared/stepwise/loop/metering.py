"""The usage lines a step's billable tool calls write. Tools run in the step's own thread or in its
pool (whose workers run in copies of the step's context, so they share this meter); the step hands
the lines to its next context write, which counts them (stepwise.usage.counters)."""

from __future__ import annotations

import threading
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from stepwise.core.schema import utcnow
from stepwise.loop.calls import Ready, StepScope
from stepwise.tools.base import ToolResult
from stepwise.tools.models import BuiltinTool
from stepwise.usage.tools import tool_line


@dataclass
class Meter:
    targets: dict[str, Any] = field(default_factory=dict)  # budgets a tool line adds to
    lines: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


_meter: ContextVar[Meter | None] = ContextVar("stepwise_meter", default=None)


def start(targets: dict[str, Any]) -> None:
    _meter.set(Meter(targets=targets))


def bill(scope: StepScope, ready: Ready, result: ToolResult) -> None:
    """Record the line of a billable call that was billed (stepwise.usage.tools says which)."""
    meter = _meter.get()
    if meter is None:
        return
    config = ready.tool.config if isinstance(ready.tool, BuiltinTool) else None
    run = scope.run
    line = tool_line(
        tenant_id=scope.tenant_id,
        agent_id=run.agent_id,
        user_id=run.user_id,
        run_id=run.run_id,
        root_run_id=run.root_run_id or run.run_id,
        tool_name=ready.tool.name if isinstance(ready.tool, BuiltinTool) else "",
        arguments=ready.arguments,
        config=config,
        result=result,
        at=utcnow(),
    )
    if line is not None:
        with meter.lock:
            meter.lines.append({"line": line.stored(), **meter.targets})


def drain() -> list[dict[str, Any]]:
    meter = _meter.get()
    if meter is None:
        return []
    with meter.lock:
        lines, meter.lines = meter.lines, []
    return lines
