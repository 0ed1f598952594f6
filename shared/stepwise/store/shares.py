"""A tenant's step shares in DynamoDB: one small item per tenant (QuotasTable, quota "steps") with
`used`, the number of runs holding a share, and one attribute per holder, `h#<run id>`, the epoch
second its lease ends. Count and holder move in the same update, so they cannot disagree.

Taking one is a single conditional UpdateItem (room left, and the run holds none yet; a tenant's first
step creates the item). Only when that is refused is the item read: a run that holds one already (its
Step is retried) renews its lease; otherwise leases that ended are dropped (a Step killed mid-way
never gave its share back) and the take is tried once more, or the step is refused (two requests).
Giving one back is one UpdateItem.
"""

from __future__ import annotations

from pynamodb.exceptions import UpdateError
from pynamodb.expressions.condition import Condition
from pynamodb.expressions.operand import Path

from stepwise.core import aws, config
from stepwise.core.tables import StepShareItem, bind, condition_failed

SHARES = "steps"
HOLDER = "h#"


def _holder(run_id: str) -> Path:
    return Path([HOLDER + run_id])  # one name: a run id is never split at a dot


def take(tenant_id: str, run_id: str, *, limit: int, until: int, now: int) -> bool:
    bind()
    if _take(tenant_id, run_id, limit, until):
        return True
    leases = _leases(tenant_id)
    if HOLDER + run_id in leases:  # held already: its Step is retried
        return _renew(tenant_id, run_id, until)
    ended = {name: lease for name, lease in leases.items() if lease <= now}
    if not ended:
        return False
    _drop(tenant_id, ended)
    return _take(tenant_id, run_id, limit, until)


def give_back(tenant_id: str, run_id: str) -> None:
    bind()
    holder = _holder(run_id)
    try:
        StepShareItem(tenant_id, SHARES).update(
            actions=[holder.remove(), StepShareItem.used.add(-1)], condition=holder.exists()
        )
    except UpdateError as exc:
        if not condition_failed(exc):  # it held none (or its lease was dropped): nothing to give back
            raise


def _take(tenant_id: str, run_id: str, limit: int, until: int) -> bool:
    holder = _holder(run_id)
    room = StepShareItem.used.does_not_exist() | (StepShareItem.used < limit)
    try:
        StepShareItem(tenant_id, SHARES).update(
            actions=[holder.set(until), StepShareItem.used.add(1)], condition=room & holder.does_not_exist()
        )
    except UpdateError as exc:
        if condition_failed(exc):
            return False
        raise
    return True


def _renew(tenant_id: str, run_id: str, until: int) -> bool:
    """The run holds a share already: its lease starts again."""
    holder = _holder(run_id)
    try:
        StepShareItem(tenant_id, SHARES).update(actions=[holder.set(until)], condition=holder.exists())
    except UpdateError as exc:
        if condition_failed(exc):
            return False
        raise
    return True


def _leases(tenant_id: str) -> dict[str, int]:
    """Every holder's lease (eventually consistent: a stale view only means a refused step, which the
    state machine retries)."""
    # A plain client: pynamodb reads only the attributes a model declares, and holders are named at
    # run time.
    found = aws.client("dynamodb").get_item(
        TableName=config.tables().quotas, Key={"tenant_id": {"S": tenant_id}, "quota": {"S": SHARES}}
    )
    item = found.get("Item") or {}
    return {name: int(value["N"]) for name, value in item.items() if name.startswith(HOLDER) and "N" in value}


def _drop(tenant_id: str, ended: dict[str, int]) -> None:
    """Remove leases that ended, each only if it is still the lease that was seen (not renewed)."""
    condition: Condition | None = None
    for name, lease in ended.items():
        same = Path([name]) == lease
        condition = same if condition is None else condition & same
    try:
        StepShareItem(tenant_id, SHARES).update(
            actions=[*(Path([name]).remove() for name in ended), StepShareItem.used.add(-len(ended))],
            condition=condition,
        )
    except UpdateError as exc:
        if not condition_failed(exc):  # one was renewed meanwhile: the next refused step looks again
            raise
