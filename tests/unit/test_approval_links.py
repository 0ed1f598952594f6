"""Approval links and the pages behind them: signed, expiring tokens, and HTML a human can trust.

No sockets, no AWS: the Secrets Manager path gets an in-memory fake client.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import string
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, get_args
from urllib.parse import quote, urlencode

import pytest

from stepwise.approvals import links
from stepwise.approvals.display import deadline_text, pretty_arguments, reveal_hidden
from stepwise.approvals.links import ExpiredLink, ForgedLink, LinkClaims, approval_url, sign, verify
from stepwise.approvals.pages import (
    MAX_REASON_CHARS,
    PAGE_HEADERS,
    RESULT_HTTP_STATUS,
    InvalidForm,
    ResultStatus,
    approval_page,
    parse_form,
    result_page,
)
from stepwise.core.config import ConfigError

SECRET = b"k" * 32
OTHER_SECRET = b"o" * 32
NOW = datetime(2025, 3, 14, 9, 0, tzinfo=UTC)
EXPIRES = NOW + timedelta(minutes=30)
B64URL = string.ascii_letters + string.digits + "-_"


def token(
    interaction_id: str = "int_01JPAR3B7X", tenant_id: str = "acme", expires: datetime = EXPIRES
) -> str:
    return sign(interaction_id, tenant_id, expires, SECRET)


# --- sign / verify --------------------------------------------------------------------------------


def test_a_signed_token_verifies_to_its_claims() -> None:
    claims = verify(token(), SECRET, NOW)

    assert claims == LinkClaims("int_01JPAR3B7X", "acme", EXPIRES)


def test_a_token_is_compact_and_url_safe() -> None:
    value = token()

    assert re.fullmatch(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}", value)
    assert quote(value, safe="") == value
    assert len(value) < 160


@pytest.mark.parametrize(
    ("interaction_id", "tenant_id"),
    [("int.with.dots", "ten|ant"), ('quote"and,comma', "ténant-ü"), ("a" * 200, "b")],
)
def test_any_id_survives_the_round_trip(interaction_id: str, tenant_id: str) -> None:
    claims = verify(sign(interaction_id, tenant_id, EXPIRES, SECRET), SECRET, NOW)

    assert (claims.interaction_id, claims.tenant_id) == (interaction_id, tenant_id)


def test_expiry_is_kept_in_whole_seconds_rounded_down() -> None:
    claims = verify(token(expires=EXPIRES + timedelta(microseconds=999_999)), SECRET, NOW)

    assert claims.expires_at == EXPIRES


def test_an_expiry_in_another_zone_means_the_same_instant() -> None:
    in_paris = EXPIRES.astimezone(timezone(timedelta(hours=1)))

    assert verify(token(expires=in_paris), SECRET, NOW).expires_at == EXPIRES


def _flip(text: str, index: int) -> str:
    replacement = "A" if text[index] != "A" else "B"
    return text[:index] + replacement + text[index + 1 :]


@pytest.mark.parametrize("index", [0, 10, -1])
def test_a_changed_payload_is_forged(index: int) -> None:
    payload, signature = token().split(".")

    with pytest.raises(ForgedLink):
        verify(f"{_flip(payload, index)}.{signature}", SECRET, NOW)


@pytest.mark.parametrize("index", [0, 21, -1])
def test_a_changed_signature_is_forged(index: int) -> None:
    payload, signature = token().split(".")

    with pytest.raises(ForgedLink):
        verify(f"{payload}.{_flip(signature, index)}", SECRET, NOW)


def test_no_other_spelling_of_the_signature_verifies() -> None:
    # Base64's last character has unused low bits; a lenient decoder would accept several spellings.
    value = token()
    for char in B64URL.replace(value[-1], ""):
        with pytest.raises(ForgedLink):
            verify(value[:-1] + char, SECRET, NOW)


def test_a_payload_rewritten_for_another_tenant_is_forged() -> None:
    # Given a genuine token, when its payload is re-encoded naming another tenant and a later expiry
    _, signature = token().split(".")
    body = json.dumps([1, "int_01JPAR3B7X", "victim", int((EXPIRES + timedelta(days=9)).timestamp())])
    payload = base64.urlsafe_b64encode(body.encode()).rstrip(b"=").decode()

    # Then the old signature does not cover it
    with pytest.raises(ForgedLink):
        verify(f"{payload}.{signature}", SECRET, NOW)


def test_payload_and_signature_from_different_tokens_are_forged() -> None:
    payload, _ = token(interaction_id="int_A").split(".")
    _, signature = token(interaction_id="int_B").split(".")

    with pytest.raises(ForgedLink):
        verify(f"{payload}.{signature}", SECRET, NOW)


def test_a_token_signed_with_another_secret_is_forged() -> None:
    with pytest.raises(ForgedLink):
        verify(sign("int_1", "acme", EXPIRES, OTHER_SECRET), SECRET, NOW)


def test_verify_tries_each_secret_in_order_so_a_previous_version_still_verifies() -> None:
    signed_before_rotation = sign("int_1", "acme", EXPIRES, OTHER_SECRET)

    assert verify(signed_before_rotation, [SECRET, OTHER_SECRET], NOW).interaction_id == "int_1"
    assert verify(token(), [SECRET, OTHER_SECRET], NOW).interaction_id == "int_01JPAR3B7X"
    with pytest.raises(ForgedLink):
        verify(signed_before_rotation, [SECRET], NOW)
    with pytest.raises(ForgedLink):
        verify(sign("int_1", "acme", EXPIRES, b"x" * 32), [SECRET, OTHER_SECRET], NOW)


def test_a_later_secret_is_not_fetched_once_an_earlier_one_matched() -> None:
    fetched: list[bytes] = []

    def keys() -> Any:
        for key in (SECRET, OTHER_SECRET):
            fetched.append(key)
            yield key

    verify(token(), keys(), NOW)

    assert fetched == [SECRET]  # the previous version costs nothing while links use the current one


def test_no_secret_at_all_is_a_programming_error_not_a_forged_link() -> None:
    with pytest.raises(ValueError, match="no approval link secret"):
        verify(token(), [], NOW)
    with pytest.raises(ValueError, match="empty"):
        verify(token(), [b"", SECRET], NOW)


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        ".",
        "abc",
        "a.b",
        "a.b.c",
        "é" * 60,
        "x" * 5000,
        token() + ".",
        token() + "=",
        " " + token(),
        "%2e",
    ],
)
def test_garbage_is_forged(garbage: str) -> None:
    with pytest.raises(ForgedLink):
        verify(garbage, SECRET, NOW)


def test_a_validly_signed_payload_in_an_unknown_format_is_forged() -> None:
    # A token from a future version, or a payload signed by a bug: authentic but unreadable.
    body = base64.urlsafe_b64encode(json.dumps([2, "int_1", "acme", 1]).encode()).rstrip(b"=").decode()
    signature = links._mac(SECRET, body)

    with pytest.raises(ForgedLink, match="not valid") as caught:
        verify(f"{body}.{signature}", SECRET, NOW)
    assert caught.value.reason == "unknown payload version"


def test_a_link_expires_at_its_deadline() -> None:
    value = token()

    assert verify(value, SECRET, EXPIRES - timedelta(seconds=1)).interaction_id == "int_01JPAR3B7X"
    with pytest.raises(ExpiredLink) as caught:
        verify(value, SECRET, EXPIRES)
    assert caught.value.claims == LinkClaims("int_01JPAR3B7X", "acme", EXPIRES)


def test_a_tampered_expired_link_is_forged_not_expired() -> None:
    payload, signature = token().split(".")

    with pytest.raises(ForgedLink):
        verify(f"{payload}.{_flip(signature, 0)}", SECRET, EXPIRES + timedelta(days=1))


def test_link_errors_carry_the_http_status_the_api_maps_them_to() -> None:
    assert (ForgedLink("x").status, ForgedLink("x").code) == (403, "forged_link")
    assert ExpiredLink(LinkClaims("i", "t", EXPIRES)).status == 410


def test_naive_datetimes_and_empty_inputs_are_programming_errors() -> None:
    with pytest.raises(ValueError, match="timezone"):
        sign("int_1", "acme", EXPIRES.replace(tzinfo=None), SECRET)
    with pytest.raises(ValueError, match="timezone"):
        verify(token(), SECRET, NOW.replace(tzinfo=None))
    with pytest.raises(ValueError, match="empty"):
        sign("int_1", "acme", EXPIRES, b"")
    with pytest.raises(ValueError, match="empty"):
        verify(token(), b"", NOW)
    with pytest.raises(ValueError):
        sign("", "acme", EXPIRES, SECRET)


# --- approval_url ---------------------------------------------------------------------------------


def test_approval_url_joins_the_origin_and_the_token() -> None:
    value = token()

    assert approval_url("https://api.example.com/", value) == f"https://api.example.com/v1/approvals/{value}"
    assert approval_url("http://127.0.0.1:3000", value, decision="approve").endswith(
        f"/v1/approvals/{value}?decision=approve"
    )


def test_approval_url_refuses_a_base_that_is_not_http() -> None:
    with pytest.raises(ValueError):
        approval_url("javascript:alert(1)//", token())


# --- The secret -----------------------------------------------------------------------------------


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.delenv(links.SECRET_ENV, raising=False)
    monkeypatch.delenv(links.SECRET_ARN_ENV, raising=False)
    links.reset()
    yield monkeypatch
    links.reset()


def test_the_secret_comes_from_the_environment_as_base64(secret_env: pytest.MonkeyPatch) -> None:
    raw = secrets.token_bytes(32)
    secret_env.setenv(links.SECRET_ENV, base64.urlsafe_b64encode(raw).rstrip(b"=").decode())

    assert links.secret() == raw


def test_the_secret_comes_from_the_environment_as_text(secret_env: pytest.MonkeyPatch) -> None:
    secret_env.setenv(links.SECRET_ENV, "local development link secret, not for prod!")

    assert links.load_secret() == b"local development link secret, not for prod!"


def test_standard_base64_with_padding_is_decoded_too(secret_env: pytest.MonkeyPatch) -> None:
    raw = bytes(range(200, 240))  # 40 bytes: standard base64 uses + and / and pads
    secret_env.setenv(links.SECRET_ENV, base64.b64encode(raw).decode())

    assert links.load_secret() == raw


def test_a_short_secret_fails_fast(secret_env: pytest.MonkeyPatch) -> None:
    secret_env.setenv(links.SECRET_ENV, "hunter2")

    with pytest.raises(ConfigError, match="too short"):
        links.load_secret()


def test_no_secret_configured_fails_fast_naming_both_variables(secret_env: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError) as caught:
        links.load_secret()

    assert links.SECRET_ENV in str(caught.value)
    assert links.SECRET_ARN_ENV in str(caught.value)


def test_locally_a_changed_environment_is_read_on_the_next_call(secret_env: pytest.MonkeyPatch) -> None:
    secret_env.setenv(links.SECRET_ENV, "a" * 40)
    assert links.secret() == b"a" * 40

    secret_env.setenv(links.SECRET_ENV, "b" * 40)

    assert links.secret() == b"b" * 40  # nothing cached for the life of the process


def test_locally_links_verify_against_the_variable_only(secret_env: pytest.MonkeyPatch) -> None:
    secret_env.setenv(links.SECRET_ENV, "a" * 40)
    signed_with_a = sign("int_1", "acme", EXPIRES, links.secret())
    secret_env.setenv(links.SECRET_ENV, "b" * 40)

    assert list(links.verifying_secrets()) == [b"b" * 40]
    with pytest.raises(ForgedLink):
        verify(signed_with_a, links.verifying_secrets(), NOW)  # no previous version without Secrets Manager


# --- What a human sees: shared display rules ------------------------------------------------------


def test_hidden_characters_in_arguments_are_shown_as_escapes_and_the_json_still_parses() -> None:
    arguments = {"path": "invoice\u202efdp.exe", "note": "hi\U000e0041\U000e0042", "ok": "café ☕\n"}

    shown = pretty_arguments(arguments)

    assert "\\u202e" in shown and "\u202e" not in shown
    assert "\\udb40\\udc41" in shown and "\U000e0041" not in shown
    assert "café ☕" in shown
    assert json.loads(shown) == arguments


def test_deadlines_read_the_same_everywhere() -> None:
    assert deadline_text(datetime(2025, 3, 14, 10, 30, tzinfo=timezone(timedelta(hours=1)))) == (
        "Fri 14 Mar 2025, 09:30 UTC"
    )


# --- The approval page ----------------------------------------------------------------------------

HOSTILE = {
    "to": "ops@example.com",
    "body": "<script>alert('x')</script> & </pre><h1>fake</h1>",
    "nested": {"list": [1, 2, {"q": '"quoted"'}]},
}


def page(**overrides: Any) -> str:
    kwargs: dict[str, Any] = {
        "agent_name": "Billing <bot>",
        "tool_name": "send_email",
        "arguments": HOSTILE,
        "expires_at": EXPIRES,
        "action_url": "https://api.example.com/v1/approvals/abc.def?x=1&y=2",
    }
    kwargs.update(overrides)
    return approval_page(**kwargs)


def test_the_page_shows_agent_tool_arguments_and_deadline_escaped() -> None:
    html = page()

    assert "Billing &lt;bot&gt;" in html
    assert "<code>send_email</code>" in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &lt;/pre&gt;&lt;h1&gt;fake" in html
    assert "&quot;to&quot;: &quot;ops@example.com&quot;" in html  # pretty-printed, one key per line
    assert "Fri 14 Mar 2025, 09:30 UTC" in html
    assert '<time datetime="2025-03-14T09:30:00+00:00">' in html


def test_the_page_has_a_post_form_with_two_labelled_buttons_and_a_reason() -> None:
    html = page()

    assert '<form method="post" action="https://api.example.com/v1/approvals/abc.def?x=1&amp;y=2">' in html
    assert re.search(r'<button type="submit" name="decision" value="approve"[^>]*>Approve</button>', html)
    assert re.search(r'<button type="submit" name="decision" value="deny"[^>]*>Deny</button>', html)
    assert '<label for="reason">' in html
    assert '<textarea id="reason" name="reason"' in html
    assert "autofocus" not in html


def test_the_page_is_accessible_and_self_contained() -> None:
    html = page()

    assert html.startswith('<!doctype html>\n<html lang="en">')
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in html
    assert "<main>" in html and "<h1>" in html and "<pre" in html
    assert "<script" not in html.lower()
    for external in ("<link", " src=", "url(", "@import"):
        assert external not in html


def test_the_pages_style_is_the_one_the_csp_allows() -> None:
    style = re.search(r"<style>(.*?)</style>", page(), re.DOTALL)
    assert style is not None
    digest = base64.b64encode(hashlib.sha256(style.group(1).encode()).digest()).decode()

    assert f"style-src 'sha256-{digest}'" in PAGE_HEADERS["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in PAGE_HEADERS["Content-Security-Policy"]
    assert PAGE_HEADERS["Cache-Control"] == "no-store"


def test_a_preselected_decision_only_highlights_its_button() -> None:
    html = page(preselected="approve")

    assert re.search(r'value="approve"[^>]*class="chosen" autofocus', html)
    assert not re.search(r'value="deny"[^>]*autofocus', html)
    assert "Press Approve below to confirm" in html
    assert html.count('type="submit"') == 2


def test_hidden_characters_are_revealed_on_the_page() -> None:
    html = page(agent_name="Agent\u202eevil", arguments={"cmd": "ls\u200b -la"})

    assert "\u202e" not in html and "\u200b" not in html
    assert "Agent\\u202eevil" in html and "ls\\u200b -la" in html


# --- Result pages ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "title", "http_status"),
    [
        ("approved", "Approved", 200),
        ("denied", "Denied", 200),
        ("already_decided", "Already decided", 409),
        ("expired", "Expired", 410),
        ("closed", "No longer open", 410),
        ("forged", "Link not valid", 403),
        ("error", "Decision not recorded", 400),
    ],
)
def test_each_result_has_its_wording_and_status(status: ResultStatus, title: str, http_status: int) -> None:
    html = result_page(status, None)

    assert f"<h1>{title}</h1>" in html
    assert f"<title>{title} · Stepwise</title>" in html
    assert RESULT_HTTP_STATUS[status] == http_status
    assert "<script" not in html and '<html lang="en">' in html


def test_every_result_status_has_a_page() -> None:
    assert set(RESULT_HTTP_STATUS) == set(get_args(ResultStatus))


def test_already_decided_names_the_earlier_outcome() -> None:
    html = result_page("already_decided", None, decided="approved")

    assert "This request was approved earlier. Nothing was changed." in html


def test_result_detail_is_escaped() -> None:
    html = result_page("error", "Choose <b>Approve</b> or Deny.")

    assert "<p>Choose &lt;b&gt;Approve&lt;/b&gt; or Deny.</p>" in html


def test_a_denied_page_words_the_outcome_for_a_human() -> None:
    assert "The tool will not run" in result_page("denied", None)
    assert "not valid" in result_page("forged", None)
    assert "deadline" in result_page("expired", None)


# --- The decision form ----------------------------------------------------------------------------


def test_a_browser_form_parses_to_decision_and_reason() -> None:
    body = urlencode({"reason": "  Looks right,\r\nship it  ", "decision": "approve"})

    assert parse_form(body) == {"decision": "approve", "reason": "Looks right,\nship it"}


def test_a_decision_without_a_reason_has_an_empty_reason() -> None:
    assert parse_form("decision=deny") == {"decision": "deny", "reason": ""}
    assert parse_form("decision=deny&reason=") == {"decision": "deny", "reason": ""}


def test_a_reason_of_exactly_the_limit_is_accepted_with_browser_line_breaks() -> None:
    reason = ("x" * 9 + "\r\n") * (MAX_REASON_CHARS // 10)  # a textarea counts CRLF as one character

    assert len(parse_form(urlencode({"decision": "deny", "reason": reason}))["reason"]) <= MAX_REASON_CHARS


@pytest.mark.parametrize(
    "body",
    [
        "",
        "reason=hi",
        "decision=maybe",
        "decision=APPROVE",
        "decision=approve&decision=deny",
        "decision=approve&reason=a&reason=b",
        urlencode({"decision": "deny", "reason": "x" * (MAX_REASON_CHARS + 1)}),
        "decision=approve&reason=%ff%fe",
        "&".join(f"f{i}=1" for i in range(50)) + "&decision=approve",
    ],
)
def test_a_form_that_cannot_be_acted_on_is_invalid(body: str) -> None:
    with pytest.raises(InvalidForm) as caught:
        parse_form(body)

    assert caught.value.status == 400


def test_the_same_decision_twice_is_still_one_decision() -> None:
    assert parse_form("decision=deny&decision=deny")["decision"] == "deny"


def test_revealing_leaves_ordinary_text_alone() -> None:
    assert reveal_hidden("plain text\twith tab\nand newline ✓") == "plain text\twith tab\nand newline ✓"
