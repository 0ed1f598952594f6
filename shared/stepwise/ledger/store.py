"""The effects ledger in DynamoDB (the LedgerStore of stepwise.ledger): one item per effect key, moved
between statuses by conditional writes only, so of two callers racing for a key exactly one wins."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timedelta
from typing import Any

from pynamodb.exceptions import DoesNotExist, PutError, UpdateError

from stepwise.core import config, safejson
from stepwise.core.errors import Conflict, Malformed
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
        arguments=item.arguments,
        resolution=item.resolution,
    )


def get(tenant_id: str, key: str) -> Entry | None:
    bind()
    try:
        return _entry(EffectItem.get(tenant_id, key, consistent_read=True))
    except DoesNotExist:
        return None


def claim(
    tenant_id: str,
    key: EffectKey,
    tool_name: str,
    run_id: str,
    tool_call_id: str,
    arguments: dict[str, Any] | None = None,
) -> Claim:
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
        arguments=arguments,
    )
    try:
        item.save(condition=EffectItem.effect_key.does_not_exist())
        return Claim(won=True, entry=_entry(item))
    except PutError as exc:
        if not condition_failed(exc):
            raise
    return _take_over(tenant_id, key, tool_name, run_id, tool_call_id, arguments)


def _expiry(key: EffectKey) -> datetime:
    # A call entry only guards the retries of its own Step; it goes with the run's events. An effect
    # entry guards replays of its trigger, which may come long after: EffectsTtlDays (DECISIONS.md).
    runtime = config.runtime()
    days = runtime.events_ttl_days if key.kind == "call" else runtime.effects_ttl_days
    return utcnow() + timedelta(days=days)


def _take_over(
    tenant_id: str,
    key: EffectKey,
    tool_name: str,
    run_id: str,
    tool_call_id: str,
    arguments: dict[str, Any] | None,
) -> Claim:
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
            EffectItem.resolution.remove(),
            EffectItem.arguments.set(arguments) if arguments is not None else EffectItem.arguments.remove(),
            EffectItem.expires_at.set(_expiry(key)),
        ]
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
                *_resolved(undone),
            ],
            condition=(EffectItem.status == was.status) & (EffectItem.generation == was.generation),
        )
    except UpdateError as exc:
        if not condition_failed(exc):
            raise
        return False
    return True


def write_done(tenant_id: str, key: str, done: Entry, *, was: Entry) -> bool:
    """Write the confirmed entry (stepwise.ledger.confirmed) while its status and generation are `was`'s."""
    if done.status != "done" or done.result is None:
        raise ValueError("a confirmed entry is done, with the result later claims are answered with")
    bind()
    try:
        EffectItem(tenant_id, key).update(
            actions=[
                EffectItem.status.set("done"),
                EffectItem.settled_at.set(done.settled_at or utcnow()),
                EffectItem.result.set(done.result),
                EffectItem.result_truncated.set(False),
                *_resolved(done),
            ],
            condition=(EffectItem.status == was.status) & (EffectItem.generation == was.generation),
        )
    except UpdateError as exc:
        if not condition_failed(exc):
            raise
        return False
    return True


def _resolved(entry: Entry) -> list[Any]:
    """A person's word on an entry, and its expiry from then: the resolution is what a later replay
    relies on, so it is kept EffectsTtlDays from when it was given (a call entry keeps its own)."""
    actions: list[Any] = []
    if entry.resolution is not None:
        actions.append(EffectItem.resolution.set(entry.resolution))
    if entry.kind == "effect":
        days = config.runtime().effects_ttl_days
        actions.append(EffectItem.expires_at.set(utcnow() + timedelta(days=days)))
    return actions


PAGE_LIMIT = 50


def list_entries(
    tenant_id: str,
    *,
    status: str | None = None,
    run_id: str | None = None,
    limit: int = PAGE_LIMIT,
    next_token: str | None = None,
) -> tuple[list[Entry], str | None]:
    """The tenant's entries in key order, optionally of one status and one run. The token is DynamoDB's
    LastEvaluatedKey, checked to be this listing's for this tenant. The filters run after the read (as
    the runs listing's status does), so a page may be short, or empty with a next_token: no index by
    run, since every claim would pay its writes for a listing people rarely ask for."""
    bind()
    start = _decode_token(tenant_id, next_token)
    conditions = [
        c
        for c in (
            EffectItem.status == status if status else None,
            EffectItem.run_id == run_id if run_id else None,
        )
        if c is not None
    ]
    condition = None
    for c in conditions:
        condition = c if condition is None else condition & c
    result = EffectItem.query(
        tenant_id,
        filter_condition=condition,
        limit=limit,
        last_evaluated_key=start,
    )
    entries = [_entry(item) for item in result]
    last = result.last_evaluated_key
    return entries, base64.urlsafe_b64encode(json.dumps(last).encode()).decode() if last else None


def _decode_token(tenant_id: str, token: str | None) -> dict[str, Any] | None:
    if not token:
        return None
    forged = Malformed("next_token is not one this API issued", code="invalid_next_token")
    try:
        key = safejson.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, UnicodeDecodeError) as exc:
        raise forged from exc
    if not isinstance(key, dict) or set(key) != {"tenant_id", "effect_key"}:
        raise forged
    values = {name: value.get("S") if isinstance(value, dict) else None for name, value in key.items()}
    if values["tenant_id"] != tenant_id or not isinstance(values["effect_key"], str):
        raise forged
    return key
