"""Verifying an inbound request: is it signed with the trigger's secret, and is it fresh?

- `standard-webhooks`: `webhook-id`, `webhook-timestamp`, `webhook-signature` (`v1,<base64>`, one or
  more, space-separated) over `<id>.<timestamp>.<body>`, keyed by the `whsec_` secret's base64 bytes:
  exactly how Stepwise's own outbound webhooks sign (stepwise.webhooks.signing computes it here too).
- `github`: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`, keyed by the secret's UTF-8
  bytes. GitHub signs no timestamp, so no age can be checked; the delivery id dedupes replays.
- `stripe`: `Stripe-Signature: t=<epoch>,v1=<hex>[,v1=...]` over `<t>.<body>`, keyed by the endpoint
  secret's UTF-8 bytes (the `whsec_` string as Stripe shows it), within the tolerance.
- `hmac-sha256`: the named header holds the hex (or base64) HMAC-SHA256 of the body, keyed by the
  secret's UTF-8 bytes, with an optional `sha256=` prefix. No timestamp either.

Each scheme accepts a signature made with any of the secrets given: the current one and, during a
rotation's overlap, the one it replaced. Comparisons are constant-time. Timestamps more than
TOLERANCE seconds away from now (either way) are refused as stale.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from stepwise.webhooks import signing

TOLERANCE = 300  # seconds: a signed timestamp further than this from now is refused
Scheme = Literal["standard-webhooks", "github", "stripe", "hmac-sha256"]
Reason = Literal["bad_signature", "stale"]


class Refused(Exception):
    """The request is not verified: `reason` is counted on the trigger, `message` answered (401)."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Verified:
    """What verification learned: the sender's id of the event (`webhook-id`, `X-GitHub-Delivery`), if any."""

    event_id: str | None = None


def _hmac(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()


def _fresh(timestamp: str, now: float) -> int:
    try:
        when = int(timestamp)
    except ValueError:
        raise Refused("bad_signature", "the signed timestamp is not a number of seconds") from None
    if abs(now - when) > TOLERANCE:
        raise Refused("stale", f"the signed timestamp is more than {TOLERANCE // 60} minutes from now")
    return when


def standard_webhooks(headers: Mapping[str, str], body: bytes, secrets: list[str], now: float) -> Verified:
    webhook_id, timestamp, header = (
        headers.get("webhook-id"),
        headers.get("webhook-timestamp"),
        headers.get("webhook-signature"),
    )
    if not webhook_id or not timestamp or not header:
        raise Refused("bad_signature", "webhook-id, webhook-timestamp and webhook-signature are required")
    when = _fresh(timestamp, now)
    offered = [part.partition(",")[2] for part in header.split() if part.startswith("v1,")]
    for secret in secrets:
        expected = signing.signature([secret], webhook_id, when, body).partition(",")[2]
        if any(hmac.compare_digest(expected, candidate) for candidate in offered):
            return Verified(event_id=webhook_id)
    raise Refused("bad_signature", "no webhook-signature matches the trigger's secret")


def github(headers: Mapping[str, str], body: bytes, secrets: list[str], now: float) -> Verified:
    header = headers.get("x-hub-signature-256", "")
    scheme, _, digest = header.partition("=")
    if scheme != "sha256" or not digest:
        raise Refused("bad_signature", "X-Hub-Signature-256: sha256=<hex> is required")
    for secret in secrets:
        if hmac.compare_digest(_hmac(secret.encode(), body).hex(), digest.lower()):
            return Verified(event_id=headers.get("x-github-delivery") or None)
    raise Refused("bad_signature", "X-Hub-Signature-256 does not match the trigger's secret")


def stripe(headers: Mapping[str, str], body: bytes, secrets: list[str], now: float) -> Verified:
    fields: dict[str, list[str]] = {}
    for item in headers.get("stripe-signature", "").split(","):
        name, _, value = item.strip().partition("=")
        fields.setdefault(name, []).append(value)
    timestamps, offered = fields.get("t", []), fields.get("v1", [])
    if len(timestamps) != 1 or not offered:
        raise Refused("bad_signature", "Stripe-Signature: t=<timestamp>,v1=<hex> is required")
    # The signature first: a forged header is a bad signature whatever its timestamp says.
    signed = timestamps[0].encode() + b"." + body
    for secret in secrets:
        expected = _hmac(secret.encode(), signed).hex()
        if any(hmac.compare_digest(expected, candidate) for candidate in offered):
            _fresh(timestamps[0], now)
            return Verified()
    raise Refused("bad_signature", "no v1 signature in Stripe-Signature matches the trigger's secret")


def _digest(value: str) -> bytes | None:
    """The raw bytes of a hex or base64 digest, or None."""
    value = value.strip().removeprefix("sha256=")
    try:
        return bytes.fromhex(value)
    except ValueError:
        pass
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def hmac_sha256(
    headers: Mapping[str, str], body: bytes, secrets: list[str], now: float, *, header: str
) -> Verified:
    offered = _digest(headers.get(header.lower(), ""))
    if not offered:
        raise Refused("bad_signature", f"{header}: the hex or base64 HMAC-SHA256 of the body is required")
    for secret in secrets:
        if hmac.compare_digest(_hmac(secret.encode(), body), offered):
            return Verified()
    raise Refused("bad_signature", f"{header} does not match the trigger's secret")


def verify(
    scheme: Scheme,
    headers: Mapping[str, str],
    body: bytes,
    secrets: list[str],
    now: float,
    *,
    signature_header: str | None = None,
) -> Verified:
    """Verified, or Refused. `headers` have lower-case names."""
    if not secrets:
        raise Refused("bad_signature", "the trigger has no secret")
    if scheme == "standard-webhooks":
        return standard_webhooks(headers, body, secrets, now)
    if scheme == "github":
        return github(headers, body, secrets, now)
    if scheme == "stripe":
        return stripe(headers, body, secrets, now)
    return hmac_sha256(headers, body, secrets, now, header=signature_header or "x-signature")


def new_secret(scheme: Scheme) -> str:
    """A secret for a trigger that was given none: Standard Webhooks' `whsec_` shape for standard-webhooks
    and stripe (Stripe's own secrets look the same), 32 random bytes as hex for the others."""
    if scheme in ("standard-webhooks", "stripe"):
        return signing.new_secret()
    import secrets as random

    return random.token_hex(32)
