"""Per-request context for route functions."""

from __future__ import annotations

from typing import Any

from stepwise.api.auth import key_name_from_event, tenant_from_event


def tenant(router: Any) -> str:
    return tenant_from_event(router.current_event.raw_event)


def caller(router: Any) -> str:
    """The name of the API key the request came with: who did it, in records a person reads."""
    return key_name_from_event(router.current_event.raw_event)
