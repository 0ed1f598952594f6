"""What the API does with settings: write encrypted, list names, delete. Nothing here returns a value."""

from __future__ import annotations

from stepwise.core.errors import NotFound
from stepwise.core.schema import utcnow
from stepwise.settings import crypto, store
from stepwise.settings.accessor import invalidate
from stepwise.settings.models import SettingInfo


def put(tenant_id: str, key: str, value: str) -> SettingInfo:
    """Create or replace the setting. Tools in other warm Lambdas see it within the accessor's TTL."""
    parts, key_arn = crypto.encrypt(tenant_id, key, value)
    info = SettingInfo(key=key, updated_at=utcnow())
    store.save(tenant_id, key, parts, key_arn, info.updated_at)
    invalidate(tenant_id)
    return info


def list_all(tenant_id: str) -> list[SettingInfo]:
    """The tenant's settings, by name."""
    return store.list_all(tenant_id)


def delete(tenant_id: str, key: str) -> None:
    if not store.delete(tenant_id, key):
        raise NotFound(f"no setting named {key}", code="setting_not_found")
    invalidate(tenant_id)
