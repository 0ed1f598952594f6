"""The runs parked on a run-level wait, listed for whatever resumes them: pk PARKED_TENANT, quota
"<tenant>#<parked_at>#<run_id>", so one tenant's are a key range, oldest first, and the reconciler's
sweep reads them a bounded page at a time. An entry is written when a run parks and deleted when it
is resumed or found moved on."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from stepwise.core.tables import PARKED_TENANT, ParkedItem, bind


@dataclass(frozen=True)
class ParkedRun:
    key: str
    tenant_id: str
    run_id: str
    interaction_id: str
    kind: str
    data: dict[str, Any]


def add(
    tenant_id: str, run_id: str, interaction_id: str, kind: str, data: dict[str, Any], at: datetime
) -> None:
    bind()
    key = f"{tenant_id}#{at.strftime('%Y-%m-%dT%H:%M:%S.%f')}#{run_id}"
    ParkedItem(
        PARKED_TENANT,
        key,
        run_tenant=tenant_id,
        run_id=run_id,
        interaction_id=interaction_id,
        kind=kind,
        data=data,
    ).save()


def _parked(item: ParkedItem) -> ParkedRun:
    return ParkedRun(
        key=item.quota,
        tenant_id=item.run_tenant,
        run_id=item.run_id,
        interaction_id=item.interaction_id,
        kind=item.kind,
        data=dict(item.data or {}),
    )


def of_tenant(tenant_id: str, *, kind: str | None = None, limit: int = 1000) -> list[ParkedRun]:
    """The tenant's parked runs, oldest first."""
    bind()
    items = ParkedItem.query(PARKED_TENANT, ParkedItem.quota.startswith(f"{tenant_id}#"), limit=limit)
    found = [_parked(i) for i in items]
    return [p for p in found if kind is None or p.kind == kind]


def page(*, kind: str | None, limit: int) -> list[ParkedRun]:
    """Up to `limit` parked runs of every tenant (the sweep's page), oldest first within a tenant."""
    bind()
    found = [_parked(i) for i in ParkedItem.query(PARKED_TENANT, limit=limit)]
    return [p for p in found if kind is None or p.kind == kind]


def remove(key: str) -> None:
    bind()
    ParkedItem(PARKED_TENANT, key).delete()
