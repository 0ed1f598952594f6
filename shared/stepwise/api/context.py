"""Per-request context for route functions."""

from __future__ import annotations

from typing import Any

from stepwise.api.auth import tenant_from_event


def tenant(router: Any) -> str:
    return tenant_from_event(router.current_event.raw_event)
