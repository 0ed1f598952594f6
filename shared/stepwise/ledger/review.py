"""People reviewing the effects ledger: the entries of a tenant, and a person's word on one whose outcome
the runtime could not know (`GET /v1/effects`, `POST /v1/effects/{key}/resolve`).

An entry is left `unknown` (or `claimed`, after a crash) when its call may or may not have acted: the
ledger then refuses to run it again (`effect_unknown`), and only someone who can look at the target
(the mailbox, the payment provider) can say which. `done` records that it acted: a later claim, such as a
replay's, is answered `deduplicated` with a result saying so. `undone` records that it did not, or was
reversed: the next claim runs it again, as a new generation. Either way the word is kept with who gave
it (the API key's name) and when.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, Field

from stepwise.core.errors import NotFound
from stepwise.core.schema import Strict, Timestamp
from stepwise.ledger import Entry, Kind, Status, confirm_done, ledger_key, mark_undone, public_key
from stepwise.ledger import store as ledger_store

EFFECT_KEY = r"^(effect|call)[:#][0-9a-f]{64}$"  # the API's `effect:<sha256>`; the stored `#` form too
PAGE_LIMIT = 50
NOTE_LIMIT = 2_000

ListedStatus = Literal["unknown", "done", "undone", "claimed", "released"]
Outcome = Literal["done", "undone"]


class EffectResolve(Strict):
    """`POST /v1/effects/{key}/resolve`: what a person found out about the effect."""

    outcome: Outcome = Field(
        description="`done`: it happened (a replay answers `deduplicated`); `undone`: it did not, or was "
        "reversed (a replay performs it again)"
    )
    note: str | None = Field(
        default=None, max_length=NOTE_LIMIT, description="Why, for whoever reads it next"
    )


class Resolution(BaseModel):
    outcome: Outcome
    by: str  # the name of the API key it was resolved with
    at: Timestamp
    note: str | None = None
    was: str  # the status it was resolved from


class EffectView(BaseModel):
    """An entry of the effects ledger as the API shows it."""

    key: str = Field(description="`effect:<sha256>` (keyed on stable intent) or `call:<sha256>` (one call)")
    kind: Kind
    status: Status
    tool: str
    arguments: dict[str, Any] | None = Field(
        description="The current attempt's arguments, with secret-looking values masked; null for entries "
        "written before they were recorded"
    )
    run_id: str
    tool_call_id: str
    generation: int
    claimed_at: Timestamp
    settled_at: Timestamp | None
    error: dict[str, Any] | None = Field(description="For `unknown`: the failure that left it unknown")
    resolution: Resolution | None


class EffectList(BaseModel):
    effects: list[EffectView]
    next_token: str | None


def view(entry: Entry) -> EffectView:
    result = entry.result or {}
    error = result.get("error") if entry.status in ("unknown", "released") else None
    resolution = entry.resolution
    if resolution is None and entry.status == "undone" and entry.undone_at and entry.undone_by:
        # undone before resolutions were recorded (stepwise.ledger.mark_undone alone)
        resolution = {"outcome": "undone", "by": entry.undone_by, "at": entry.undone_at, "was": "unknown"}
    return EffectView(
        key=public_key(entry.key),
        kind=entry.kind,
        status=entry.status,
        tool=entry.tool_name,
        arguments=entry.arguments,
        run_id=entry.run_id,
        tool_call_id=entry.tool_call_id,
        generation=entry.generation,
        claimed_at=entry.claimed_at,
        settled_at=entry.settled_at,
        error=error if isinstance(error, dict) else None,
        resolution=Resolution.model_validate(resolution) if resolution else None,
    )


def list_effects(
    tenant_id: str,
    *,
    status: ListedStatus | None = None,
    run_id: str | None = None,
    limit: int = PAGE_LIMIT,
    next_token: str | None = None,
) -> EffectList:
    """A page of the tenant's entries (key order), optionally of one status and one run."""
    entries, token = ledger_store.list_entries(
        tenant_id, status=status, run_id=run_id, limit=limit, next_token=next_token
    )
    return EffectList(effects=[view(e) for e in entries], next_token=token)


def resolve(tenant_id: str, key: str, body: EffectResolve, *, by: str) -> EffectView:
    """Record a person's word on an entry: NotFound for a key the tenant has none for, Conflict when
    the entry's status does not take that outcome (only `claimed` and `unknown` take `done`; `done`,
    `claimed` and `unknown` take `undone`)."""
    if not re.match(EFFECT_KEY, key):
        raise NotFound(f"no ledger entry {key}", code="effect_not_found")
    stored = ledger_key(key)
    if body.outcome == "done":
        entry = confirm_done(tenant_id, stored, by, store=ledger_store, note=body.note)
    else:
        entry = mark_undone(tenant_id, stored, by, store=ledger_store, note=body.note)
    return view(entry)
