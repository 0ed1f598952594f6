"""Webhook triggers end to end in the local stack: the public intake verifies, records and queues on
TriggerQueue (moto's SQS); the local poller hands the message to TriggerWorkerFunction, which starts the
agent's run. Senders sign with the `standardwebhooks` library's own signer."""

import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook

from stepwise.triggers import targets, worker
from stepwise_local.stack import LocalStack
from tests.eventually import eventually
from tests.integration.support import OTHER_KEY, wait_for_run

TEXT = [{"text": "noted"}]


@pytest.fixture(scope="module")
def agent_id(stack: LocalStack) -> str:
    status, _, body = stack.invoke_api("POST", "/v1/agents", {"name": "triggered", "script": TEXT})
    assert status == 201, body
    return str(body["agent_id"])


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The first retry is 10 s away; a second here, so the test waits on SQS, not on the backoff."""
    monkeypatch.setattr(worker, "RETRY_BASE", 1)
    yield


def create(stack: LocalStack, agent_id: str, **fields: Any) -> dict[str, Any]:
    body = {"type": "webhook", "target": {"agent_id": agent_id}, "message": "Event {{kind}}: {{$event}}"}
    status, _, created = stack.invoke_api("POST", "/v1/triggers", {**body, **fields})
    assert status == 201, created
    return dict(created)


def send(
    stack: LocalStack, trigger: dict[str, Any], payload: dict[str, Any], msg_id: str, **sign: Any
) -> tuple[int, Any]:
    raw = json.dumps(payload).encode()
    when = sign.get("when")
    stamp = when if when is not None else int(time.time())
    from datetime import UTC, datetime

    headers = Webhook(sign.get("secret", trigger["secret"])).sign(
        msg_id, datetime.fromtimestamp(stamp, UTC), raw.decode()
    )
    status, _, body = stack.invoke_api(
        "POST",
        trigger["url"],
        key=None,
        raw=raw,
        headers={"webhook-id": msg_id, "webhook-timestamp": str(stamp), "webhook-signature": headers},
    )
    return status, body


def deliveries(stack: LocalStack, trigger_id: str) -> list[dict[str, Any]]:
    status, _, body = stack.invoke_api("GET", f"/v1/triggers/{trigger_id}/deliveries")
    assert status == 200, body
    return list(body["deliveries"])


def settled(stack: LocalStack, trigger_id: str, delivery_id: str, status: str = "started") -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        found = {d["delivery_id"]: d for d in deliveries(stack, trigger_id)}.get(delivery_id)
        assert found is not None
        return found if found["status"] == status else None

    return eventually(check, what=f"delivery {delivery_id} {status}")


def runs_of(stack: LocalStack, agent_id: str) -> list[dict[str, Any]]:
    status, _, body = stack.invoke_api("GET", f"/v1/runs?agent_id={agent_id}")
    assert status == 200, body
    return list(body["runs"])


def test_create_read_change_and_delete_a_trigger(stack: LocalStack, agent_id: str) -> None:
    created = create(stack, agent_id, name="orders")
    trigger_id = created["trigger_id"]

    assert created["secret"].startswith("whsec_")
    assert created["url"] == f"/v1/triggers/{trigger_id}/in"
    assert created["verification"] == "standard-webhooks"
    status, _, got = stack.invoke_api("GET", f"/v1/triggers/{trigger_id}")
    assert status == 200 and "secret" not in got
    status, _, listed = stack.invoke_api("GET", "/v1/triggers")
    assert trigger_id in [t["trigger_id"] for t in listed["triggers"]]
    status, _, changed = stack.invoke_api("PATCH", f"/v1/triggers/{trigger_id}", {"enabled": False})
    assert (status, changed["enabled"]) == (200, False)
    status, _, changed = stack.invoke_api(
        "PATCH", f"/v1/triggers/{trigger_id}", {"session": None, "user_id": "{{from}}"}
    )
    assert (status, changed["session"], changed["user_id"]) == (200, "new", "{{from}}")
    # Another tenant sees nothing of it, exactly like an unknown id.
    for method, path in (("GET", ""), ("PATCH", ""), ("DELETE", ""), ("GET", "/deliveries")):
        status, _, body = stack.invoke_api(
            method, f"/v1/triggers/{trigger_id}{path}", {} if method == "PATCH" else None, key=OTHER_KEY
        )
        assert (status, body["error"]["code"]) == (404, "trigger_not_found"), (method, path)
    status, _, listed = stack.invoke_api("GET", "/v1/triggers", key=OTHER_KEY)
    assert trigger_id not in [t["trigger_id"] for t in listed["triggers"]]

    assert stack.invoke_api("DELETE", f"/v1/triggers/{trigger_id}")[0] == 204
    assert stack.invoke_api("GET", f"/v1/triggers/{trigger_id}")[0] == 404
    assert send(stack, created, {"kind": "x"}, "msg_gone")[0] == 404


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"type": "gmail"}, "trigger_type_unavailable"),
        ({"type": "outlook"}, "trigger_type_unavailable"),
        ({"type": "ses"}, "ses_not_configured"),
        ({"target": {"workflow_id": "wf_1"}}, "workflow_targets_unavailable"),
        ({"target": {"agent_id": "agt_" + "0" * 26}}, "target_not_found"),
        ({"message": "{{oops"}, "validation_error"),
        ({"verification": "hmac-sha256"}, "validation_error"),
    ],
)
def test_what_cannot_be_a_trigger_is_422(
    stack: LocalStack, agent_id: str, fields: dict[str, Any], code: str
) -> None:
    body = {"type": "webhook", "target": {"agent_id": agent_id}, "message": "hi", **fields}
    status, _, answer = stack.invoke_api("POST", "/v1/triggers", body)

    assert (status, answer["error"]["code"]) == (422, code)


def test_a_signed_delivery_starts_one_run_and_its_repeat_starts_nothing(
    stack: LocalStack, agent_id: str
) -> None:
    trigger = create(stack, agent_id)

    status, accepted = send(stack, trigger, {"kind": "order.paid", "id": 7}, "msg_order_7")
    again, repeat = send(stack, trigger, {"kind": "order.paid", "id": 7}, "msg_order_7")

    assert (status, accepted["status"]) == (202, "received")
    assert (again, repeat["deduplicated"], repeat["duplicate_of"]) == (200, True, accepted["delivery_id"])
    done = settled(stack, trigger["trigger_id"], accepted["delivery_id"])
    # Run alone, this is the session's first model step: the Step function's cold import is in it.
    run = wait_for_run(stack, done["run_id"], timeout=120)
    assert run["status"] == "succeeded"
    assert (run["trigger"], run["trigger_id"]) == ("webhook", trigger["trigger_id"])
    assert run["input"] == 'Event order.paid: {"kind": "order.paid", "id": 7}'
    assert [r["run_id"] for r in runs_of(stack, agent_id) if r["run_id"] == done["run_id"]] == [
        done["run_id"]
    ]
    listed = {d["delivery_id"]: d for d in deliveries(stack, trigger["trigger_id"])}
    assert listed[repeat["delivery_id"]]["status"] == "deduplicated"
    assert sum(1 for r in runs_of(stack, agent_id) if r.get("trigger_id") == trigger["trigger_id"]) == 1


def test_bad_signatures_stale_timestamps_and_large_bodies_start_nothing_and_are_counted(
    stack: LocalStack, agent_id: str
) -> None:
    trigger = create(stack, agent_id)
    other_secret = Webhook.__module__ and "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3ODk="

    forged, body = send(stack, trigger, {"kind": "x"}, "msg_forged", secret=other_secret)
    stale, _ = send(stack, trigger, {"kind": "x"}, "msg_stale", when=int(time.time()) - 301)
    huge = stack.invoke_api("POST", trigger["url"], key=None, raw=b"x" * (1024 * 1024 + 1), headers={})[0]

    assert (forged, body["error"]["code"]) == (401, "bad_signature")
    assert (stale, huge) == (401, 413)
    _, _, got = stack.invoke_api("GET", f"/v1/triggers/{trigger['trigger_id']}")
    assert got["refused"] == {"bad_signature": 1, "stale": 1, "too_large": 1}
    listed = deliveries(stack, trigger["trigger_id"])
    assert sorted(d["status"] for d in listed) == ["refused", "refused"]
    assert all(d["run_id"] is None for d in listed)


def test_a_crash_between_intake_and_start_makes_exactly_one_run(
    stack: LocalStack, agent_id: str, quick_retries: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first attempt starts the run and dies before recording it; the redelivered message's attempt
    finds the run (its id is derived from the delivery) and starts nothing more."""
    trigger = create(stack, agent_id)
    real_start, crashed = targets.start, list[str]()

    def crash_once(start: targets.Start, files: Any = None) -> str:
        run_id = real_start(start, files)
        if start.metadata["trigger_id"] == trigger["trigger_id"] and not crashed:
            crashed.append(run_id)
            raise RuntimeError("the worker died after the start")
        return run_id

    monkeypatch.setattr(targets, "start", crash_once)
    status, accepted = send(stack, trigger, {"kind": "once"}, "msg_crash")
    assert status == 202, accepted

    done = settled(stack, trigger["trigger_id"], accepted["delivery_id"])
    assert crashed == [done["run_id"]] and done["attempts"] == 2
    started = [r for r in runs_of(stack, agent_id) if r.get("trigger_id") == trigger["trigger_id"]]
    assert [r["run_id"] for r in started] == [done["run_id"]]


def test_a_start_that_keeps_failing_is_retried_then_failed(
    stack: LocalStack, agent_id: str, quick_retries: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    trigger = create(stack, agent_id)
    real_start = targets.start

    def broken(start: targets.Start, files: Any = None) -> str:
        if start.metadata["trigger_id"] == trigger["trigger_id"]:
            raise RuntimeError("the agent's start is unavailable")
        return real_start(start, files)

    monkeypatch.setattr(targets, "start", broken)
    monkeypatch.setenv("TRIGGER_MAX_ATTEMPTS", "2")
    from stepwise.core import config

    config.trigger_queue.cache_clear()
    try:
        status, accepted = send(stack, trigger, {"kind": "never"}, "msg_never")
        assert status == 202, accepted
        failed = settled(stack, trigger["trigger_id"], accepted["delivery_id"], "failed")
    finally:
        monkeypatch.undo()
        config.trigger_queue.cache_clear()

    assert failed["attempts"] == 2 and "unavailable" in failed["reason"]


def test_one_key_is_one_session_and_templates_name_the_user(stack: LocalStack, agent_id: str) -> None:
    trigger = create(
        stack, agent_id, session={"by_key": "{{thread}}"}, user_id="{{from}}", message="{{from}}: {{text}}"
    )
    ids = []
    for n, thread in enumerate(["t-1", "t-1", "t-2"]):
        status, accepted = send(
            stack, trigger, {"thread": thread, "from": "ann@example.com", "text": str(n)}, f"msg_t{n}"
        )
        assert status == 202, accepted
        done = settled(stack, trigger["trigger_id"], accepted["delivery_id"])
        ids.append(wait_for_run(stack, done["run_id"]))

    assert ids[0]["session_id"] == ids[1]["session_id"] != ids[2]["session_id"]
    assert {r["user_id"] for r in ids} == {"ann@example.com"}
    assert ids[1]["input"] == "ann@example.com: 1"


def test_github_and_stripe_senders(stack: LocalStack, agent_id: str) -> None:
    github = create(stack, agent_id, verification="github", message="{{$headers.x-github-event}} {{action}}")
    raw = b'{"action": "opened"}'
    digest = hmac.new(github["secret"].encode(), raw, hashlib.sha256).hexdigest()
    headers = {
        "x-hub-signature-256": f"sha256={digest}",
        "x-github-delivery": "d-1",
        "x-github-event": "issues",
    }
    first = stack.invoke_api("POST", github["url"], key=None, raw=raw, headers=headers)
    second = stack.invoke_api("POST", github["url"], key=None, raw=raw, headers=headers)
    assert (first[0], second[0], second[2]["deduplicated"]) == (202, 200, True)
    done = settled(stack, github["trigger_id"], first[2]["delivery_id"])
    assert wait_for_run(stack, done["run_id"])["input"] == "issues opened"

    stripe = create(
        stack, agent_id, verification="stripe", secret="whsec_from_the_stripe_dashboard", message="{{type}}"
    )
    raw = b'{"id": "evt_1", "type": "invoice.paid"}'
    stamp = int(time.time())
    sig = hmac.new(b"whsec_from_the_stripe_dashboard", f"{stamp}.".encode() + raw, hashlib.sha256).hexdigest()
    headers = {"stripe-signature": f"t={stamp},v1={sig}"}
    first = stack.invoke_api("POST", stripe["url"], key=None, raw=raw, headers=headers)
    second = stack.invoke_api("POST", stripe["url"], key=None, raw=raw, headers=headers)
    assert (first[0], second[0]) == (202, 200)
    assert first[2]["delivery_id"] == second[2]["duplicate_of"]


def test_a_rotated_secret_keeps_the_old_one_for_the_overlap(stack: LocalStack, agent_id: str) -> None:
    trigger = create(stack, agent_id)
    status, _, rotated = stack.invoke_api("POST", f"/v1/triggers/{trigger['trigger_id']}/secret", {})
    assert status == 200 and rotated["previous_valid_until"]

    assert send(stack, trigger, {"kind": "old"}, "msg_old")[0] == 202
    assert send(stack, trigger, {"kind": "new"}, "msg_new", secret=rotated["secret"])[0] == 202
    status, _, revoked = stack.invoke_api(
        "POST", f"/v1/triggers/{trigger['trigger_id']}/secret", {"previous_valid_seconds": 0}
    )
    assert send(stack, trigger, {"kind": "old"}, "msg_old2", secret=rotated["secret"])[0] == 401
    assert send(stack, trigger, {"kind": "new"}, "msg_new2", secret=revoked["secret"])[0] == 202


def test_a_delivery_recorded_but_never_queued_is_started_by_the_senders_retry(
    stack: LocalStack, agent_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The intake dies between recording the delivery and queueing it (here: SQS refuses). The sender
    got no 2xx, so it retries; the retry is a repeat, which queues the recorded delivery again."""
    from botocore.exceptions import EndpointConnectionError

    from stepwise.triggers import intake

    trigger = create(stack, agent_id)
    real_enqueue = intake.enqueue

    def unreachable(tenant_id: str, trigger_id: str, delivery_id: str, *, quiet: bool = False) -> None:
        if trigger_id == trigger["trigger_id"] and not quiet:
            raise intake.Unavailable("queue down", code="intake_unavailable") from EndpointConnectionError(
                endpoint_url="sqs"
            )
        real_enqueue(tenant_id, trigger_id, delivery_id, quiet=quiet)

    monkeypatch.setattr(intake, "enqueue", unreachable)
    failed, body = send(stack, trigger, {"kind": "lost?"}, "msg_lost")
    assert (failed, body["error"]["code"]) == (503, "intake_unavailable")
    first = deliveries(stack, trigger["trigger_id"])[0]
    assert first["status"] == "received"

    retried, repeat = send(stack, trigger, {"kind": "lost?"}, "msg_lost")

    assert (retried, repeat["duplicate_of"]) == (200, first["delivery_id"])
    done = settled(stack, trigger["trigger_id"], first["delivery_id"])
    started = [r for r in runs_of(stack, agent_id) if r.get("trigger_id") == trigger["trigger_id"]]
    assert [r["run_id"] for r in started] == [done["run_id"]]
