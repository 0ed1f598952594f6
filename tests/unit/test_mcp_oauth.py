"""The OAuth state's rules, on the in-memory grant store: single use, expiring, and only ours."""

from __future__ import annotations

from datetime import timedelta

import pytest

from stepwise.core.schema import utcnow
from stepwise.mcp.authorization import PendingAuthorization, StateRejected, state_hash, take
from stepwise.mcp.oauth import Pending
from tests.fakes.grant_store import MemoryGrantStore


def pending(expires_in: timedelta) -> PendingAuthorization:
    return PendingAuthorization(
        tenant_id="t1",
        agent_id="a1",
        server="linear",
        server_created_at=utcnow(),
        pending=Pending(code_verifier="v" * 64, redirect_uri="https://api.example/cb"),
        expires_at=utcnow() + expires_in,
    )


def test_a_state_is_taken_once() -> None:
    store = MemoryGrantStore()
    store.put_pending(state_hash("s1"), pending(timedelta(minutes=10)))

    assert take(store, "s1").tenant_id == "t1"
    with pytest.raises(StateRejected) as again:
        take(store, "s1")
    assert again.value.problem == "used"


def test_an_expired_or_unknown_state_is_refused() -> None:
    store = MemoryGrantStore()
    store.put_pending(state_hash("old"), pending(timedelta(seconds=-1)))

    with pytest.raises(StateRejected) as expired:
        take(store, "old")
    with pytest.raises(StateRejected) as unknown:
        take(store, "never-issued")

    assert (expired.value.problem, unknown.value.problem) == ("expired", "unknown")
    # only the hash is kept, never the state itself
    assert "old" not in store.pending and state_hash("old") in store.pending
