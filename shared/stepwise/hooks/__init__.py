"""Lifecycle hooks: what tenants attach to an agent's events, and how an event's hooks are evaluated."""

from stepwise.hooks.engine import evaluate, select
from stepwise.hooks.http import call_http_hook
from stepwise.hooks.models import (
    HOOK_EVENTS,
    HOOK_TYPES,
    ApprovalConfig,
    Hook,
    HookCreate,
    HookDecision,
    HttpConfig,
    RuleConfig,
)

__all__ = [
    "HOOK_EVENTS",
    "HOOK_TYPES",
    "ApprovalConfig",
    "Hook",
    "HookCreate",
    "HookDecision",
    "HttpConfig",
    "RuleConfig",
    "call_http_hook",
    "evaluate",
    "select",
]
