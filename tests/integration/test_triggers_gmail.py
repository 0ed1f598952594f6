"""gmail triggers end to end in the local stack against a fake Google on loopback: the mailbox is
authorized through the MCP OAuth store and flow, Pub/Sub pushes carry OIDC tokens signed by a test
key, and the worker reads history.list and each message raw."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from datetime import timedelta
from email.message import EmailMessage
from typing import Any
from urllib.parse import urlparse

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from stepwise.triggers import gmail, renewal, store
from stepwise_local.stack import LocalStack
from tests.fakes.google import FakeGoogle
from tests.fakes.receiver import Receiver
from tests.integration.oauth_browser import Browser, query_of
from tests.integration.support import OTHER_KEY, wait_for_run
from tests.integration.test_triggers import deliveries, runs_of, settled

TEXT = [{"text": "noted"}]
CALLBACK = "/v1/integrations/gmail/oauth/callback"
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


@pytest.fixture(scope="module")
def agent_id(stack: LocalStack) -> str:
    status, _, body = stack.invoke_api("POST", "/v1/agents", {"name": "inbox", "script": TEXT})
    assert status == 201, body
    return str(body["agent_id"])


@pytest.fixture
def google(stack: LocalStack, receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGoogle]:
    fake = FakeGoogle(receiver, f"me-{uuid.uuid4().hex[:8]}@gmail.test")  # one trigger per mailbox
    for name, value in fake.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(gmail, "_KEYS", {})
    yield fake


def mime(message_id: str, sender: str, subject: str, *, references: str = "", png: bool = False) -> bytes:
    message = EmailMessage()
    message["From"] = sender
    message["To"] = "me@gmail.test"
    message["Subject"] = subject
    message["Message-ID"] = f"<{message_id}>"
    if references:
        message["References"] = references
    message.set_content(f"About {subject}")
    if png:
        message.add_attachment(PNG, maintype="image", subtype="png", filename="shot.png")
    return message.as_bytes()


def create(stack: LocalStack, agent_id: str, **fields: Any) -> dict[str, Any]:
    body = {
        "type": "gmail",
        "target": {"agent_id": agent_id},
        "message": "{{from}}: {{subject}}\n\n{{text}}",
        "session": {"by_key": "{{thread_id}}"},
        **fields,
    }
    status, _, created = stack.invoke_api("POST", "/v1/triggers", body)
    assert status == 201, created
    assert created["connected"] is False
    assert urlparse(created["authorization_url"]).path == "/v1/integrations/gmail/oauth/start"
    return dict(created)


def google_state(person: Browser, created: dict[str, Any]) -> str:
    """Open the trigger's start link: on to Google (which the test then plays), the state it carries."""
    location = person.open(created["authorization_url"])
    assert location.startswith(gmail.config.gmail().auth_url)
    query = query_of(location)
    assert query["code_challenge_method"] == "S256" and query["access_type"] == "offline"
    return query["state"]


def connect(stack: LocalStack, agent_id: str, **fields: Any) -> dict[str, Any]:
    created = create(stack, agent_id, **fields)
    person = Browser(stack)
    try:
        state = google_state(person, created)
        # Google sends the person back: in the same browser, with the cookie the start link set
        status, page = person.callback(CALLBACK, {"code": "code-1", "state": state})
    finally:
        person.close()
    assert status == 200, page
    status, _, trigger = stack.invoke_api("GET", f"/v1/triggers/{created['trigger_id']}")
    assert trigger["connected"] is True and trigger["address"].endswith("@gmail.test"), trigger
    return dict(trigger)


def test_the_mailbox_is_connected_only_from_the_browser_that_opened_the_link(
    stack: LocalStack, google: FakeGoogle, receiver: Receiver, agent_id: str
) -> None:
    created = create(stack, agent_id)
    person, elsewhere = Browser(stack), Browser(stack)
    try:
        state = google_state(person, created)

        # When Google's answer arrives in a browser that did not open the link
        status, page = elsewhere.callback(CALLBACK, {"code": "code-1", "state": state})

        # Then it is refused, no code is exchanged and the trigger stays unconnected
        assert status == 403 and "oauth_flow_not_bound" in page
        assert receiver.to("/token") == []
        assert stack.invoke_api("GET", f"/v1/triggers/{created['trigger_id']}")[2]["connected"] is False
        # and the link, opened again, is gone; the person's own browser still completes it
        assert elsewhere.get(created["authorization_url"]).status_code == 410
        assert person.callback(CALLBACK, {"code": "code-1", "state": state})[0] == 200
    finally:
        person.close()
        elsewhere.close()
    assert stack.invoke_api("GET", f"/v1/triggers/{created['trigger_id']}")[2]["connected"] is True


def push(
    stack: LocalStack, google: FakeGoogle, message_id: str, history_id: str, **token: Any
) -> tuple[int, Any]:
    status, _, body = stack.invoke_api(
        "POST",
        "/v1/integrations/gmail/push",
        key=None,
        raw=google.push(message_id, history_id),
        headers={"authorization": f"Bearer {google.token(**token)}"},
    )
    return status, body


def message_delivery(stack: LocalStack, trigger_id: str, gmail_id: str) -> dict[str, Any]:
    """The delivery a push fanned Gmail's message `gmail_id` out to (not a repeat of it)."""
    from tests.eventually import eventually

    def check() -> dict[str, Any] | None:
        found = [
            d
            for d in deliveries(stack, trigger_id)
            if d["dedupe_key"] == f"mail:{gmail_id}" and d["status"] != "deduplicated"
        ]
        assert len(found) <= 1, found
        return found[0] if found else None

    return eventually(check, what=f"the delivery of {gmail_id}")


def test_each_new_message_starts_one_run_and_a_thread_is_one_session(
    stack: LocalStack, agent_id: str, google: FakeGoogle, receiver: Receiver
) -> None:
    trigger = connect(stack, agent_id)
    trigger_id = trigger["trigger_id"]
    google.inbox("101", ("g1", "t1", mime("a1@example.com", "ann@example.com", "Hello", png=True)))

    status, first = push(stack, google, "p1", "101")
    again, repeat = push(stack, google, "p1", "101")  # Pub/Sub re-delivers
    assert (status, len(first["deliveries"]), again, len(repeat["deduplicated"])) == (200, 1, 200, 1)
    message = message_delivery(stack, trigger_id, "g1")
    run = wait_for_run(stack, settled(stack, trigger_id, message["delivery_id"])["run_id"], timeout=120)
    assert run["input"] == "ann@example.com: Hello\n\nAbout Hello"
    assert (run["trigger"], run["trigger_id"]) == ("gmail", trigger_id)
    assert [a["name"] for a in run["attachments"]] == ["shot.png"]

    # A later push whose history overlaps the first: only the new message starts a run, in its thread.
    google.inbox(
        "102",
        ("g1", "t1", mime("a1@example.com", "ann@example.com", "Hello")),
        ("g2", "t1", mime("a2@example.com", "ann@example.com", "Re: Hello", references="<a1@example.com>")),
    )
    assert push(stack, google, "p2", "102")[0] == 200
    later = message_delivery(stack, trigger_id, "g2")
    second = wait_for_run(stack, settled(stack, trigger_id, later["delivery_id"])["run_id"])
    assert second["session_id"] == run["session_id"]
    assert sorted(
        r["run_id"] for r in runs_of(stack, agent_id) if r.get("trigger_id") == trigger_id
    ) == sorted([run["run_id"], second["run_id"]])
    # The mailbox was read with the grant's tokens, refreshed by the MCP OAuth rules before expiry.
    token_calls = [r.body.decode() for r in receiver.requests if r.path == "/token"]
    assert "grant_type=authorization_code" in token_calls[0] and "code_verifier=" in token_calls[0]
    assert any("grant_type=refresh_token" in call for call in token_calls[1:])
    gmail_calls = [r for r in receiver.requests if r.path.startswith("/gmail/")]
    assert {r.headers["authorization"] for r in gmail_calls} == {"Bearer at-1"}


def test_unverified_tokens_and_own_mail_start_nothing(
    stack: LocalStack, agent_id: str, google: FakeGoogle
) -> None:
    trigger = connect(stack, agent_id)
    trigger_id = trigger["trigger_id"]
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    assert push(stack, google, "x1", "200", audience="https://elsewhere.test/push")[0] == 401
    assert push(stack, google, "x2", "200", key=stranger)[0] == 401
    assert push(stack, google, "x3", "200", expires_in=-120)[0] == 401
    status, _, body = stack.invoke_api(
        "POST", "/v1/integrations/gmail/push", key=None, raw=google.push("x4", "200"), headers={}
    )
    assert (status, body["error"]["code"]) == (401, "bad_token")
    assert deliveries(stack, trigger_id) == []

    google.inbox("201", ("own1", "t9", mime("own@gmail.test", google.mailbox, "Re: sent by the agent")))
    assert push(stack, google, "x5", "201")[0] == 200
    own = message_delivery(stack, trigger_id, "own1")
    assert settled(stack, trigger_id, own["delivery_id"], "refused")["reason"].startswith("own_mailbox")
    assert [r for r in runs_of(stack, agent_id) if r.get("trigger_id") == trigger_id] == []
    status, _, body = stack.invoke_api("GET", f"/v1/triggers/{trigger_id}", key=OTHER_KEY)
    assert (status, body["error"]["code"]) == (404, "trigger_not_found")


def test_watches_are_renewed_before_they_expire(
    stack: LocalStack, agent_id: str, google: FakeGoogle, receiver: Receiver
) -> None:
    trigger = connect(stack, agent_id)
    item = store.find(trigger["trigger_id"])
    assert item is not None and item.watch_expires_at is not None
    ends = item.watch_expires_at
    watches = lambda: sum(1 for r in receiver.requests if r.path == "/gmail/v1/users/me/watch")  # noqa: E731
    before = watches()

    assert trigger["trigger_id"] not in renewal.renew_due(ends - timedelta(hours=72))
    assert watches() == before
    google.watch(days=7)
    assert trigger["trigger_id"] in renewal.renew_due(ends - timedelta(hours=47))

    assert watches() > before
    renewed = store.find(trigger["trigger_id"])
    assert renewed is not None and renewed.watch_expires_at is not None and renewed.watch_expires_at > ends
