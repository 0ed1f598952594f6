"""`ses` triggers end to end in the local stack: a raw message in the local S3 where the receipt rule
stores mail, its SES notification posted through a fake SNS (a test certificate served on loopback),
the intake on TriggerQueue, the worker's run with the message taken apart and its files attached."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from email.message import EmailMessage
from typing import Any

import pytest

from stepwise.core import s3
from stepwise.triggers import targets, worker
from stepwise_local.stack import LocalStack
from tests.fakes.receiver import Receiver
from tests.fakes.sns import LOOPBACK_CERTS, FakeSns, ses_received
from tests.integration.support import OTHER_KEY, wait_for_run
from tests.integration.test_triggers import deliveries, runs_of, settled

DOMAIN = "inbound.test"
TEXT = [{"text": "noted"}]
# The smallest PNG: a run attachment must be a type runs take, checked by its bytes.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


@pytest.fixture(scope="module")
def agent_id(stack: LocalStack) -> str:
    status, _, body = stack.invoke_api("POST", "/v1/agents", {"name": "mailroom", "script": TEXT})
    assert status == 201, body
    return str(body["agent_id"])


@pytest.fixture
def sns(stack: LocalStack, receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSns]:
    monkeypatch.setenv("STEPWISE_SES_DOMAIN", DOMAIN)
    monkeypatch.setenv("STEPWISE_SNS_CERT_URL_PATTERN", LOOPBACK_CERTS)
    yield FakeSns(receiver, os.environ["STEPWISE_SES_TOPIC_ARN"])


def create(stack: LocalStack, agent_id: str, address: str, **fields: Any) -> dict[str, Any]:
    body = {
        "type": "ses",
        "address": address,
        "target": {"agent_id": agent_id},
        "message": "{{from}}: {{subject}}\n\n{{text}}",
        "session": {"by_key": "{{thread_id}}"},
        "user_id": "{{from}}",
        **fields,
    }
    status, _, created = stack.invoke_api("POST", "/v1/triggers", body)
    assert status == 201, created
    return dict(created)


def store_mail(key: str, sender: str, to: str, subject: str, message_id: str, **extra: Any) -> None:
    message = EmailMessage()
    message["From"] = f"Ann <{sender}>"
    message["To"] = to
    message["Subject"] = subject
    message["Message-ID"] = f"<{message_id}>"
    for name in ("In-Reply-To", "References", "Auto-Submitted"):
        if extra.get(name):
            message[name] = extra[name]
    message.set_content(extra.get("text", "Hello there"))
    message.add_alternative("<p>Hello <b>there</b></p>", subtype="html")
    for name, data, (main, sub) in extra.get("files", []):
        message.add_attachment(data, maintype=main, subtype=sub, filename=name)
    s3.s3_client().put_object(Bucket=s3.bucket(), Key=key, Body=message.as_bytes())


def post(stack: LocalStack, raw: bytes) -> tuple[int, Any]:
    status, _, body = stack.invoke_api("POST", "/v1/integrations/ses", key=None, raw=raw)
    return status, body


def notify(stack: LocalStack, sns: FakeSns, key: str, message_id: str, to: str) -> tuple[int, Any]:
    return post(stack, sns.notification(ses_received(str(s3.bucket()), key, message_id, [to])))


def test_one_run_per_message_its_files_attached_and_a_thread_is_one_session(
    stack: LocalStack, agent_id: str, sns: FakeSns
) -> None:
    trigger = create(stack, agent_id, "help@inbound.test")
    assert (trigger["address"], trigger["url"]) == ("help@inbound.test", None)
    files = [("chart.png", PNG, ("image", "png")), ("bundle.zip", b"PK\x03\x04rest", ("application", "zip"))]
    store_mail(
        "inbound/ses/m1", "ann@example.com", "help@inbound.test", "Broken", "m1@example.com", files=files
    )

    status, first = notify(stack, sns, "inbound/ses/m1", "ses-m1", "help@inbound.test")
    again, repeat = notify(stack, sns, "inbound/ses/m1", "ses-m1", "help@inbound.test")

    assert (status, len(first["deliveries"]), again, repeat["deliveries"]) == (200, 1, 200, [])
    assert len(repeat["deduplicated"]) == 1
    done = settled(stack, trigger["trigger_id"], first["deliveries"][0])
    run = wait_for_run(stack, done["run_id"], timeout=120)
    assert run["input"] == "ann@example.com: Broken\n\nHello there"
    assert (run["trigger"], run["trigger_id"], run["user_id"]) == (
        "ses",
        trigger["trigger_id"],
        "ann@example.com",
    )
    # The PNG is the run's own file now; the zip is not a type runs take, so only the event lists it.
    assert [(a["name"], a["content_type"]) for a in run["attachments"]] == [("chart.png", "image/png")]

    store_mail(
        "inbound/ses/m2",
        "ann@example.com",
        "help@inbound.test",
        "Re: Broken",
        "m2@example.com",
        **{"In-Reply-To": "<m1@example.com>", "References": "<m1@example.com>"},
    )
    status, reply = notify(stack, sns, "inbound/ses/m2", "ses-m2", "help@inbound.test")
    assert status == 200
    second = wait_for_run(stack, settled(stack, trigger["trigger_id"], reply["deliveries"][0])["run_id"])
    assert second["session_id"] == run["session_id"]
    mine = [r for r in runs_of(stack, agent_id) if r.get("trigger_id") == trigger["trigger_id"]]
    assert sorted(r["run_id"] for r in mine) == sorted([run["run_id"], second["run_id"]])


def test_forged_foreign_looping_and_automated_mail_starts_nothing(
    stack: LocalStack, agent_id: str, sns: FakeSns
) -> None:
    trigger = create(stack, agent_id, "desk@inbound.test")
    bucket = str(s3.bucket())
    signed = json.loads(
        sns.notification(ses_received(bucket, "inbound/ses/f1", "ses-f1", ["desk@inbound.test"]))
    )
    forged = {**signed, "Message": signed["Message"].replace("ses-f1", "ses-f2")}

    assert post(stack, json.dumps(forged).encode())[0] == 401
    foreign = sns.notification(
        ses_received(bucket, "inbound/ses/f1", "ses-f3", ["desk@inbound.test"]),
        topic_arn="arn:aws:sns:us-east-1:999999999999:elsewhere",
    )
    assert post(stack, foreign)[0] == 403
    outside = sns.notification(ses_received(bucket, "tenants/t/secret", "ses-f4", ["desk@inbound.test"]))
    assert post(stack, outside)[0] == 403
    assert deliveries(stack, trigger["trigger_id"]) == []

    store_mail("inbound/ses/own", "desk@inbound.test", "desk@inbound.test", "Re: x", "own@inbound.test")
    store_mail(
        "inbound/ses/ooo",
        "bob@example.com",
        "desk@inbound.test",
        "Away",
        "ooo@example.com",
        **{"Auto-Submitted": "auto-replied"},
    )
    refused = []
    for key in ("own", "ooo"):
        status, body = notify(stack, sns, f"inbound/ses/{key}", f"ses-{key}", "desk@inbound.test")
        assert status == 200, body
        refused.append(settled(stack, trigger["trigger_id"], body["deliveries"][0], "refused")["reason"])
    assert refused[0].startswith("own_mailbox") and refused[1].startswith("automated")
    assert [r for r in runs_of(stack, agent_id) if r.get("trigger_id") == trigger["trigger_id"]] == []


def test_a_crash_between_intake_and_start_makes_exactly_one_run(
    stack: LocalStack, agent_id: str, sns: FakeSns, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker, "RETRY_BASE", 1)
    trigger = create(stack, agent_id, "crash@inbound.test", session="new")
    real_start, crashed = targets.start, list[str]()

    def crash_once(start: targets.Start, files: Any = None) -> str:
        run_id = real_start(start, files)
        if start.metadata["trigger_id"] == trigger["trigger_id"] and not crashed:
            crashed.append(run_id)
            raise RuntimeError("the worker died after the start")
        return run_id

    monkeypatch.setattr(targets, "start", crash_once)
    store_mail("inbound/ses/c1", "cy@example.com", "crash@inbound.test", "Once", "c1@example.com")
    status, body = notify(stack, sns, "inbound/ses/c1", "ses-c1", "crash@inbound.test")
    assert status == 200, body

    done = settled(stack, trigger["trigger_id"], body["deliveries"][0])
    assert crashed == [done["run_id"]] and done["attempts"] == 2
    started = [r for r in runs_of(stack, agent_id) if r.get("trigger_id") == trigger["trigger_id"]]
    assert [r["run_id"] for r in started] == [done["run_id"]]


def test_addresses_are_unique_and_tenants_see_only_their_own(
    stack: LocalStack, agent_id: str, sns: FakeSns, receiver: Receiver
) -> None:
    trigger = create(stack, agent_id, "only@inbound.test")
    status, _, taken = stack.invoke_api(
        "POST",
        "/v1/triggers",
        {"type": "ses", "address": "only@inbound.test", "target": {"agent_id": agent_id}, "message": "x"},
    )
    assert (status, taken["error"]["code"]) == (409, "address_taken")
    status, _, outside = stack.invoke_api(
        "POST",
        "/v1/triggers",
        {"type": "ses", "address": "a@elsewhere.test", "target": {"agent_id": agent_id}, "message": "x"},
    )
    assert (status, outside["error"]["code"]) == (422, "address_outside_domain")
    status, _, body = stack.invoke_api("GET", f"/v1/triggers/{trigger['trigger_id']}", key=OTHER_KEY)
    assert (status, body["error"]["code"]) == (404, "trigger_not_found")
    # Deleted, its address is free again.
    assert stack.invoke_api("DELETE", f"/v1/triggers/{trigger['trigger_id']}")[0] == 204
    create(stack, agent_id, "only@inbound.test")

    # SNS's subscription confirmation is verified, then confirmed by GETting its SubscribeURL.
    status, confirmed = post(stack, sns.confirmation())
    assert (status, confirmed["type"]) == (200, "SubscriptionConfirmation")
    assert [r.path for r in receiver.requests if r.path.startswith("/confirm")] == [
        "/confirm?Action=ConfirmSubscription&Token=token-1"
    ]
