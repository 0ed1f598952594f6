"""The tenant's webhook signing secret: made and shown once by `POST /v1/webhooks/secret`, kept only as
KMS ciphertext, decrypted by the delivery worker alone.

Rotating keeps the replaced secret signing beside the new one for PREVIOUS_VALID, so a receiver that
still holds the old secret keeps verifying until it has switched (each delivery then carries two
signatures, which Standard Webhooks receivers accept)."""

from __future__ import annotations

from datetime import timedelta

from stepwise.core.errors import Unprocessable
from stepwise.core.schema import utcnow
from stepwise.settings import crypto
from stepwise.webhooks import signing, store
from stepwise.webhooks.models import WebhookSecret

PREVIOUS_VALID = timedelta(hours=24)
# The name the secret is encrypted under (its KMS encryption context): no setting can have it, as
# setting keys are upper case, so no setting's ciphertext decrypts as the webhook secret.
CONTEXT_KEY = "webhook_secret"


def rotate(tenant_id: str) -> WebhookSecret:
    """A new secret for the tenant, returned this once."""
    secret = signing.new_secret()
    parts, key_arn = crypto.encrypt(tenant_id, CONTEXT_KEY, secret)
    stored = store.rotate_secret(tenant_id, parts, key_arn, PREVIOUS_VALID)
    return WebhookSecret(
        secret=secret, created_at=stored.created_at, previous_valid_until=stored.previous_until
    )


def signing_secrets(tenant_id: str) -> list[str]:
    """The secrets a delivery is signed with now: the current one, and the one it replaced while that
    is still valid. Empty when the tenant has none."""
    stored = store.secret(tenant_id)
    if stored is None:
        return []
    found = [crypto.decrypt(tenant_id, CONTEXT_KEY, stored.current)]
    if stored.previous and stored.previous_until and stored.previous_until > utcnow():
        found.append(crypto.decrypt(tenant_id, CONTEXT_KEY, stored.previous))
    return found


def require(tenant_id: str) -> None:
    """422 `webhook_secret_missing` unless the tenant has a secret: a webhook named before there is
    one could only ever be delivered unsigned, and it never is."""
    if not store.has_secret(tenant_id):
        raise Unprocessable(
            "deliveries are signed with the tenant's webhook secret, and there is none yet: "
            "create it with POST /v1/webhooks/secret first",
            code="webhook_secret_missing",
        )
