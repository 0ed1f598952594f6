"""Fairness between tenants: a tenant's model steps each hold one of its step shares
(STEPWISE_STEP_SHARE, 20 by default, 0 for no bound), so a tenant that starts runs as fast as its
quota allows takes at most that many of the Step function's reserved concurrency (50 by default) and
the other tenants' runs keep their turn.

A step takes its run's share before any of its work (the first request it makes, so a refused step
costs one write and one read) and raises TenantStepsBusy when the tenant has none left: the state
machine retries it with backoff and jitter, the run waits its turn. The share is given back when
the step pauses the run (an approval, a client tool, a delegation) and when the run ends, whoever
ends it. Between two steps of a run that goes on, the run keeps it (its next step follows at once):
the lease's end rides in the state (`RunState.share_until`), and the next step takes it again only
when less than a step's timeout is left. A step that fails keeps it too: the state machine's retry
of that step carries the same state. A Step killed mid-way cannot give it back; its lease ends
`LEASE_SECONDS` after it was taken, and the tenant's next refused step drops it.
"""

from __future__ import annotations

import time

from stepwise.core import config
from stepwise.core.errors import TenantStepsBusy
from stepwise.runs.ports import stores

STEP_TIMEOUT_SECONDS = 300  # the Step task's TimeoutSeconds
LEASE_SECONDS = 2 * STEP_TIMEOUT_SECONDS
RENEW_BEFORE_SECONDS = STEP_TIMEOUT_SECONDS + 30  # a held share with less left is taken again


def _limit() -> int:
    return config.quotas().step_share if stores().shares is not None else 0


def enter(tenant_id: str, run_id: str, share_until: int | None) -> int | None:
    """Before a step's work: hold one of the tenant's shares, the lease's end returned (None when
    shares are off). Raises TenantStepsBusy when every share of the tenant is held."""
    limit = _limit()
    store = stores().shares
    if store is None or limit == 0:
        return None
    now = int(time.time())
    if share_until is not None and share_until - now >= RENEW_BEFORE_SECONDS:
        return share_until  # held since the run's previous step, long enough for this one
    until = now + LEASE_SECONDS
    if not store.take(tenant_id, run_id, limit=limit, until=until, now=now):
        raise TenantStepsBusy(
            f"this tenant's {limit} concurrent model steps are all under way; the run waits its turn"
        )
    return until


def leave(tenant_id: str, run_id: str) -> None:
    """Give the run's share back (the run paused or ended); nothing when it holds none."""
    store = stores().shares
    if store is not None and _limit() > 0:
        store.give_back(tenant_id, run_id)
