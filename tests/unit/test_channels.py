"""Slack and email: the messages, Slack's request signatures and button clicks, and delivery.

Slack webhooks go through the real SSRF-guarded client, with a fake resolver and a fake network backend
that serves canned bytes, so the HTTP is real and no socket opens. SES is an in-memory fake client.
"""

from __future__ import annotations

import functools
import io
import json
import re
import ssl
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from urllib.parse import urlencode

import httpcore
import pytest
from botocore.exceptions import ClientError

from stepwise.approvals.channels import ChannelError, email, slack
from stepwise.approvals.channels.email import ApprovalEmail, approval_email, print_email, send_email
from stepwise.approvals.channels.slack import (
    BLOCK_TEXT_LIMIT,
    InvalidSlackSignature,
    MalformedSlackPayload,
    SlackAction,
    approval_message,
    decided_message,
    parse_interaction,
    plain_text,
    post_webhook,
    slack_len,
    verify_signature,
)
from stepwise.core.config import ConfigError
from stepwise.net import ssrf

EXPIRES = datetime(2025, 3, 14, 9, 30, tzinfo=UTC)
TOKEN = "WzEsImludF8wMUpQQVIzQjdYIiwiYWNtZSIsMTc0MTk0NDYwMF0.c2lnbmF0dXJlLXNpZ25hdHVyZS1zaWduYXR1cmUtc2ln"
LINK = f"https://api.example.com/v1/approvals/{TOKEN}"

# Slack's documented example ("Verifying requests from Slack"): this secret, timestamp and body give
# exactly this signature.
SLACK_DOC_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
SLACK_DOC_TIMESTAMP = "1531420618"
SLACK_DOC_BODY = (
    b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V"
    b"&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text="
    b"&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN"
    b"&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
)
SLACK_DOC_SIGNATURE = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
SLACK_DOC_NOW = float(SLACK_DOC_TIMESTAMP) + 12


# --- Slack: request signatures --------------------------------------------------------------------


def test_slacks_documented_example_verifies() -> None:
    verify_signature(
        SLACK_DOC_SECRET, SLACK_DOC_TIMESTAMP, SLACK_DOC_BODY, SLACK_DOC_SIGNATURE, SLACK_DOC_NOW
    )


@pytest.mark.parametrize(
    ("secret", "body", "signature"),
    [
        ("8f742231b10e8888abcd99yyyzzz85a6", SLACK_DOC_BODY, SLACK_DOC_SIGNATURE),  # another app's secret
        (SLACK_DOC_SECRET, SLACK_DOC_BODY + b"&x=1", SLACK_DOC_SIGNATURE),  # body changed in transit
        (SLACK_DOC_SECRET, SLACK_DOC_BODY, SLACK_DOC_SIGNATURE[:-1] + "4"),  # one hex digit off
        (SLACK_DOC_SECRET, SLACK_DOC_BODY, SLACK_DOC_SIGNATURE.removeprefix("v0=")),  # no version
        (SLACK_DOC_SECRET, SLACK_DOC_BODY, SLACK_DOC_SIGNATURE.replace("v0=", "v1=")),
        (SLACK_DOC_SECRET, SLACK_DOC_BODY, SLACK_DOC_SIGNATURE.upper()),
        (SLACK_DOC_SECRET, SLACK_DOC_BODY, ""),
        (SLACK_DOC_SECRET, SLACK_DOC_BODY, "v0=é" + SLACK_DOC_SIGNATURE[4:]),  # non-ASCII: no TypeError
    ],
)
def test_a_wrong_signature_is_refused(secret: str, body: bytes, signature: str) -> None:
    with pytest.raises(InvalidSlackSignature, match="does not match") as caught:
        verify_signature(secret, SLACK_DOC_TIMESTAMP, body, signature, SLACK_DOC_NOW)

    assert caught.value.status == 401


@pytest.mark.parametrize("skew", [301, -301, 86_400])
def test_a_timestamp_more_than_five_minutes_away_is_refused_even_if_signed(skew: int) -> None:
    with pytest.raises(InvalidSlackSignature, match="5 minutes"):
        verify_signature(
            SLACK_DOC_SECRET,
            SLACK_DOC_TIMESTAMP,
            SLACK_DOC_BODY,
            SLACK_DOC_SIGNATURE,
            float(SLACK_DOC_TIMESTAMP) + skew,
        )


@pytest.mark.parametrize("skew", [300, -300])
def test_a_timestamp_exactly_five_minutes_away_is_accepted(skew: int) -> None:
    now = float(SLACK_DOC_TIMESTAMP) + skew

    verify_signature(SLACK_DOC_SECRET, SLACK_DOC_TIMESTAMP, SLACK_DOC_BODY, SLACK_DOC_SIGNATURE, now)


@pytest.mark.parametrize(
    "timestamp", ["", "abc", "1531420618.5", " 1531420618", "1_531_420_618", "-1", "١٢٣"]
)
def test_a_timestamp_that_is_not_a_number_is_refused(timestamp: str) -> None:
    with pytest.raises(InvalidSlackSignature, match="not a number"):
        verify_signature(SLACK_DOC_SECRET, timestamp, SLACK_DOC_BODY, SLACK_DOC_SIGNATURE, SLACK_DOC_NOW)


def test_an_empty_signing_secret_is_a_configuration_error_not_a_pass() -> None:
    with pytest.raises(ConfigError):
        verify_signature("", SLACK_DOC_TIMESTAMP, SLACK_DOC_BODY, SLACK_DOC_SIGNATURE, SLACK_DOC_NOW)


def test_the_signing_secret_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLACK_SIGNING_SECRET", SLACK_DOC_SECRET)
    assert slack.signing_secret() == SLACK_DOC_SECRET

    monkeypatch.delenv("SLACK_SIGNING_SECRET")
    with pytest.raises(ConfigError, match="SLACK_SIGNING_SECRET"):
        slack.signing_secret()


# --- Slack: the approval message ------------------------------------------------------------------


def message(arguments: dict[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "agent_name": "Billing <bot> & co",
        "tool_name": "send_email",
        "arguments": {"to": "ops@example.com", "subject": "Q1 <numbers>"} if arguments is None else arguments,
        "approve_value": TOKEN,
        "deny_value": TOKEN,
        "link_url": LINK,
    }
    kwargs.update(overrides)
    return approval_message(**kwargs)


def test_the_message_has_summary_arguments_buttons_and_link() -> None:
    built = message(expires_at=EXPIRES)
    summary, arguments, actions, context = built["blocks"]

    assert [block["type"] for block in built["blocks"]] == ["section", "section", "actions", "context"]
    assert summary["text"] == {
        "type": "mrkdwn",
        "text": "Approval needed: *Billing &lt;bot&gt; &amp; co* wants to run `send_email`.",
    }
    assert arguments["text"]["text"] == (
        '```\n{\n  "to": "ops@example.com",\n  "subject": "Q1 &lt;numbers&gt;"\n}\n```'
    )
    approve, deny = actions["elements"]
    fields = ("action_id", "style", "value")
    assert [approve[field] for field in fields] == ["stepwise_approve", "primary", TOKEN]
    assert [deny[field] for field in fields] == ["stepwise_deny", "danger", TOKEN]
    assert approve["text"] == {"type": "plain_text", "text": "Approve"}
    assert deny["text"] == {"type": "plain_text", "text": "Deny"}
    assert f"<{LINK}|Open the approval page>" in context["elements"][0]["text"]
    assert "Fri 14 Mar 2025, 09:30 UTC" in context["elements"][0]["text"]
    assert built["text"] == "Approval needed: Billing &lt;bot&gt; &amp; co wants to run send_email"
    json.dumps(built)  # a webhook body: plain JSON types only


def test_long_arguments_are_cut_to_slacks_block_limit_with_a_pointer_to_the_page() -> None:
    text = message({"body": "line of text\n" * 1000})["blocks"][1]["text"]["text"]

    assert slack_len(text) <= BLOCK_TEXT_LIMIT
    assert slack_len(text) > BLOCK_TEXT_LIMIT - 100  # cut, not emptied
    assert text.startswith("```\n{") and "…\n```" in text
    assert text.endswith("the approval page shows all of them._")


def test_the_cut_counts_emoji_as_slack_does_and_never_splits_an_entity() -> None:
    for filler in ("🚀", "&", "a&<>"):
        text = message({"body": filler * 4000})["blocks"][1]["text"]["text"]

        assert slack_len(text) <= BLOCK_TEXT_LIMIT
        assert not re.search(r"&(?!amp;|lt;|gt;)", text), filler


def test_backticks_in_arguments_cannot_close_the_code_block() -> None:
    text = message({"code": "```\n*bold* <!channel>\n```"})["blocks"][1]["text"]["text"]

    assert text.count("```") == 2
    assert "&lt;!channel&gt;" in text


def test_a_button_value_slack_would_refuse_is_an_error_here() -> None:
    with pytest.raises(ValueError):
        message(approve_value="x" * 2001)
    with pytest.raises(ValueError):
        message(deny_value="")


def test_the_decided_message_replaces_the_buttons() -> None:
    update = decided_message(agent_name="Billing", tool_name="send_email", decision="deny", user_id="U0CA5")

    assert update["replace_original"] is True
    assert update["blocks"][0]["text"]["text"] == "<@U0CA5> denied *Billing* running `send_email`."
    assert all(block["type"] != "actions" for block in update["blocks"])


def test_a_message_prints_readably_with_its_link() -> None:
    out = io.StringIO()

    slack.print_message(message(), file=out)

    printed = out.getvalue()
    assert f"Open the approval page: {LINK}" in printed
    assert "[Approve] [Deny]" in printed
    assert "Billing <bot> & co" in printed
    assert plain_text(message()) in printed


# --- Slack: button clicks -------------------------------------------------------------------------


def slack_click(action_id: str = "stepwise_approve", value: str = TOKEN) -> dict[str, Any]:
    """A block_actions payload as Slack sends it for a button in a message posted by a webhook."""
    return {
        "type": "block_actions",
        "user": {"id": "U0CA5", "username": "amy.mcgee", "name": "amy.mcgee", "team_id": "T3MDE"},
        "api_app_id": "A0CA5",
        "token": "Shh_its_a_seekrit",
        "container": {
            "type": "message",
            "message_ts": "1548261231.000200",
            "channel_id": "C0CA5",
            "is_ephemeral": False,
        },
        "trigger_id": "12321423423.333649436676.d8c1bb837935619ccad0f624c448ffb3",
        "team": {"id": "T3MDE", "domain": "eurekatest"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": "C0CA5", "name": "approvals"},
        "message": {
            "type": "message",
            "subtype": "bot_message",
            "text": "Approval needed",
            "ts": "1548261231.000200",
        },
        "state": {"values": {}},
        "response_url": "https://hooks.slack.com/actions/T3MDE/548426417840/8aUSKHO3c9iAKSKaaQz8mVvC",
        "actions": [
            {
                "action_id": action_id,
                "block_id": "stepwise_decision",
                "text": {"type": "plain_text", "text": "Approve", "emoji": True},
                "value": value,
                "style": "primary",
                "type": "button",
                "action_ts": "1548426417.840180",
            }
        ],
    }


def form(payload: Any) -> str:
    return urlencode({"payload": payload if isinstance(payload, str) else json.dumps(payload)})


def test_a_click_parses_to_decision_token_user_and_response_url() -> None:
    action = parse_interaction(form(slack_click()))

    assert action == SlackAction(
        decision="approve",
        token=TOKEN,
        user_id="U0CA5",
        user_name="amy.mcgee",
        response_url="https://hooks.slack.com/actions/T3MDE/548426417840/8aUSKHO3c9iAKSKaaQz8mVvC",
    )


def test_the_buttons_we_send_are_the_clicks_we_read() -> None:
    buttons = message(approve_value="approve-token", deny_value="deny-token")["blocks"][2]["elements"]

    clicks = [parse_interaction(form(slack_click(b["action_id"], b["value"]))) for b in buttons]

    assert [(c.decision, c.token) for c in clicks] == [("approve", "approve-token"), ("deny", "deny-token")]


def _without(key: str) -> dict[str, Any]:
    click = slack_click()
    del click[key]
    return click


@pytest.mark.parametrize(
    "body",
    [
        "",
        "not a form at all",
        urlencode({"payload": "{not json"}),
        "payload=%ff",
        form(["a", "list"]),
        form({**slack_click(), "type": "view_submission"}),
        form({**slack_click(), "actions": []}),
        form(slack_click(action_id="someone_elses_button")),
        form(slack_click(value="")),
        form(_without("user")),
        form({**slack_click(), "user": {"username": "no-id"}}),
        form(slack_click()) + "&" + form(slack_click()),
    ],
)
def test_a_payload_that_is_not_our_button_click_is_malformed(body: str) -> None:
    with pytest.raises(MalformedSlackPayload) as caught:
        parse_interaction(body)

    assert caught.value.status == 400


def test_a_click_without_a_response_url_still_parses() -> None:
    assert parse_interaction(form(_without("response_url"))).response_url is None


# --- Slack: delivery through the SSRF guard -------------------------------------------------------

WEBHOOK = "https://hooks.slack.com/services/T000/B000/XXXXSECRETXXXX"
SLACK_IP = "52.89.214.238"


class CannedStream(httpcore.NetworkStream):
    def __init__(self, response: bytes) -> None:
        self._chunks = iter([response])
        self.written = b""

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return next(self._chunks, b"")

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.written += buffer

    def close(self) -> None:
        pass

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        return self


class FakeNetwork(httpcore.NetworkBackend):
    """Answers every connection with one canned HTTP response, or fails to connect."""

    def __init__(self, response: bytes = b"", *, refuse: bool = False) -> None:
        self.response = response
        self.refuse = refuse
        self.connects: list[tuple[str, int]] = []
        self.streams: list[CannedStream] = []

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        self.connects.append((host, port))
        if self.refuse:
            raise httpcore.ConnectError("connection refused")
        stream = CannedStream(self.response)
        self.streams.append(stream)
        return stream


def http_response(status: str, body: bytes, headers: str = "") -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n{headers}\r\n".encode() + body


@pytest.fixture
def network(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(fake: FakeNetwork, answers: dict[str, list[str]] | None = None) -> FakeNetwork:
        dns = answers if answers is not None else {"hooks.slack.com": [SLACK_IP]}

        def resolver(host: str, port: int) -> list[str]:
            return dns[host]

        monkeypatch.setattr(
            slack, "guarded_client", functools.partial(ssrf.guarded_client, resolver=resolver, connector=fake)
        )
        return fake

    return install


def test_a_message_is_posted_as_json_to_the_webhook(network: Any) -> None:
    fake = network(FakeNetwork(http_response("200 OK", b"ok")))

    post_webhook(WEBHOOK, message())

    assert fake.connects == [(SLACK_IP, 443)]
    request = fake.streams[0].written
    assert request.startswith(b"POST /services/T000/B000/XXXXSECRETXXXX HTTP/1.1\r\n")
    assert b"\r\nHost: hooks.slack.com\r\n" in request
    assert b"content-type: application/json" in request.lower()
    assert json.loads(request.split(b"\r\n\r\n", 1)[1]) == message()


def test_slack_refusing_the_message_is_a_channel_error_without_the_webhook_url(network: Any) -> None:
    network(FakeNetwork(http_response("400 Bad Request", b"invalid_blocks")))

    with pytest.raises(ChannelError, match="400: invalid_blocks") as caught:
        post_webhook(WEBHOOK, message())

    assert "XXXXSECRETXXXX" not in str(caught.value)


def test_an_unreachable_webhook_is_a_channel_error(network: Any) -> None:
    network(FakeNetwork(refuse=True))

    with pytest.raises(ChannelError, match="unreachable: ConnectError"):
        post_webhook(WEBHOOK, message())


def test_a_webhook_pointing_inside_the_network_is_refused_before_connecting(network: Any) -> None:
    fake = network(FakeNetwork(http_response("200 OK", b"ok")), {"hooks.evil.example": ["169.254.169.254"]})

    with pytest.raises(ChannelError, match="refused"):
        post_webhook("https://hooks.evil.example/x", message())

    assert fake.connects == []


def test_a_redirecting_webhook_is_not_followed(network: Any) -> None:
    fake = network(FakeNetwork(http_response("302 Found", b"", "Location: http://10.0.0.1/\r\n")))

    with pytest.raises(ChannelError, match="302"):
        post_webhook(WEBHOOK, message())

    assert len(fake.connects) == 1


# --- Email ----------------------------------------------------------------------------------------

APPROVE_URL = f"{LINK}?decision=approve&from=mail"


def mail(**overrides: Any) -> ApprovalEmail:
    kwargs: dict[str, Any] = {
        "agent_name": "Billing <bot>",
        "tool_name": "send_email",
        "arguments": {"to": "ops@example.com", "body": "<script>alert(1)</script> & more"},
        "approve_url": APPROVE_URL,
        "review_url": LINK,
        "expires_at": EXPIRES,
    }
    kwargs.update(overrides)
    return approval_email(**kwargs)


def test_the_email_has_both_links_in_text_and_html() -> None:
    built = mail()

    assert APPROVE_URL in built.text and LINK in built.text
    assert 'href="https://api.example.com/v1/approvals/' in built.html
    assert f'href="{LINK}?decision=approve&amp;from=mail"' in built.html  # escaped in the attribute
    assert f'href="{LINK}"' in built.html
    assert "Opening a link decides nothing" in built.text and "Opening a link decides nothing" in built.html


def test_the_email_names_agent_tool_arguments_and_deadline() -> None:
    built = mail()

    assert built.subject == "Approval needed: Billing <bot> wants to run send_email"
    assert '"to": "ops@example.com"' in built.text
    assert "Fri 14 Mar 2025, 09:30 UTC" in built.text and "Fri 14 Mar 2025, 09:30 UTC" in built.html


def test_the_email_html_escapes_everything() -> None:
    built = mail()

    assert "<script" not in built.html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in built.html
    assert "<strong>Billing &lt;bot&gt;</strong>" in built.html
    assert "<title>Approval needed: Billing &lt;bot&gt; wants to run send_email</title>" in built.html
    assert '<html lang="en">' in built.html


def test_the_subject_is_one_clean_line() -> None:
    built = mail(agent_name="Evil\r\nBcc: victim@example.com\u202e", tool_name="t" * 300)

    assert "\r" not in built.subject and "\n" not in built.subject and "\u202e" not in built.subject
    assert len(built.subject) <= email.MAX_SUBJECT_CHARS


def test_huge_arguments_are_cut_in_the_email_with_a_pointer_to_the_page() -> None:
    built = mail(arguments={"blob": "x" * 50_000})

    assert len(built.text) < 25_000
    assert "the approval page shows all of the arguments" in built.text


def test_links_in_an_email_must_be_web_links() -> None:
    with pytest.raises(ValueError):
        mail(approve_url="javascript:alert(1)")


class FakeSes:
    def __init__(self, error: Exception | None = None) -> None:
        self.sent: list[dict[str, Any]] = []
        self.error = error

    def send_email(self, **kwargs: Any) -> dict[str, Any]:
        if self.error is not None:
            raise self.error
        self.sent.append(kwargs)
        return {"MessageId": "0100018e-example"}


def test_send_email_sends_one_simple_message_with_text_and_html() -> None:
    ses = FakeSes()
    built = mail()

    send_email(
        "approvals@example.com", ["a@example.com", " b@example.com", "a@example.com"], built, client=ses
    )

    assert ses.sent == [
        {
            "FromEmailAddress": "approvals@example.com",
            "Destination": {"ToAddresses": ["a@example.com", "b@example.com"]},
            "Content": {
                "Simple": {
                    "Subject": {"Data": built.subject, "Charset": "UTF-8"},
                    "Body": {
                        "Text": {"Data": built.text, "Charset": "UTF-8"},
                        "Html": {"Data": built.html, "Charset": "UTF-8"},
                    },
                }
            },
        }
    ]


def test_send_email_refuses_no_recipients_or_more_than_ses_takes() -> None:
    ses = FakeSes()

    with pytest.raises(ValueError):
        send_email("approvals@example.com", ["  "], mail(), client=ses)
    with pytest.raises(ValueError):
        send_email("approvals@example.com", [f"u{i}@example.com" for i in range(51)], mail(), client=ses)
    assert ses.sent == []


def test_an_ses_failure_is_a_channel_error() -> None:
    rejected = ClientError(
        {"Error": {"Code": "MessageRejected", "Message": "Email address is not verified."}}, "SendEmail"
    )

    with pytest.raises(ChannelError, match="not verified"):
        send_email("approvals@example.com", ["a@example.com"], mail(), client=FakeSes(rejected))


def test_print_email_shows_recipients_subject_and_both_links(capsys: pytest.CaptureFixture[str]) -> None:
    print_email(["a@example.com", "b@example.com"], mail())

    printed = capsys.readouterr().out
    assert "To: a@example.com, b@example.com" in printed
    assert "Subject: Approval needed: Billing <bot> wants to run send_email" in printed
    assert APPROVE_URL in printed and f"\n{LINK}\n" in printed


def test_the_deadline_in_an_email_is_read_in_utc() -> None:
    built = mail(expires_at=EXPIRES.astimezone(timezone(timedelta(hours=-5))))

    assert "Fri 14 Mar 2025, 09:30 UTC" in built.text
