"""Email triggers' pure parts: a raw message taken apart, the rules against mail loops, and the SNS
signature check (against a fake SNS's test certificate on loopback)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from email.message import EmailMessage

import pytest

from stepwise.triggers import mail, sns
from tests.fakes.receiver import Receiver
from tests.fakes.sns import LOOPBACK_CERTS, FakeSns

TOPIC = "arn:aws:sns:us-east-1:123456789012:stepwise-ses-inbound"


def message(**headers: str) -> EmailMessage:
    found = EmailMessage()
    found["From"] = headers.pop("From", '"Ann Lee" <Ann@Example.com>')
    found["To"] = "help@inbound.test, Desk <desk@inbound.test>"
    found["Cc"] = "boss@example.com"
    found["Subject"] = "Invoice 7"
    found["Message-ID"] = "<m2@example.com>"
    for name, value in headers.items():
        found[name.replace("_", "-")] = value
    return found


def test_a_message_taken_apart() -> None:
    raw = message(In_Reply_To="<m1@example.com>", References="<m0@example.com> <m1@example.com>")
    raw.set_content("plain body")
    raw.add_alternative("<p>html</p>", subtype="html")
    raw.add_attachment(b"a,b\n1,2\n", maintype="text", subtype="csv", filename="../rows.csv")

    parsed = mail.parse(raw.as_bytes())

    assert (parsed.sender, parsed.sender_name) == ("ann@example.com", "Ann Lee")
    assert (parsed.to, parsed.cc) == (["help@inbound.test", "desk@inbound.test"], ["boss@example.com"])
    assert (parsed.message_id, parsed.in_reply_to) == ("m2@example.com", "m1@example.com")
    # A thread is its first message: the head of References.
    assert (parsed.thread_id, parsed.text) == ("m0@example.com", "plain body")
    assert [(p.name, p.content_type, p.data) for p in parsed.attachments] == [
        (".._rows.csv", "text/csv", b"a,b\n1,2\n")
    ]
    assert parsed.event()["attachments"] == [{"name": ".._rows.csv", "content_type": "text/csv", "size": 8}]
    assert mail.parse(raw.as_bytes(), thread_id="gmail-thread").thread_id == "gmail-thread"


def test_html_only_mail_is_read_as_text() -> None:
    raw = message()
    raw.set_content(
        "<html><head><style>p{}</style></head><body><p>Hi&nbsp;there</p><script>x()</script>"
        '<p>See <a href="https://example.com/a">this</a></p></body></html>',
        subtype="html",
    )

    parsed = mail.parse(raw.as_bytes())

    assert parsed.text == "Hi there\n\nSee this (https://example.com/a)"
    assert parsed.thread_id == "m2@example.com"  # no References: the message starts its thread


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({"From": "help@inbound.test"}, "own_mailbox"),
        ({"Auto_Submitted": "auto-replied"}, "automated"),
        ({"Precedence": "bulk"}, "automated"),
        ({"List_Id": "<news.example.com>"}, "automated"),
        ({"Auto_Submitted": "no"}, None),
        ({}, None),
    ],
)
def test_mail_that_must_start_nothing(headers: dict[str, str], reason: str | None) -> None:
    raw = message(**headers)
    raw.set_content("x")

    found = mail.skip_reason(mail.parse(raw.as_bytes()), "Help@inbound.test")

    assert (found.split(":")[0] if found else None) == reason


def test_automated_mail_may_be_allowed_but_never_the_mailbox_itself() -> None:
    auto, own = message(Auto_Submitted="auto-generated"), message(From="help@inbound.test")
    auto.set_content("x")
    own.set_content("x")

    assert mail.skip_reason(mail.parse(auto.as_bytes()), "help@inbound.test", allow_automated=True) is None
    reason = mail.skip_reason(mail.parse(own.as_bytes()), "help@inbound.test", allow_automated=True)
    assert reason and reason.startswith("own_mailbox")


class _Offline(Receiver):
    """No server (unit tests open no sockets): the certificate is put in the verifier's cache, as a
    first fetch would (tests/integration/test_triggers_ses.py fetches it over loopback)."""

    def __init__(self) -> None:
        self.replies = {}

    @property
    def url(self) -> str:
        return "http://127.0.0.1:9"


@pytest.fixture
def fake_sns(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSns]:
    monkeypatch.setenv("STEPWISE_SNS_CERT_URL_PATTERN", LOOPBACK_CERTS)
    fake = FakeSns(_Offline(), TOPIC)
    monkeypatch.setitem(sns._CERTS, fake.cert_url, fake.key.public_key())
    yield fake


@pytest.mark.parametrize("version", ["1", "2"])
def test_sns_signatures_of_both_versions_verify(fake_sns: FakeSns, version: str) -> None:
    signed = fake_sns.sign(
        {
            "Type": "Notification",
            "MessageId": "m-1",
            "TopicArn": TOPIC,
            "Message": "{}",
            "Timestamp": "2026-12-04T10:00:00.000Z",
        },
        version=version,
    )

    sns.verify(signed)

    with pytest.raises(sns.Refused, match="does not verify"):
        sns.verify({**signed, "Message": '{"changed": true}'})


def test_a_certificate_from_anywhere_but_sns_is_refused(
    fake_sns: FakeSns, monkeypatch: pytest.MonkeyPatch
) -> None:
    signed = json.loads(fake_sns.notification({}))
    monkeypatch.delenv("STEPWISE_SNS_CERT_URL_PATTERN")  # the default: Amazon's SNS hosts over HTTPS

    with pytest.raises(sns.Refused, match="not an Amazon SNS certificate URL"):
        sns.verify(signed)
    with pytest.raises(sns.Refused, match="SignatureVersion"):
        sns.verify({**signed, "SignatureVersion": "3"})


def test_a_graph_notification_of_anything_but_objects_is_refused() -> None:
    # Found by schemathesis: `{"value": [true, false]}` was accepted (202, "ignored": 2).
    from stepwise.core.errors import Unprocessable
    from stepwise.triggers import outlook

    with pytest.raises(Unprocessable) as refused:
        outlook.accept(json.dumps({"value": [True, {"subscriptionId": "s"}]}).encode())

    assert refused.value.code == "invalid_notification"


def test_bodies_nested_past_the_json_depth_cap_are_refused_not_a_crash() -> None:
    from stepwise.core.errors import ApiError, Unprocessable
    from stepwise.triggers import outlook, ses

    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(Unprocessable):
        outlook.accept(b'{"value": ' + deep + b"}")
    with pytest.raises(ApiError) as sns_refused:
        ses.accept(deep)

    assert sns_refused.value.status == 401
