"""Per-tenant quotas, counted without a race: each counted item (a run while it is active, a schedule)
is written in one DynamoDB transaction with its tenant's counter item, whose update is conditional on
the counter being under the limit. Two concurrent starts cannot both take the last slot (DynamoDB
serializes transactions on the counter item), and a run that ends gives its slot back in the same
write that ends it, so a crash between two writes cannot leak a slot either.

Counters only move with the items they count. Runs that were already active when quotas were first
deployed were never counted; when they end their release takes the counter below zero, which only
grants that tenant as many extra slots for as long as it takes (it never blocks anyone).
"""

from __future__ import annotations

from typing import Literal

from pynamodb.exceptions import TransactWriteError
from pynamodb.transactions import TransactWrite

from stepwise.core.errors import QuotaExceeded
from stepwise.core.tables import QuotaItem, bind

Quota = Literal["active_runs", "schedules", "workflows"]
ACTIVE_RUNS: Quota = "active_runs"
SCHEDULES: Quota = "schedules"
WORKFLOWS: Quota = "workflows"
# What a client is told to wait: an active run usually ends within minutes; a schedule only frees
# when one is deleted, so asking again soon is pointless.
RETRY_AFTER: dict[Quota, int] = {ACTIVE_RUNS: 30, SCHEDULES: 3600, WORKFLOWS: 3600}
_WHAT: dict[Quota, str] = {
    ACTIVE_RUNS: "active runs (queued, running or waiting)",
    SCHEDULES: "schedules",
    WORKFLOWS: "workflows",
}


def take(tx: TransactWrite, tenant_id: str, quota: Quota, limit: int) -> None:
    """Add one to the tenant's counter in `tx`, only while it is under `limit`."""
    item = QuotaItem(tenant_id, quota)
    tx.update(
        item,
        actions=[QuotaItem.used.add(1)],
        condition=QuotaItem.used.does_not_exist() | (QuotaItem.used < limit),
    )


def give_back(tx: TransactWrite, tenant_id: str, quota: Quota) -> None:
    """Take one off the tenant's counter in `tx` (unconditional: an ending must never be refused)."""
    tx.update(QuotaItem(tenant_id, quota), actions=[QuotaItem.used.add(-1)])


def refused_by(exc: TransactWriteError, index: int) -> bool:
    """Whether the transaction's item at `index` failed its condition."""
    reasons = exc.cancellation_reasons
    reason = reasons[index] if index < len(reasons) else None
    return reason is not None and reason.code == "ConditionalCheckFailed"


def exceeded(quota: Quota, limit: int) -> QuotaExceeded:
    return QuotaExceeded(
        f"this tenant has reached its limit of {limit} {_WHAT[quota]}",
        retry_after=RETRY_AFTER[quota],
        details={"quota": quota, "limit": limit},
    )


def used(tenant_id: str, quota: Quota) -> int:
    """The counter as it stands (for tests and operators)."""
    from pynamodb.exceptions import DoesNotExist

    bind()
    try:
        return int(QuotaItem.get(tenant_id, quota, consistent_read=True).used)
    except DoesNotExist:
        return 0
