"""The one way tools read settings: `tenant_settings(tenant_id).get(key)`, cached per warm Lambda.

Entries (a value, or the fact that a key is unset) live for `TTL_SECONDS` after they were fetched. A
value changed or deleted through the API therefore reaches a warm StepFunction within that time,
not at once: the price of reading DynamoDB and KMS about once a minute per tenant and key instead of on
every tool call. `invalidate` drops a tenant's entries in this process (the API's writes call it).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from stepwise.settings import crypto, store
from stepwise.settings.models import is_valid_key

TTL_SECONDS = 60.0
MAX_TENANTS = 256  # a warm Lambda serves many tenants; the least recently read are forgotten first

Loader = Callable[[str, str], str | None]


class SettingsCache:
    """Decrypted values by tenant and key, each kept for `ttl` seconds of `clock`."""

    def __init__(
        self,
        load: Loader,
        *,
        ttl: float = TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        max_tenants: int = MAX_TENANTS,
    ) -> None:
        self._load = load
        self._ttl = ttl
        self._clock = clock
        self._max_tenants = max_tenants
        self._tenants: OrderedDict[str, dict[str, tuple[float, str | None]]] = OrderedDict()
        self._generation = 0  # bumped by invalidate, so a load that raced it is not stored
        self._lock = threading.Lock()

    def get(self, tenant_id: str, key: str) -> str | None:
        now = self._clock()
        with self._lock:
            entries = self._tenants.get(tenant_id)
            if entries is not None:
                self._tenants.move_to_end(tenant_id)
                hit = entries.get(key)
                if hit is not None and now - hit[0] < self._ttl:
                    return hit[1]
            generation = self._generation
        value = self._load(tenant_id, key)  # outside the lock: other tenants' reads need not wait on KMS
        with self._lock:
            if generation == self._generation:
                self._tenants.setdefault(tenant_id, {})[key] = (now, value)
                self._tenants.move_to_end(tenant_id)
                while len(self._tenants) > self._max_tenants:
                    self._tenants.popitem(last=False)
        return value

    def invalidate(self, tenant_id: str) -> None:
        with self._lock:
            self._tenants.pop(tenant_id, None)
            self._generation += 1


@dataclass(frozen=True)
class TenantSettings:
    """One tenant's settings (stepwise.tools.builtin.Settings). The tenant is fixed when a tool is given
    this object, so no argument of the model's can reach another tenant's settings."""

    tenant_id: str
    cache: SettingsCache

    def get(self, key: str) -> str | None:
        if not is_valid_key(key):
            return None  # no such setting can exist
        return self.cache.get(self.tenant_id, key)


def load(tenant_id: str, key: str) -> str | None:
    """A setting read from DynamoDB and decrypted, uncached; None when it is unset."""
    parts = store.ciphertext(tenant_id, key)
    return None if parts is None else crypto.decrypt(tenant_id, key, parts)


@cache
def _shared() -> SettingsCache:
    return SettingsCache(load)


def tenant_settings(tenant_id: str) -> TenantSettings:
    """The tenant's settings, read through this process's cache."""
    return TenantSettings(tenant_id, _shared())


def cached_setting(tenant_id: str, stored: str) -> str | None:
    """A setting by its stored key (an agent's own included), through this process's cache."""
    return _shared().get(tenant_id, stored)


def invalidate(tenant_id: str) -> None:
    """Forget this process's cached settings of the tenant (after a write)."""
    _shared().invalidate(tenant_id)
