"""Whose key pays for a model call: the agent's own `providers.<name>.api_key`, else the tenant's, else
the deployment's (stepwise.core.credentials), unless the operator turned that off with
`STEPWISE_REQUIRE_TENANT_KEYS=true`; then a call with neither fails `provider_key_missing`.

No DynamoDB request per step for this: both settings are read through the settings cache of the
function (stepwise.settings.accessor, TTL_SECONDS), the one the tools already read through, which
remembers a value and the fact that a key is unset alike. A warm Step function reads the two items (and
KMS for a set one) about once a minute per tenant, agent and provider; a key put or deleted through the
API reaches it within that time.

`ProviderCredentials.owner` is what a usage line records as `key_owner`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from stepwise.core import config
from stepwise.core.errors import ProviderKeyMissing
from stepwise.settings.accessor import cached_setting
from stepwise.settings.models import provider_key, stored_key

KeyOwner = Literal["agent", "tenant", "deployment"]


@dataclass(frozen=True)
class ProviderCredentials:
    """The key a model call sends (None: the deployment's, which the model client finds itself) and
    whose it is."""

    api_key: str | None
    owner: KeyOwner

    def __repr__(self) -> str:  # never a key in a log line or a traceback's locals
        return f"ProviderCredentials(owner={self.owner!r})"


DEPLOYMENT = ProviderCredentials(api_key=None, owner="deployment")


def resolve(tenant_id: str, agent_id: str, provider: str | None) -> ProviderCredentials:
    """The key for a call of `provider` (litellm's name; None or the scripted model: no key at all)."""
    if provider is None or provider == config.SCRIPTED_MODEL:
        return DEPLOYMENT
    key = provider_key(provider)
    own = cached_setting(tenant_id, stored_key(key, agent_id))
    if own is not None:
        return ProviderCredentials(api_key=own, owner="agent")
    tenants = cached_setting(tenant_id, key)
    if tenants is not None:
        return ProviderCredentials(api_key=tenants, owner="tenant")
    if config.kill_switch().require_tenant_keys:
        raise ProviderKeyMissing(
            f"this deployment requires your own {provider} key: set the setting {key} (for the tenant, "
            "or for the agent with ?agent_id=)"
        )
    return DEPLOYMENT


def key_of(tenant_id: str | None, agent_id: str | None, owner: str, provider: str) -> str | None:
    """The key of one owner exactly (a circuit's probe must try the key that was refused)."""
    if owner == "deployment" or tenant_id is None:
        return None
    stored = stored_key(provider_key(provider), agent_id if owner == "agent" else None)
    return cached_setting(tenant_id, stored)
