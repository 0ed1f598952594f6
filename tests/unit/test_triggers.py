"""Inbound webhook verification against each provider's published test vector, and the template
language of triggers."""

import hashlib
import hmac
import json

import pytest

from stepwise.triggers import templates, verify
from stepwise.triggers.models import TriggerCreate

# Standard Webhooks' published vector (the spec's reference libraries test against it).
SW_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SW_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SW_TIMESTAMP = 1614265330
SW_BODY = b'{"test": 2432232314}'
SW_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

# GitHub's documented example ("Validating webhook deliveries").
GH_SECRET = "It's a Secret to Everybody"
GH_BODY = b"Hello, World!"
GH_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


def sw_headers(signature: str = SW_SIGNATURE, timestamp: int = SW_TIMESTAMP) -> dict[str, str]:
    return {"webhook-id": SW_ID, "webhook-timestamp": str(timestamp), "webhook-signature": signature}


def test_standard_webhooks_verifies_the_published_vector() -> None:
    found = verify.verify("standard-webhooks", sw_headers(), SW_BODY, [SW_SECRET], SW_TIMESTAMP + 10)

    assert found.event_id == SW_ID


def test_standard_webhooks_accepts_any_of_several_signatures_and_secrets() -> None:
    headers = sw_headers("v1,bm9wZQ== " + SW_SIGNATURE)
    other = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3ODk="

    assert verify.verify("standard-webhooks", headers, SW_BODY, [other, SW_SECRET], SW_TIMESTAMP).event_id


@pytest.mark.parametrize(
    ("headers", "body", "now", "reason"),
    [
        (sw_headers(), b'{"test": 2432232315}', SW_TIMESTAMP, "bad_signature"),
        (sw_headers("v1,AAAA"), SW_BODY, SW_TIMESTAMP, "bad_signature"),
        ({"webhook-id": SW_ID}, SW_BODY, SW_TIMESTAMP, "bad_signature"),
        (sw_headers(), SW_BODY, SW_TIMESTAMP + 301, "stale"),
        (sw_headers(), SW_BODY, SW_TIMESTAMP - 301, "stale"),
    ],
)
def test_standard_webhooks_refuses_tampering_and_stale_timestamps(
    headers: dict[str, str], body: bytes, now: int, reason: str
) -> None:
    with pytest.raises(verify.Refused) as refused:
        verify.verify("standard-webhooks", headers, body, [SW_SECRET], now)

    assert refused.value.reason == reason


def test_stepwise_outbound_signatures_verify_inbound() -> None:
    """The intake checks exactly what stepwise.webhooks signs."""
    from stepwise.webhooks import signing

    headers = signing.headers([SW_SECRET], "msg_1", 1_700_000_000, b"{}")

    assert verify.verify("standard-webhooks", headers, b"{}", [SW_SECRET], 1_700_000_000).event_id == "msg_1"


def test_github_verifies_its_documented_example() -> None:
    headers = {
        "x-hub-signature-256": GH_SIGNATURE,
        "x-github-delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
    }

    found = verify.verify("github", headers, GH_BODY, [GH_SECRET], 0)

    assert found.event_id == "72d3162e-cc78-11e3-81ab-4c9367dc0958"
    with pytest.raises(verify.Refused):
        verify.verify("github", headers, b"Hello, World?", [GH_SECRET], 0)


def stripe_header(secret: str, timestamp: int, body: bytes) -> str:
    """Stripe's documented scheme: v1 = hex HMAC-SHA256 of "<t>.<body>" keyed by the endpoint secret."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest},v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39"


def test_stripe_verifies_within_its_tolerance_and_refuses_outside() -> None:
    secret, body = "whsec_test_secret", b'{"id": "evt_1", "object": "event"}'
    header = {"stripe-signature": stripe_header(secret, 1_700_000_000, body)}

    assert verify.verify("stripe", header, body, [secret], 1_700_000_299) == verify.Verified()
    with pytest.raises(verify.Refused) as stale:
        verify.verify("stripe", header, body, [secret], 1_700_000_301)
    with pytest.raises(verify.Refused) as forged:
        verify.verify("stripe", header, body + b" ", [secret], 1_700_000_000)

    assert (stale.value.reason, forged.value.reason) == ("stale", "bad_signature")


def test_hmac_sha256_reads_the_named_header_in_hex_or_base64() -> None:
    import base64

    digest = hmac.new(b"a-shared-secret-123", b"{}", hashlib.sha256).digest()
    for value in (digest.hex(), "sha256=" + digest.hex(), base64.b64encode(digest).decode()):
        found = verify.verify(
            "hmac-sha256", {"x-sig": value}, b"{}", ["a-shared-secret-123"], 0, signature_header="X-Sig"
        )
        assert found == verify.Verified()
    with pytest.raises(verify.Refused):
        verify.verify("hmac-sha256", {}, b"{}", ["a-shared-secret-123"], 0, signature_header="X-Sig")


def test_templates_read_the_body_and_the_delivery() -> None:
    body = {"action": "opened", "pull_request": {"title": "Fix", "labels": [{"name": "bug"}]}, "n": 3}
    meta = {
        "$event": '{"raw": true}',
        "$headers": {"x-github-event": "pull_request"},
        "$delivery_id": "dlv_1",
    }

    text = templates.render(
        "{{ $headers.x-github-event }} {{action}}: {{pull_request.title}} [{{pull_request.labels.0.name}}] "
        "{{n}} {{missing.path}}|{{$delivery_id}} {{$event}}",
        body,
        meta,
    )

    assert text == 'pull_request opened: Fix [bug] 3 |dlv_1 {"raw": true}'


@pytest.mark.parametrize("bad", ["{{unclosed", "{{a..b}}", "{{$nope}}", "{{}}", "x }}"])
def test_bad_templates_are_refused_when_the_trigger_is_made(bad: str) -> None:
    with pytest.raises(ValueError, match="message"):
        TriggerCreate.model_validate(
            {"type": "webhook", "target": {"agent_id": "agt_" + "0" * 26}, "message": bad}
        )


def test_the_cli_creates_a_github_trigger_and_shows_its_secret_once() -> None:
    from tests.unit.test_cli import FakeApi, cli

    api = FakeApi()
    trigger = {
        "trigger_id": "trg_1",
        "type": "webhook",
        "target": {"agent_id": "agt_1"},
        "message": "{{action}}",
        "verification": "github",
        "url": "/v1/triggers/trg_1/in",
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    }
    api.routes["POST /v1/triggers"] = (201, {**trigger, "secret": "s3cret"})
    api.routes["GET /v1/triggers/trg_1/deliveries"] = (
        200,
        {
            "deliveries": [
                {
                    "delivery_id": "dlv_1",
                    "status": "started",
                    "received_at": "2026-01-01T00:00:01Z",
                    "run_id": "run_1",
                    "attempts": 1,
                }
            ],
            "next_token": None,
        },
    )

    created = cli(
        api,
        "triggers",
        "create",
        "agt_1",
        "--message",
        "{{action}}",
        "--verification",
        "github",
        "--session-key",
        "{{issue.number}}",
    )
    listed = cli(api, "triggers", "deliveries", "trg_1")

    assert created.code == listed.code == 0
    assert json.loads(api.requests[0].content) == {
        "type": "webhook",
        "target": {"agent_id": "agt_1"},
        "message": "{{action}}",
        "verification": "github",
        "session": {"by_key": "{{issue.number}}"},
    }
    assert "s3cret" in created.out and "/v1/triggers/trg_1/in" in created.out
    assert "started" in listed.out and "run_1" in listed.out
