"""The OAuth state's rules, on the in-memory grant store: single use, expiring, only ours, and spent only
with the cookie its start link gave the browser that opened it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from stepwise.mcp.authorization import (
    StateRejected,
    cleared_cookie,
    open_flow,
    start_link,
    state_hash,
    take,
)
from tests.fakes.grant_store import MemoryGrantStore, pending


def test_a_state_is_taken_once() -> None:
    store = MemoryGrantStore()
    store.put_pending(state_hash("s1"), pending(timedelta(minutes=10)))
    nonce = open_flow(store, "s1").cookie.value

    assert take(store, "s1", nonce).tenant_id == "t1"
    with pytest.raises(StateRejected) as again:
        take(store, "s1", nonce)
    assert again.value.problem == "used"


def test_an_expired_or_unknown_state_is_refused() -> None:
    store = MemoryGrantStore()
    store.put_pending(state_hash("old"), pending(timedelta(seconds=-1)))

    with pytest.raises(StateRejected) as expired:
        open_flow(store, "old")
    with pytest.raises(StateRejected) as unknown:
        take(store, "never-issued", "nonce")

    assert (expired.value.problem, unknown.value.problem) == ("expired", "unknown")
    # only the hash is kept, never the state itself
    assert "old" not in store.pending and state_hash("old") in store.pending


def test_a_state_is_spent_only_with_the_nonce_its_start_link_gave() -> None:
    store = MemoryGrantStore()
    store.put_pending(state_hash("s1"), pending(timedelta(minutes=10)))
    with pytest.raises(StateRejected) as before_opened:
        take(store, "s1", None)

    opened = open_flow(store, "s1")
    with pytest.raises(StateRejected) as reopened:
        open_flow(store, "s1")
    refused = []
    for nonce in (None, "", "another-nonce"):
        with pytest.raises(StateRejected) as wrong:
            take(store, "s1", nonce)
        refused.append(wrong.value.problem)

    assert (before_opened.value.problem, reopened.value.problem) == ("unbound", "opened")
    assert refused == ["unbound"] * 3
    # none of that spent it or moved its binding
    assert opened.authorization_url == "https://as.example/authorize?state=s1"
    assert take(store, "s1", opened.cookie.value).tenant_id == "t1"


def test_the_start_link_and_its_cookie_follow_the_callback() -> None:
    store = MemoryGrantStore()
    store.put_pending(state_hash("s1"), pending(timedelta(minutes=10)))
    callback = "https://api.example/v1/integrations/mcp/oauth/callback"

    cookie = open_flow(store, "s1").cookie

    assert start_link(callback, "s1") == "https://api.example/v1/integrations/mcp/oauth/start?flow=s1"
    assert (cookie.path, cookie.secure) == ("/v1/integrations/mcp/oauth", True)  # https: Secure
    assert 0 < cookie.max_age <= 600 and cookie.name.startswith("stepwise_oauth_")
    assert "s1" not in cookie.name  # named by the state's hash, not the state
    gone = cleared_cookie(callback, "s1")
    assert (gone.name, gone.path, gone.value, gone.max_age) == (cookie.name, cookie.path, "", 0)
    assert not cleared_cookie("http://127.0.0.1:3000/v1/integrations/gmail/oauth/callback", "s1").secure
