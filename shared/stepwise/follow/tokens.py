"""Follow URLs: signed like approval links (stepwise.approvals.links) under their own MAC context.

    fields = [1, tenant_id, run_id, after, expires_at as epoch seconds, nonce]

The nonce makes each URL single-use: the authorizer records it with a conditional write and refuses a
second connect with the same URL. Expiry is short (VALID_FOR) because the URL is a bearer credential.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from stepwise.approvals.links import ForgedLink, Secrets, seal, unseal
from stepwise.core.errors import Gone

VALID_FOR = timedelta(seconds=60)

_VERSION = 1
_CONTEXT = b"stepwise.follow-url."


class ExpiredFollowUrl(Gone):
    code = "follow_url_expired"


@dataclass(frozen=True)
class FollowClaims:
    tenant_id: str
    run_id: str
    after: int
    expires_at: datetime
    nonce: str


def new_claims(tenant_id: str, run_id: str, after: int, now: datetime) -> FollowClaims:
    # Rounded down: a URL may die up to a second early, never late.
    expires = datetime.fromtimestamp(int((now + VALID_FOR).timestamp()), UTC)
    return FollowClaims(tenant_id, run_id, after, expires, secrets.token_urlsafe(16))


def sign(claims: FollowClaims, secret: bytes) -> str:
    fields = [
        _VERSION,
        claims.tenant_id,
        claims.run_id,
        claims.after,
        int(claims.expires_at.timestamp()),
        claims.nonce,
    ]
    return seal(_CONTEXT, fields, secret)


def verify(token: str, secret: Secrets, now: datetime) -> FollowClaims:
    """The claims of a genuine, unexpired token; raises ForgedLink or ExpiredFollowUrl. Single use is
    the caller's job (stepwise.follow.service.admit)."""
    fields = unseal(_CONTEXT, token, secret)
    if len(fields) != 6 or fields[0] != _VERSION:
        raise ForgedLink("unknown payload version")
    _, tenant_id, run_id, after, expires, nonce = fields
    if not (
        all(isinstance(v, str) and v for v in (tenant_id, run_id, nonce))
        and type(after) is int
        and after >= 0
        and type(expires) is int
    ):
        raise ForgedLink("unexpected payload fields")
    claims = FollowClaims(tenant_id, run_id, after, datetime.fromtimestamp(expires, UTC), nonce)
    if now >= claims.expires_at:
        raise ExpiredFollowUrl("this follow URL has expired; ask for a new one")
    return claims
