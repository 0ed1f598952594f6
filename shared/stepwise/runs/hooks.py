"""Hooks at the run's lifecycle points: evaluate, log what failed open, record every block."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger

from stepwise.agents.models import Agent
from stepwise.hooks.engine import evaluate
from stepwise.hooks.models import Hook, HookDecision
from stepwise.runs import events

logger = Logger(service="stepwise")


def fire(
    tenant_id: str,
    run_id: str,
    agent: Agent,
    event: str,
    *,
    tool_name: str | None = None,
    arguments: dict[str, Any] | None = None,
    output: Any = None,
) -> HookDecision:
    """Run `event`'s hooks; a deny writes a `hook_blocked` event. No hooks, no work."""
    hooks = [Hook.from_item(h) for h in agent.hooks]
    if not hooks:
        return HookDecision(action="allow")
    decision = evaluate(hooks, event=event, tool_name=tool_name, arguments=arguments, output=output)
    for warning in decision.warnings:
        logger.warning("hook failed open", extra={"event": event, "detail": warning})
    if decision.action == "deny":
        events.emit(
            tenant_id,
            run_id,
            "hook_blocked",
            {
                "hook_id": decision.hook_id,
                "event": event,
                "tool_name": tool_name,
                "message": decision.message,
            },
        )
    return decision
