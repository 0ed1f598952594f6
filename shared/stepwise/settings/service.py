"""What the API does with settings: write encrypted, list names, delete. Nothing here returns a value.

A setting is the tenant's, or (for a provider's key only) one agent's: `agent_id` stores it under the
agent's prefix (stepwise.settings.models.stored_key), so its ciphertext is bound to that agent too."""

from __future__ import annotations

from stepwise.core.errors import NotFound, Unprocessable
from stepwise.core.schema import utcnow
from stepwise.settings import crypto, store
from stepwise.settings.accessor import invalidate
from stepwise.settings.models import SettingInfo, is_provider_key, stored_key


def _for_agent(tenant_id: str, key: str, agent_id: str | None) -> str:
    """The stored key, checked: an agent's setting is a provider's key of an agent of the tenant."""
    if agent_id is None:
        return key
    if not is_provider_key(key):
        raise Unprocessable(
            f"only a provider's key (providers.<name>.api_key) can be an agent's own setting, not {key}",
            code="validation_error",
            details=[{"loc": ["query", "agent_id"], "msg": "not for this key", "type": "value_error"}],
        )
    from stepwise.runs.ports import stores

    stores().agents.get(tenant_id, agent_id)  # another tenant's agent is as unknown as none: 404
    return stored_key(key, agent_id)


def put(tenant_id: str, key: str, value: str, *, agent_id: str | None = None) -> SettingInfo:
    """Create or replace the setting. Tools in other warm Lambdas see it within the accessor's TTL."""
    stored = _for_agent(tenant_id, key, agent_id)
    parts, key_arn = crypto.encrypt(tenant_id, stored, value)
    info = SettingInfo(key=key, agent_id=agent_id, updated_at=utcnow())
    store.save(tenant_id, stored, parts, key_arn, info.updated_at)
    invalidate(tenant_id)
    return info


def list_all(tenant_id: str) -> list[SettingInfo]:
    """The tenant's settings, by name (an agent's own after the tenant's of the same name)."""
    return store.list_all(tenant_id)


def delete(tenant_id: str, key: str, *, agent_id: str | None = None) -> None:
    if not store.delete(tenant_id, _for_agent(tenant_id, key, agent_id)):
        raise NotFound(f"no setting named {key}", code="setting_not_found")
    invalidate(tenant_id)


def forget_agent(tenant_id: str, agent_id: str) -> None:
    """The agent's own settings go with it (its provider keys)."""
    if store.delete_prefix(tenant_id, stored_key("", agent_id)):
        invalidate(tenant_id)
