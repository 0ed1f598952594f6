"""Webhooks on run events, end to end in the local stack: the run's ending (or pause) queues a delivery
on WebhookQueue (moto's SQS), the local SQS poller hands it to WebhookFunction, which POSTs it signed to
a receiver on loopback. Signatures are checked with the `standardwebhooks` library's own verifier."""

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from stepwise.core import config
from stepwise.store import runs
from stepwise.webhooks import enqueue, retry
from stepwise_local.stack import LocalStack
from tests.eventually import eventually
from tests.fakes.receiver import Received, Receiver, Reply
from tests.integration.support import OTHER_KEY, tool, wait_for_run

TEXT = [{"text": "all done"}]


class Secret:
    """The local tenant's current webhook secret (the rotation test moves it on)."""

    def __init__(self, value: str) -> None:
        self.value = value


@pytest.fixture(scope="module")
def tenant_secret(stack: LocalStack) -> Secret:
    status, _, body = stack.invoke_api("POST", "/v1/webhooks/secret")
    assert status == 201, body  # a creation
    return Secret(str(body["secret"]))


@pytest.fixture
def secret(tenant_secret: Secret) -> str:
    return tenant_secret.value


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The real schedule's first retry is 5 s away; a second here, so the test waits on SQS, not on it."""
    monkeypatch.setattr(retry, "SCHEDULE", (1, 1, 1))
    monkeypatch.setattr(retry, "JITTER", 0.0)
    yield


def agent(stack: LocalStack, **fields: Any) -> str:
    status, _, body = stack.invoke_api("POST", "/v1/agents", {"name": "hooked", "script": TEXT, **fields})
    assert status == 201, body
    return str(body["agent_id"])


def start(stack: LocalStack, agent_id: str, **fields: Any) -> str:
    status, _, body = stack.invoke_api("POST", f"/v1/agents/{agent_id}/runs", {"message": "go", **fields})
    assert status == 202, body
    return str(body["run_id"])


def deliveries(stack: LocalStack, run_id: str) -> list[dict[str, Any]]:
    status, _, body = stack.invoke_api("GET", f"/v1/runs/{run_id}/webhooks")
    assert status == 200, body
    return list(body["deliveries"])


def settled(stack: LocalStack, run_id: str, count: int = 1) -> list[dict[str, Any]]:
    def check() -> list[dict[str, Any]] | None:
        found = deliveries(stack, run_id)
        done = [d for d in found if d["status"] in ("delivered", "failed")]
        return found if len(done) >= count else None

    return eventually(check, what=f"{count} settled deliveries of {run_id}")


def verified(secret: str, request: Received) -> dict[str, Any]:
    payload: dict[str, Any] = Webhook(secret).verify(request.body, request.headers)
    return payload


def test_a_run_ending_is_delivered_signed_per_standard_webhooks(
    stack: LocalStack, receiver: Receiver, secret: str
) -> None:
    run_id = start(stack, agent(stack), webhook={"url": f"{receiver.url}/hooks"})
    assert wait_for_run(stack, run_id)["status"] == "succeeded"

    (delivery,) = settled(stack, run_id)
    (request,) = eventually(lambda: receiver.to("/hooks"), what="the delivery")
    payload = verified(secret, request)
    assert payload["type"] == "run_completed"
    assert payload["data"]["run_id"] == run_id and payload["data"]["status"] == "succeeded"
    assert payload["data"]["output"] == "all done"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["webhook-signature"].startswith("v1,")
    assert delivery["webhook_id"] == request.headers["webhook-id"]
    assert delivery | {"history": None} == delivery | {
        "event": "run_completed",
        "status": "delivered",
        "attempts": 1,
        "last_status_code": 200,
        "last_error": None,
        "history": None,
    }
    assert [a["status_code"] for a in delivery["history"]] == [200]
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + "A" * 43 + "=").verify(request.body, request.headers)  # another secret: refused


def test_a_delivery_answered_500_is_retried_under_the_same_id(
    stack: LocalStack, receiver: Receiver, secret: str, quick_retries: None
) -> None:
    receiver.then("/flaky", Reply(status=500, body={"error": "down"}))
    run_id = start(stack, agent(stack), webhook={"url": f"{receiver.url}/flaky"})
    wait_for_run(stack, run_id)

    (delivery,) = settled(stack, run_id)
    first, second = receiver.to("/flaky")
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == delivery["webhook_id"]
    assert verified(secret, first) == verified(secret, second)  # the same event, signed afresh each time
    assert second.at - first.at >= 0.9  # after the backoff (SQS kept the message hidden), not at once
    assert delivery["status"] == "delivered" and delivery["attempts"] == 2
    assert [a["status_code"] for a in delivery["history"]] == [500, 200]
    assert delivery["last_status_code"] == 200


def test_a_receiver_that_never_answers_2xx_is_failed_when_the_window_closes(
    stack: LocalStack, receiver: Receiver, secret: str, quick_retries: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retry, "WINDOW", retry.timedelta(seconds=3))
    monkeypatch.setattr(enqueue, "WINDOW", retry.timedelta(seconds=3))
    receiver.replies["/gone"] = Reply(status=503)
    run_id = start(stack, agent(stack), webhook={"url": f"{receiver.url}/gone"})
    wait_for_run(stack, run_id)

    (delivery,) = settled(stack, run_id)
    assert delivery["status"] == "failed" and delivery["last_status_code"] == 503
    assert delivery["attempts"] == len(receiver.to("/gone")) >= 2
    assert delivery["next_attempt_at"] is None


def test_the_same_event_queued_twice_is_delivered_once(
    stack: LocalStack, receiver: Receiver, secret: str
) -> None:
    run_id = start(stack, agent(stack), webhook={"url": f"{receiver.url}/once"})
    wait_for_run(stack, run_id)
    (delivery,) = settled(stack, run_id)
    target = runs.target("local", run_id)

    # A retried step enqueues its event again; SQS delivers a message twice now and then.
    again = enqueue.enqueue(
        "local",
        target,
        "run_completed",
        {"status": "succeeded"},
        key="ending",
        at=runs.get("local", run_id).created_at,
    )
    sqs = boto3.client("sqs")
    queue = config.webhook_queue().queue_url
    message = {"tenant_id": "local", "run_id": run_id, "webhook_id": delivery["webhook_id"]}
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(message))

    def drained() -> bool:
        attributes = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
        return (
            attributes["ApproximateNumberOfMessages"]
            == attributes["ApproximateNumberOfMessagesNotVisible"]
            == "0"
        )

    eventually(drained, what="the duplicate message to be consumed")
    assert again == delivery["webhook_id"]
    assert len(receiver.to("/once")) == 1
    assert deliveries(stack, run_id) == [delivery]


def test_a_rotated_secret_keeps_signing_beside_the_new_one(
    stack: LocalStack, receiver: Receiver, tenant_secret: Secret
) -> None:
    old = {"secret": tenant_secret.value}
    status, _, new = stack.invoke_api("POST", "/v1/webhooks/secret")
    assert status == 201 and old["secret"] != new["secret"] and new["secret"].startswith("whsec_")
    assert new["previous_valid_until"] is not None
    tenant_secret.value = new["secret"]

    run_id = start(stack, agent(stack), webhook={"url": f"{receiver.url}/rotated"})
    wait_for_run(stack, run_id)
    settled(stack, run_id)
    (request,) = receiver.to("/rotated")
    assert verified(old["secret"], request) == verified(new["secret"], request)
    assert len(request.headers["webhook-signature"].split(" ")) == 2


def test_an_agent_webhook_applies_to_its_runs_and_a_run_may_name_its_own(
    stack: LocalStack, receiver: Receiver, secret: str
) -> None:
    agent_id = agent(stack, webhook={"url": f"{receiver.url}/agent"})
    inherited = start(stack, agent_id)
    own = start(stack, agent_id, webhook={"url": f"{receiver.url}/run", "events": ["run_failed"]})
    for run_id in (inherited, own):
        wait_for_run(stack, run_id)

    settled(stack, inherited)
    assert stack.invoke_api("GET", f"/v1/runs/{inherited}")[2]["webhook"]["url"] == f"{receiver.url}/agent"
    assert [r.json()["data"]["run_id"] for r in receiver.to("/agent")] == [inherited]
    assert deliveries(stack, own) == [] and receiver.to("/run") == []  # it asked for failures only


def test_approval_requested_and_the_ending_are_delivered_in_turn(
    stack: LocalStack, receiver: Receiver, secret: str
) -> None:
    script = [{"tool_calls": [{"name": "send", "arguments": {"q": "hi"}}]}, {"text": "sent"}]
    agent_id = agent(stack, tools=[tool("send", f"{receiver.url}/send", permission="ask")], script=script)
    run_id = start(
        stack,
        agent_id,
        webhook={"url": f"{receiver.url}/wh", "events": ["approval_requested", "run_completed"]},
    )

    (requested,) = eventually(lambda: receiver.to("/wh"), what="approval_requested")
    payload = verified(secret, requested)
    assert payload["type"] == "approval_requested"
    assert payload["data"]["tool_name"] == "send" and payload["data"]["arguments"] == {"q": "hi"}
    assert payload["data"]["interaction_id"] and payload["data"]["approval_url"]
    assert stack.invoke_api("POST", f"/v1/runs/{run_id}/approve", {"approved": True})[0] == 202
    wait_for_run(stack, run_id)

    found = settled(stack, run_id, count=2)
    assert [d["event"] for d in found] == ["approval_requested", "run_completed"]
    assert [verified(secret, r)["type"] for r in receiver.to("/wh")] == [
        "approval_requested",
        "run_completed",
    ]


def test_a_cancelled_run_is_delivered(stack: LocalStack, receiver: Receiver, secret: str) -> None:
    script = [{"tool_calls": [{"name": "send", "arguments": {"q": "hi"}}]}, {"text": "sent"}]
    agent_id = agent(stack, tools=[tool("send", f"{receiver.url}/send", permission="ask")], script=script)
    run_id = start(stack, agent_id, webhook={"url": f"{receiver.url}/cancelled"})
    eventually(
        lambda: stack.invoke_api("GET", f"/v1/runs/{run_id}")[2]["status"] == "waiting", what="the wait"
    )

    assert stack.invoke_api("POST", f"/v1/runs/{run_id}/cancel")[0] == 200
    (delivery,) = settled(stack, run_id)
    assert delivery["event"] == "run_cancelled"
    assert verified(secret, receiver.to("/cancelled")[0])["data"]["status"] == "cancelled"


def test_a_destination_the_ssrf_guard_refuses_fails_at_once(stack: LocalStack, secret: str) -> None:
    run_id = start(stack, agent(stack), webhook={"url": "http://169.254.169.254/latest/meta-data/"})
    wait_for_run(stack, run_id)

    (delivery,) = settled(stack, run_id)
    assert delivery["status"] == "failed" and delivery["attempts"] == 1
    assert delivery["last_error"].startswith("blocked_destination")
    assert delivery["last_status_code"] is None


def test_a_webhook_needs_the_tenants_secret_and_stays_the_tenants(stack: LocalStack, secret: str) -> None:
    hook = {"url": "https://example.com/hooks"}
    status, _, body = stack.invoke_api("POST", "/v1/agents", {"name": "x", "webhook": hook}, key=OTHER_KEY)
    assert (status, body["error"]["code"]) == (422, "webhook_secret_missing")
    status, _, other = stack.invoke_api("POST", "/v1/agents", {"name": "x"}, key=OTHER_KEY)
    status, _, body = stack.invoke_api(
        "POST", f"/v1/agents/{other['agent_id']}/runs", {"message": "go", "webhook": hook}, key=OTHER_KEY
    )
    assert (status, body["error"]["code"]) == (422, "webhook_secret_missing")

    run_id = start(stack, agent(stack), webhook=hook)
    status, _, body = stack.invoke_api("GET", f"/v1/runs/{run_id}/webhooks", key=OTHER_KEY)
    assert (status, body["error"]["code"]) == (404, "run_not_found")


@pytest.mark.parametrize(
    "webhook",
    [
        {"url": "ftp://example.com/x"},
        {"url": "https://user:pw@example.com/x"},
        {"url": "https://example.com/x", "events": ["run_started"]},
        {"url": "https://example.com/x", "events": []},
        {"url": "https://example.com/x", "secret": "mine"},
    ],
)
def test_a_bad_webhook_is_a_422(stack: LocalStack, secret: str, webhook: dict[str, Any]) -> None:
    status, _, body = stack.invoke_api(
        "POST", f"/v1/agents/{agent(stack)}/runs", {"message": "go", "webhook": webhook}
    )
    assert (status, body["error"]["code"]) == (422, "validation_error")
