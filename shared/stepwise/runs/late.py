"""Model calls paid after their run ended. A run cancelled while its Step waits on the model still
pays for the answer; the Step's next context write then fails (the run ended), and what that write
carried would otherwise be counted nowhere. It is added to the ended run's counters and to its usage
lines' counters in one write, then to every ended ancestor's `descendants_usage`, so the run, its
root's tree total and the usage API all count it.

An ancestor still active stops the walk: its counters live in its context, which only its own Steps
write (a child cancelled on its own while its parent waits reports its total when it ends; what it
is paid for after that report is on the child and the usage API, not on the active parent's tree).
"""

from __future__ import annotations

import uuid
from typing import Any

from stepwise.llm.models import Usage
from stepwise.runs.ports import stores


def minus(after: Usage, before: Usage) -> Usage:
    """What `after` spent beyond `before` (a later total of the same run)."""
    cost = None if after.cost_usd is None else after.cost_usd - (before.cost_usd or 0.0)
    return Usage(
        input_tokens=after.input_tokens - before.input_tokens,
        output_tokens=after.output_tokens - before.output_tokens,
        cached_tokens=after.cached_tokens - before.cached_tokens,
        cache_write_tokens=after.cache_write_tokens - before.cache_write_tokens,
        cost_usd=cost,
    )


def count(tenant_id: str, run_id: str, spent: Usage, lines: list[dict[str, Any]]) -> bool:
    """Count `spent` (and its usage lines) on the ended run and its ended ancestors. False when the
    run is not ended (a stale Step of a live run: the live Step's own call is the one counted)."""
    store = stores()
    if not store.runs.add_usage(tenant_id, run_id, spent, lines):
        return False
    if spent != Usage():
        _to_ancestors(tenant_id, run_id, spent)
    return True


def _to_ancestors(tenant_id: str, run_id: str, spent: Usage) -> None:
    store = stores()
    key = f"late:{run_id}:{uuid.uuid4().hex}"  # one addition: a retried write of it adds nothing
    parent = store.runs.get(tenant_id, run_id).parent_run_id
    while parent is not None and store.runs.add_descendants_usage(tenant_id, parent, spent, key=key):
        parent = store.runs.get(tenant_id, parent).parent_run_id
