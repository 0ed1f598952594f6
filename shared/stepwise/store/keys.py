"""API keys: stored as SHA-256 hashes, never in the clear. A key is shown once, at creation."""

from __future__ import annotations

import hashlib
import secrets

from pynamodb.exceptions import DoesNotExist

from stepwise.core.ids import InvalidTenant, valid_tenant
from stepwise.core.schema import utcnow
from stepwise.core.tables import ApiKeyItem, bind

KEY_PREFIX = "sw_"  # recognizable in logs and by secret scanners


def hash_key(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def store_key(api_key: str, tenant_id: str, name: str | None = None) -> None:
    """Register a key for a tenant (idempotent for the same key and tenant); InvalidTenant for a tenant
    id that could not start a partition key. `name` is what records of actions taken with it show."""
    valid_tenant(tenant_id)
    bind()
    ApiKeyItem(
        hash_key(api_key), tenant_id=tenant_id, key_prefix=api_key[:8], created_at=utcnow(), name=name or None
    ).save()


def tenant_for(api_key: str) -> str | None:
    """The tenant a key belongs to, or None for an unknown or revoked key, or one stored for a tenant id
    that is not valid (written around store_key: it must not reach a partition key)."""
    found = owner(api_key)
    return found[0] if found else None


def owner(api_key: str) -> tuple[str, str] | None:
    """The tenant a key belongs to and the key's name (its prefix, `sw_abcde…`, when it was given none),
    or None as for tenant_for."""
    bind()
    try:
        item = ApiKeyItem.get(hash_key(api_key), consistent_read=False)
    except DoesNotExist:
        return None
    if item.revoked_at is not None:
        return None
    try:
        return valid_tenant(item.tenant_id), item.name or f"{item.key_prefix}…"
    except InvalidTenant:
        return None
