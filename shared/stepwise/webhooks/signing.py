"""Standard Webhooks signatures (https://www.standardwebhooks.com): a `whsec_` secret is base64 of the
key bytes; `webhook-signature` is `v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`, one per key,
space-separated, so a receiver holding either secret of a rotation verifies."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

PREFIX = "whsec_"
KEY_BYTES = 32  # the HMAC-SHA256 block's worth of key; Standard Webhooks asks for 24 to 64


def new_secret() -> str:
    return PREFIX + base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()


def _key(secret: str) -> bytes:
    if not secret.startswith(PREFIX):
        raise ValueError("a webhook secret starts with whsec_")
    return base64.b64decode(secret.removeprefix(PREFIX))


def signature(secrets_: list[str], webhook_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` header of `body` sent as `webhook_id` at `timestamp` (epoch seconds)."""
    if not secrets_:
        raise ValueError("no secret to sign with")
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    return " ".join(
        "v1," + base64.b64encode(hmac.new(_key(s), signed, hashlib.sha256).digest()).decode()
        for s in secrets_
    )


def headers(secrets_: list[str], webhook_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secrets_, webhook_id, timestamp, body),
    }
