"""Settings, one item per tenant and key, holding only KMS ciphertext (stepwise.settings.crypto)."""

from __future__ import annotations

from datetime import datetime

from pynamodb.exceptions import DeleteError, DoesNotExist

from stepwise.core.tables import SettingItem, bind, condition_failed
from stepwise.settings.models import SettingInfo, parse_stored


def save(tenant_id: str, key: str, ciphertext: list[bytes], kms_key_id: str, updated_at: datetime) -> None:
    bind()
    SettingItem(tenant_id, key, ciphertext=ciphertext, kms_key_id=kms_key_id, updated_at=updated_at).save()


def ciphertext(tenant_id: str, key: str) -> list[bytes] | None:
    """The stored ciphertext parts, or None when the tenant has no such setting."""
    bind()
    try:
        item = SettingItem.get(tenant_id, key, consistent_read=True, attributes_to_get=["ciphertext"])
    except DoesNotExist:
        return None
    return [bytes(part) for part in item.ciphertext]


def list_all(tenant_id: str) -> list[SettingInfo]:
    """The tenant's settings by name; the ciphertext is not even read."""
    bind()
    items = SettingItem.query(tenant_id, attributes_to_get=["key", "updated_at"])
    listed = []
    for item in items:
        key, agent_id = parse_stored(item.key)
        listed.append(SettingInfo(key=key, agent_id=agent_id, updated_at=item.updated_at))
    return listed


def delete(tenant_id: str, key: str) -> bool:
    """Whether there was such a setting to delete."""
    bind()
    try:
        SettingItem(tenant_id, key).delete(condition=SettingItem.key.exists())
    except DeleteError as exc:
        if condition_failed(exc):
            return False
        raise
    return True


def delete_prefix(tenant_id: str, prefix: str) -> int:
    """Delete every setting of the tenant whose stored key starts with `prefix` (an agent's own)."""
    bind()
    gone = 0
    for item in SettingItem.query(tenant_id, SettingItem.key.startswith(prefix), attributes_to_get=["key"]):
        SettingItem(tenant_id, item.key).delete()
        gone += 1
    return gone
