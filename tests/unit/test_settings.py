"""Settings without AWS: which key names are accepted, what a value may be, the encryption context of
each ciphertext part, and the accessor's cache (TTL on an injected clock, invalidation, bounds)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from stepwise.settings.accessor import SettingsCache, TenantSettings
from stepwise.settings.crypto import context
from stepwise.settings.models import MAX_VALUE_CHARS, SettingInfo, SettingPut, is_valid_key


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Store:
    """An in-memory loader that counts reads, standing in for DynamoDB + KMS."""

    def __init__(self, values: dict[tuple[str, str], str] | None = None) -> None:
        self.values = dict(values or {})
        self.reads: list[tuple[str, str]] = []

    def __call__(self, tenant_id: str, key: str) -> str | None:
        self.reads.append((tenant_id, key))
        return self.values.get((tenant_id, key))


# --- Key names and values -----------------------------------------------------------------------


@pytest.mark.parametrize("key", ["EXA_API_KEY", "A", "DATABASE_URL", "X1", "A_", "A" + "B" * 63])
def test_environment_style_names_are_keys(key: str) -> None:
    assert is_valid_key(key)


@pytest.mark.parametrize(
    "key",
    ["", "exa_api_key", "Exa_Api_Key", "1KEY", "_KEY", "KEY-NAME", "KEY NAME", "ÄKEY", "KEY\n", "A" * 65],
)
def test_other_names_are_not_keys(key: str) -> None:
    assert not is_valid_key(key)


def test_a_value_is_one_to_the_limit_of_characters() -> None:
    assert SettingPut(value="x").value == "x"
    assert len(SettingPut(value="é" * MAX_VALUE_CHARS).value) == MAX_VALUE_CHARS

    for bad in ({"value": ""}, {"value": "x" * (MAX_VALUE_CHARS + 1)}, {}, {"value": "x", "other": 1}):
        with pytest.raises(ValidationError):
            SettingPut.model_validate(bad)


def test_what_the_api_returns_about_a_setting_has_no_value_field() -> None:
    assert set(SettingInfo.model_fields) == {"key", "agent_id", "updated_at"}


# --- Encryption context ---------------------------------------------------------------------------


def test_the_context_binds_tenant_and_name_and_for_long_values_the_part() -> None:
    assert context("acme", "EXA_API_KEY") == {"tenant_id": "acme", "key": "EXA_API_KEY"}
    assert context("acme", "PEM", 1, 3) == {"tenant_id": "acme", "key": "PEM", "part": "2/3"}
    assert context("acme", "PEM", 0, 3) != context("acme", "PEM", 0, 2)


# --- The cache ------------------------------------------------------------------------------------


def test_a_value_is_served_from_memory_until_its_ttl_passes() -> None:
    # Given a setting read once
    clock, store = Clock(), Store({("acme", "EXA_API_KEY"): "v1"})
    cache = SettingsCache(store, ttl=60, clock=clock)
    assert cache.get("acme", "EXA_API_KEY") == "v1"

    # When it changes underneath, reads within the TTL still see the cached value without a load
    store.values[("acme", "EXA_API_KEY")] = "v2"
    clock.now += 59.9
    assert cache.get("acme", "EXA_API_KEY") == "v1"
    assert len(store.reads) == 1

    # Then once the TTL has passed the next read loads the new one, and caches it afresh
    clock.now += 0.1
    assert cache.get("acme", "EXA_API_KEY") == "v2"
    clock.now += 59
    assert cache.get("acme", "EXA_API_KEY") == "v2"
    assert len(store.reads) == 2


def test_an_unset_key_is_cached_as_unset() -> None:
    clock, store = Clock(), Store()
    cache = SettingsCache(store, ttl=60, clock=clock)

    assert cache.get("acme", "MISSING") is None
    assert cache.get("acme", "MISSING") is None
    assert store.reads == [("acme", "MISSING")]

    store.values[("acme", "MISSING")] = "now set"
    clock.now += 60
    assert cache.get("acme", "MISSING") == "now set"


def test_invalidate_forgets_one_tenant_only() -> None:
    clock, store = Clock(), Store({("acme", "K"): "a1", ("globex", "K"): "g1"})
    cache = SettingsCache(store, ttl=60, clock=clock)
    cache.get("acme", "K"), cache.get("globex", "K")
    store.values = {("acme", "K"): "a2", ("globex", "K"): "g2"}

    cache.invalidate("acme")

    assert cache.get("acme", "K") == "a2"
    assert cache.get("globex", "K") == "g1"  # still cached
    assert store.reads.count(("acme", "K")) == 2 and store.reads.count(("globex", "K")) == 1


def test_tenants_are_separate_namespaces() -> None:
    cache = SettingsCache(Store({("acme", "K"): "acme's", ("globex", "K"): "globex's"}), clock=Clock())

    assert TenantSettings("acme", cache).get("K") == "acme's"
    assert TenantSettings("globex", cache).get("K") == "globex's"
    assert TenantSettings("initech", cache).get("K") is None


def test_a_load_that_raced_an_invalidation_is_not_kept() -> None:
    # Given a load that is still running when a write invalidates the tenant
    clock = Clock()
    values = {"K": "old"}
    cache: SettingsCache

    def load(tenant_id: str, key: str) -> str | None:
        seen = values[key]
        values[key] = "new"
        cache.invalidate(tenant_id)  # the write lands while this load is in flight
        return seen

    cache = SettingsCache(load, ttl=60, clock=clock)

    # When the racing read finishes, its answer is returned but not cached
    assert cache.get("acme", "K") == "old"

    # Then the next read loads again instead of serving the stale value for a whole TTL
    assert cache.get("acme", "K") == "new"


def test_the_least_recently_read_tenant_is_forgotten_beyond_the_bound() -> None:
    store = Store({("t1", "K"): "1", ("t2", "K"): "2", ("t3", "K"): "3"})
    cache = SettingsCache(store, clock=Clock(), max_tenants=2)
    cache.get("t1", "K"), cache.get("t2", "K")
    cache.get("t1", "K")  # t1 is now the most recent

    cache.get("t3", "K")  # evicts t2
    cache.get("t1", "K")
    cache.get("t2", "K")

    assert store.reads == [("t1", "K"), ("t2", "K"), ("t3", "K"), ("t2", "K")]


def test_a_name_that_cannot_be_a_key_is_unset_without_a_read() -> None:
    store = Store({("acme", "lower"): "never stored by the API"})
    settings = TenantSettings("acme", SettingsCache(store, clock=Clock()))

    assert settings.get("lower") is None
    assert settings.get("../OTHER") is None
    assert store.reads == []
