"""Webhook signing, backoff, payloads and config, without AWS: signatures are checked with the
`standardwebhooks` library's own verifier."""

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from stepwise.core.schema import rfc3339
from stepwise.runs.models import RunCreate
from stepwise.webhooks import enqueue, retry, signing
from stepwise.webhooks.models import DEFAULT_EVENTS, RunTarget, WebhookConfig
from stepwise_local.queues import Mapping, mappings

NOW = datetime(2026, 1, 1, tzinfo=UTC)
BODY = b'{"type":"run_completed","data":{"output":"\xc3\xa9t\xc3\xa9"}}'


def test_a_new_secret_is_whsec_and_32_random_bytes() -> None:
    first, second = signing.new_secret(), signing.new_secret()

    assert first.startswith("whsec_") and first != second
    assert len(signing._key(first)) == 32


def test_signatures_verify_with_the_reference_library() -> None:
    secret = signing.new_secret()
    headers = signing.headers([secret], "msg_1", int(time.time()), BODY)

    assert Webhook(secret).verify(BODY, headers) == json.loads(BODY)
    with pytest.raises(WebhookVerificationError):
        Webhook(signing.new_secret()).verify(BODY, headers)
    with pytest.raises(WebhookVerificationError):  # the body is what is signed
        Webhook(secret).verify(BODY.replace(b"run_completed", b"run_failed"), headers)
    with pytest.raises(WebhookVerificationError):  # and so is the id
        Webhook(secret).verify(BODY, {**headers, "webhook-id": "msg_2"})


def test_during_a_rotation_either_secret_verifies() -> None:
    new, old = signing.new_secret(), signing.new_secret()
    headers = signing.headers([new, old], "msg_1", int(time.time()), BODY)

    assert headers["webhook-signature"].count("v1,") == 2
    for secret in (new, old):
        Webhook(secret).verify(BODY, headers)


def test_an_old_timestamp_is_refused_by_receivers() -> None:
    secret = signing.new_secret()
    headers = signing.headers([secret], "msg_1", int(time.time()) - 600, BODY)

    with pytest.raises(WebhookVerificationError, match="too old"):
        Webhook(secret).verify(BODY, headers)


@pytest.mark.parametrize(
    ("attempts", "delay"), [(1, 5), (2, 300), (3, 1800), (4, 7200), (5, 18000), (6, 36000), (9, 36000)]
)
def test_the_backoff_follows_the_schedule(attempts: int, delay: int) -> None:
    assert retry.next_delay(attempts, NOW, NOW + retry.WINDOW, rng=lambda: 0.0) == delay


def test_jitter_stretches_a_delay_by_at_most_a_tenth() -> None:
    assert retry.next_delay(2, NOW, NOW + retry.WINDOW, rng=lambda: 1.0) == 330


def test_no_delay_reaches_past_the_window_and_none_follows_it() -> None:
    closes = NOW + timedelta(seconds=100)

    assert retry.next_delay(3, NOW, closes, rng=lambda: 0.0) == 100
    assert retry.next_delay(3, closes, closes) is None


def test_the_whole_schedule_spans_the_day() -> None:
    """Attempts until the window closes: eight, the last one at 24 h."""
    at, attempts = NOW, 1
    while (delay := retry.next_delay(attempts, at, NOW + retry.WINDOW, rng=lambda: 0.0)) is not None:
        at, attempts = at + timedelta(seconds=delay), attempts + 1

    assert attempts == 8 and at == NOW + retry.WINDOW


def target(**fields: object) -> RunTarget:
    return RunTarget(run_id="run_1", agent_id="agt_1", session_id="ses_1", metadata={"order": 7}, **fields)  # type: ignore[arg-type]


def test_the_body_is_the_standard_webhooks_payload_shape() -> None:
    body = json.loads(enqueue.body(target(), "run_completed", {"status": "succeeded", "output": "hi"}, NOW))

    assert body == {
        "type": "run_completed",
        "timestamp": rfc3339(NOW),
        "data": {
            "run_id": "run_1",
            "agent_id": "agt_1",
            "session_id": "ses_1",
            "status": "succeeded",
            "output": "hi",
            "metadata": {"order": 7},
        },
    }


def test_a_body_over_the_limit_goes_without_its_output() -> None:
    huge = "x" * (enqueue.BODY_LIMIT + 1)
    body = enqueue.body(target(), "run_completed", {"status": "succeeded", "output": huge}, NOW)

    data = json.loads(body)["data"]
    assert "output" not in data and data["truncated"] is True and data["status"] == "succeeded"
    assert len(body.encode()) < enqueue.BODY_LIMIT


def test_the_webhook_id_is_derived_from_what_happened() -> None:
    first = enqueue.webhook_id("acme", "run_1", "ending", NOW)

    assert first == enqueue.webhook_id("acme", "run_1", "ending", NOW)
    assert first.startswith("msg_")
    assert first != enqueue.webhook_id("acme", "run_1", "int_1", NOW)
    assert first != enqueue.webhook_id("other", "run_1", "ending", NOW)


def test_a_run_without_a_webhook_queues_nothing_and_touches_no_store() -> None:
    # No AWS is reachable in unit tests: reaching the store or the queue would raise.
    assert enqueue.enqueue("acme", target(), "run_completed", {}, key="ending", at=NOW) is None
    only_failures = target(webhook=WebhookConfig(url="https://example.com", events=["run_failed"]))
    assert enqueue.enqueue("acme", only_failures, "run_completed", {}, key="ending", at=NOW) is None


def test_a_webhook_defaults_to_the_runs_ending() -> None:
    assert WebhookConfig(url="https://example.com/h").events == list(DEFAULT_EVENTS)
    assert WebhookConfig(url="https://e.com", events=["run_failed", "run_failed"]).events == ["run_failed"]


@pytest.mark.parametrize(
    "webhook",
    [
        {"url": "example.com/h"},
        {"url": "file:///etc/passwd"},
        {"url": "https://a:b@example.com/"},
        {"url": "https://example.com/", "events": ["chunk"]},
        {"url": "https://example.com/", "events": []},
        {"url": "https://example.com/", "headers": {"x": "y"}},
    ],
)
def test_a_bad_webhook_is_refused(webhook: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        RunCreate.model_validate({"message": "go", "webhook": webhook})


def test_the_local_stack_polls_the_queues_the_template_maps() -> None:
    functions = {
        "WebhookFunction": {
            "Properties": {
                "Events": {
                    "Deliveries": {
                        "Type": "SQS",
                        "Properties": {
                            "Queue": "arn:q",
                            "BatchSize": 5,
                            "FunctionResponseTypes": ["ReportBatchItemFailures"],
                        },
                    },
                    "Api": {"Type": "HttpApi", "Properties": {}},
                }
            }
        },
        "Other": {"Properties": {}},
    }

    found = mappings(functions, lambda value: value, {"arn:q": "https://q"}.__getitem__)

    assert found == [Mapping("WebhookFunction", "https://q", "arn:q", 5, report_failures=True)]
