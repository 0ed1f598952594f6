"""The effects ledger in DynamoDB (the LedgerStore of stepwise.ledger): one item per effect key, moved
between statuses by conditional writes only, so of two callers racing for a key exactly one wins."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pynamodb.exceptions import DoesNotExist, PutError, UpdateError

from stepwise.core import config
from stepwise.core.errors import Conflict
from stepwise.core.schema import utcnow
from stepwise.core.tables import EffectItem, bind, condition_failed
from stepwise.ledger import (
    CLAIMABLE,
    SETTLEABLE,
    Claim,
    EffectKey,
    Entry,
    Settlement,
)

_ATTEMPTS = 3  # an entry that changes under us this often is being fought over; report what it is


def _entry(item: EffectItem) -> Entry:
    return Entry(
        key=item.effect_key,
        kind=item.kind,
        tool_name=item.tool_name,
        status=item.status,
        generation=int(item.generation),
        run_id=item.run_id,
        tool_call_id=item.tool_call_id,
        claimed_at=item.claimed_at,
        settled_at=item.settled_at,
        result=item.result,
        result_truncated=bool(item.result_truncated),
        undone_at=item.undone_at,
        undone_by=item.undone_by,
        history=item.history or [],
    )


def get(tenant_id: str, key: str) -> Entry | None:
    bind()
    try:
        return _entry(EffectItem.get(tenant_id, key, consistent_read=True))
    except DoesNotExist:
        return None


def claim(tenant_id: str, key: EffectKey, tool_name: str, run_id: str, tool_call_id: str) -> Claim:
    """Create the entry (one conditional put), or take an `undone` or `released` one as its next
    generation (a conditional update); when the key is held (claimed, done, unknown), report the entry
    as it is."""
    bind()
    # Almost every claim is of a key never seen: a conditional put creates it. A key with an entry
    # (a replay, a retried Step, an undone effect) costs the failed put and a read, as the update did.
    item = EffectItem(
        tenant_id,
        key.id,
        kind=key.kind,
        tool_name=tool_name,
        intent=key.recorded(),
        status="claimed",
        generation=1,
        run_id=run_id,
        tool_call_id=tool_call_id,
        claimed_at=utcnow(),
        expires_at=_expiry(key),
    )
    try:
        item.save(condition=EffectItem.effect_key.does_not_exist())
        return Claim(won=True, entry=_entry(item))
    except PutError as exc:
        if not condition_failed(exc):
            raise
    return _take_over(tenant_id, key, tool_name, run_id, tool_call_id)


def _expiry(key: EffectKey) -> datetime | None:
    # A call entry only guards the retries of its own Step; it goes with the run's events.
    if key.kind != "call":
        return None
    return utcnow() + timedelta(days=config.runtime().events_ttl_days)


def _take_over(tenant_id: str, key: EffectKey, tool_name: str, run_id: str, tool_call_id: str) -> Claim:
    """Report a held key's entry, or claim one that was undone or released (or has just gone) as its
    next generation."""
    for attempt in range(_ATTEMPTS + 1):
        held = get(tenant_id, key.id)
        if held is not None and held.status not in CLAIMABLE:
            return Claim(won=False, entry=held)
        if attempt == _ATTEMPTS:
            break  # claimable still, yet every take-over lost its race
        item = EffectItem(tenant_id, key.id)
        actions: list[Any] = [
            EffectItem.kind.set(key.kind),
            EffectItem.tool_name.set(tool_name),
            EffectItem.intent.set(key.recorded()),
            EffectItem.status.set("claimed"),
            EffectItem.generation.set((EffectItem.generation | 0) + 1),
            EffectItem.run_id.set(run_id),
            EffectItem.tool_call_id.set(tool_call_id),
            EffectItem.claimed_at.set(utcnow()),
            # the previous generation's outcome; its summary is in `history` if it was undone
            EffectItem.settled_at.remove(),
            EffectItem.result.remove(),
            EffectItem.result_truncated.remove(),
            EffectItem.undone_at.remove(),
            EffectItem.undone_by.remove(),
        ]
        expires = _expiry(key)
        if expires is not None:
            actions.append(EffectItem.expires_at.set(expires))
        try:
            item.update(
                actions=actions,
                condition=EffectItem.effect_key.does_not_exist() | EffectItem.status.is_in(*CLAIMABLE),
            )
            return Claim(won=True, entry=_entry(item))
        except UpdateError as exc:
            if not condition_failed(exc):
                raise
    raise Conflict(f"ledger entry {key.id} keeps changing; try again", code="effect_contended")


def settle(
    tenant_id: str,
    key: str,
    generation: int,
    to: Settlement,
    result: dict[str, Any] | None,
    truncated: bool,
) -> bool:
    """Record the outcome of the claim `generation`; False when the entry is no longer that claim (a
    human marked it undone while the call ran)."""
    bind()
    try:
        EffectItem(tenant_id, key).update(
            actions=[
                EffectItem.status.set(to),
                EffectItem.settled_at.set(utcnow()),
                EffectItem.result.set(result) if result is not None else EffectItem.result.remove(),
                EffectItem.result_truncated.set(truncated),
            ],
            condition=(EffectItem.status == SETTLEABLE) & (EffectItem.generation == generation),
        )
    except UpdateError as exc:
        if condition_failed(exc):
            return False
        raise
    return True


def write_undone(tenant_id: str, key: str, undone: Entry, *, was: Entry) -> bool:
    """Write the undone entry (stepwise.ledger.undone) while its status and generation are `was`'s."""
    if undone.undone_at is None or undone.undone_by is None:
        raise ValueError("an undone entry names when and by whom it was undone")
    bind()
    try:
        EffectItem(tenant_id, key).update(
            actions=[
                EffectItem.status.set(undone.status),
                EffectItem.undone_at.set(undone.undone_at),
                EffectItem.undone_by.set(undone.undone_by),
                EffectItem.history.set(undone.history),
            ],
            condition=(EffectItem.status == was.status) & (EffectItem.generation == was.generation),
        )
    except UpdateError as exc:
        if not condition_failed(exc):
            raise
        return False
    return True
