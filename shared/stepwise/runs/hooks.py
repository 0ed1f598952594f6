"""Hooks at the run's lifecycle points: evaluate, log what failed open, record every block."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools import Logger

from stepwise.agents.models import Agent
from stepwise.hooks.engine import evaluate
from stepwise.hooks.http import HttpCall, call_http_hook, failed
from stepwise.hooks.models import Hook, HookDecision, HttpConfig
from stepwise.runs import events

logger = Logger(service="stepwise")


def _with_headers_opened(tenant_id: str) -> HttpCall:
    """call_http_hook with the hook's stored (sealed) header secrets opened, only for a hook that fires:
    where the call is made, and nowhere else. A header that does not decrypt fails the hook as any
    other failure of its call does (closed or open, as the hook says)."""

    def call(
        hook: Hook,
        *,
        event: str,
        tool_name: str | None,
        data: Mapping[str, Any] | None,
        output: Any = None,
    ) -> HookDecision:
        from stepwise.header_secrets import HeaderUnreadable, open_headers

        config = hook.config
        if isinstance(config, HttpConfig) and config.headers:
            try:
                opened = config.model_copy(update={"headers": open_headers(tenant_id, config.headers)})
            except HeaderUnreadable as exc:
                return failed(hook, config, str(exc))
            hook = hook.model_copy(update={"config": opened})
        return call_http_hook(hook, event=event, tool_name=tool_name, data=data, output=output)

    return call


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
    decision = evaluate(
        hooks,
        event=event,
        tool_name=tool_name,
        arguments=arguments,
        output=output,
        http_call=_with_headers_opened(tenant_id),
    )
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
