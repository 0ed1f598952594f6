"""outlook triggers end to end in the local stack against a fake Microsoft (identity platform and Graph)
on loopback: the mailbox authorized through the MCP OAuth store, a change-notification subscription with
its clientState, Graph's validation handshake, notifications (re-delivered too), the message's MIME."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from email.message import EmailMessage
from typing import Any
from urllib.parse import urlparse

import pytest

from stepwise.triggers import renewal, store
from stepwise_local.stack import LocalStack
from tests.fakes.receiver import Receiver, Reply
from tests.integration.oauth_browser import Browser, query_of
from tests.integration.support import wait_for_run
from tests.integration.test_triggers import deliveries, runs_of, settled

TEXT = [{"text": "noted"}]
CALLBACK = "/v1/integrations/outlook/oauth/callback"


@pytest.fixture(scope="module")
def agent_id(stack: LocalStack) -> str:
    status, _, body = stack.invoke_api("POST", "/v1/agents", {"name": "outlook-inbox", "script": TEXT})
    assert status == 201, body
    return str(body["agent_id"])


@pytest.fixture
def graph(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    """The fake Microsoft: tokens, /me, subscriptions, and messages' MIME under /graph."""
    mailbox = f"me-{uuid.uuid4().hex[:8]}@contoso.test"
    receiver.replies["/ms/token"] = Reply(
        body={"access_token": "ms-at", "token_type": "Bearer", "expires_in": 3600, "refresh_token": "ms-rt"}
    )
    receiver.replies["/graph/me"] = Reply(body={"mail": mailbox, "userPrincipalName": mailbox})
    receiver.replies["/graph/subscriptions"] = Reply(body={"id": f"sub-{uuid.uuid4().hex[:8]}"})
    for name, value in {
        "MS_CLIENT_ID": "ms-client",
        "MS_CLIENT_SECRET": "ms-secret",
        "MS_AUTH_URL": f"{receiver.url}/ms/authorize",
        "MS_TOKEN_URL": f"{receiver.url}/ms/token",
        "MS_GRAPH_URL": f"{receiver.url}/graph",
    }.items():
        monkeypatch.setenv(name, value)
    yield receiver


def mime(message_id: str, sender: str, subject: str) -> bytes:
    message = EmailMessage()
    message["From"] = sender
    message["To"] = "me@contoso.test"
    message["Subject"] = subject
    message["Message-ID"] = f"<{message_id}>"
    message.set_content(f"About {subject}")
    return message.as_bytes()


def connect(stack: LocalStack, agent_id: str, graph: Receiver) -> tuple[dict[str, Any], str]:
    """The trigger, connected, and the clientState Graph was given."""
    body = {"type": "outlook", "target": {"agent_id": agent_id}, "message": "{{from}}: {{subject}}"}
    status, _, created = stack.invoke_api("POST", "/v1/triggers", body)
    assert status == 201, created
    assert urlparse(created["authorization_url"]).path == "/v1/integrations/outlook/oauth/start"
    person = Browser(stack)
    try:
        # The start link sends the person on to Microsoft, which sends them back with the code: in the
        # same browser, with the cookie the start link set
        location = person.open(created["authorization_url"])
        assert location.startswith(f"{graph.url}/ms/authorize?")
        callback = {"code": "ms-code", "state": query_of(location)["state"]}
        status, page = person.callback(CALLBACK, callback)
    finally:
        person.close()
    assert status == 200, page
    status, _, trigger = stack.invoke_api("GET", f"/v1/triggers/{created['trigger_id']}")
    assert trigger["connected"] is True and trigger["subscription_id"], trigger
    made = [r.json() for r in graph.requests if r.path == "/graph/subscriptions" and r.method == "POST"][-1]
    assert made["resource"] == "me/mailFolders('Inbox')/messages" and made["changeType"] == "created"
    assert made["notificationUrl"].endswith("/v1/integrations/outlook/notify")
    return dict(trigger), str(made["clientState"])


def test_a_callback_in_another_browser_connects_nothing(
    stack: LocalStack, graph: Receiver, agent_id: str
) -> None:
    body = {"type": "outlook", "target": {"agent_id": agent_id}, "message": "{{subject}}"}
    created = stack.invoke_api("POST", "/v1/triggers", body)[2]
    person, elsewhere = Browser(stack), Browser(stack)
    try:
        state = query_of(person.open(created["authorization_url"]))["state"]

        status, page = elsewhere.callback(CALLBACK, {"code": "ms-code", "state": state})

        assert status == 403 and "oauth_flow_not_bound" in page
        assert graph.to("/ms/token") == [] and graph.to("/graph/subscriptions") == []
        assert stack.invoke_api("GET", f"/v1/triggers/{created['trigger_id']}")[2]["connected"] is False
    finally:
        person.close()
        elsewhere.close()


def notify(stack: LocalStack, subscription_id: str, client_state: str, *message_ids: str) -> tuple[int, Any]:
    value = [
        {
            "subscriptionId": subscription_id,
            "clientState": client_state,
            "changeType": "created",
            "resource": f"Users/u/Messages/{m}",
            "resourceData": {"@odata.type": "#Microsoft.Graph.Message", "id": m},
        }
        for m in message_ids
    ]
    raw = json.dumps({"value": value}).encode()
    status, _, body = stack.invoke_api("POST", "/v1/integrations/outlook/notify", key=None, raw=raw)
    return status, body


def test_the_handshake_and_one_run_per_message_under_redelivery(
    stack: LocalStack, agent_id: str, graph: Receiver
) -> None:
    trigger, client_state = connect(stack, agent_id, graph)
    status, headers, echoed = stack.invoke_api(
        "POST", "/v1/integrations/outlook/notify?validationToken=Validation%3A+abc", key=None
    )
    assert (status, headers["content-type"].split(";")[0], echoed) == (200, "text/plain", "Validation: abc")

    graph.replies["/graph/me/messages/m1/$value"] = Reply(
        body=mime("o1@example.com", "dan@example.com", "Quote"), content_type="message/rfc822"
    )
    status, first = notify(stack, trigger["subscription_id"], client_state, "m1")
    again, repeat = notify(stack, trigger["subscription_id"], client_state, "m1")  # Graph re-delivers

    assert (status, len(first["deliveries"]), again, len(repeat["deduplicated"])) == (202, 1, 202, 1)
    run = wait_for_run(
        stack, settled(stack, trigger["trigger_id"], first["deliveries"][0])["run_id"], timeout=120
    )
    assert (run["input"], run["trigger"]) == ("dan@example.com: Quote", "outlook")
    assert [
        r["run_id"] for r in runs_of(stack, agent_id) if r.get("trigger_id") == trigger["trigger_id"]
    ] == [run["run_id"]]


def test_a_wrong_client_state_starts_nothing_and_subscriptions_are_renewed(
    stack: LocalStack, agent_id: str, graph: Receiver
) -> None:
    trigger, client_state = connect(stack, agent_id, graph)

    status, body = notify(stack, trigger["subscription_id"], "not-" + client_state, "m9")

    assert (status, body["deliveries"], body["ignored"]) == (202, [], 1)
    assert deliveries(stack, trigger["trigger_id"]) == []
    status, _, got = stack.invoke_api("GET", f"/v1/triggers/{trigger['trigger_id']}")
    assert got["refused"]["bad_signature"] == 1

    item = store.find(trigger["trigger_id"])
    assert item is not None and item.watch_expires_at is not None
    ends = item.watch_expires_at
    patch = f"/graph/subscriptions/{trigger['subscription_id']}"
    assert trigger["trigger_id"] not in renewal.renew_due(ends - timedelta(hours=72))
    assert trigger["trigger_id"] in renewal.renew_due(ends - timedelta(hours=47))
    assert [r.method for r in graph.requests if r.path == patch] == ["PATCH"]
    renewed = store.find(trigger["trigger_id"])
    assert renewed is not None and renewed.watch_expires_at is not None and renewed.watch_expires_at > ends
