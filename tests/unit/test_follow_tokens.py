"""Follow URLs' tokens: signed like approval links, under their own MAC context, expiring, one nonce each."""

from datetime import UTC, datetime, timedelta

import pytest

from stepwise.approvals import links
from stepwise.follow import tokens

SECRET = b"k" * 32
NOW = datetime(2026, 3, 1, 12, 0, 0, 500_000, tzinfo=UTC)


def test_a_token_carries_its_claims_until_it_expires_60_seconds_later_rounded_down() -> None:
    claims = tokens.new_claims("acme", "run_1", 7, NOW)
    token = tokens.sign(claims, SECRET)

    assert claims.expires_at == datetime(2026, 3, 1, 12, 1, 0, tzinfo=UTC)
    assert tokens.verify(token, SECRET, claims.expires_at - timedelta(seconds=1)) == claims
    with pytest.raises(tokens.ExpiredFollowUrl):
        tokens.verify(token, SECRET, claims.expires_at)


def test_every_url_has_its_own_nonce() -> None:
    first, second = (tokens.new_claims("acme", "run_1", 0, NOW) for _ in range(2))

    assert first.nonce != second.nonce and len(first.nonce) >= 16


def test_an_altered_token_or_another_secret_is_forged() -> None:
    token = tokens.sign(tokens.new_claims("acme", "run_1", 0, NOW), SECRET)
    payload, signature = token.split(".")
    other = tokens.sign(tokens.new_claims("evil", "run_1", 0, NOW), SECRET).split(".")[0]

    for forged in (f"{other}.{signature}", f"{payload}.{'A' * len(signature)}", "garbage", ""):
        with pytest.raises(links.ForgedLink):
            tokens.verify(forged, SECRET, NOW)
    with pytest.raises(links.ForgedLink):
        tokens.verify(token, b"o" * 32, NOW)


def test_approval_links_and_follow_urls_cannot_pass_for_each_other() -> None:
    link = links.sign("int_1", "acme", NOW + timedelta(minutes=5), SECRET)
    url = tokens.sign(tokens.new_claims("acme", "run_1", 0, NOW), SECRET)

    with pytest.raises(links.ForgedLink):
        tokens.verify(link, SECRET, NOW)
    with pytest.raises(links.ForgedLink):
        links.verify(url, SECRET, NOW)


def test_a_genuine_token_with_unexpected_fields_is_forged() -> None:
    wrong = links.seal(tokens._CONTEXT, [1, "acme", "run_1", -1, 2_000_000_000, "n"], SECRET)

    with pytest.raises(links.ForgedLink, match="not valid") as caught:
        tokens.verify(wrong, SECRET, NOW)
    assert caught.value.reason == "unexpected payload fields"
