"""Environment is validated once, and a missing variable is named rather than defaulted."""

import pytest

from stepwise.core import config
from stepwise.local.stack import local_api_keys


@pytest.fixture(autouse=True)
def _fresh() -> None:
    config.reset()


def test_a_missing_table_variable_fails_fast_with_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("API_KEYS_TABLE", "AGENTS_TABLE", "SESSIONS_TABLE", "RUNS_TABLE", "RUN_EVENTS_TABLE"):
        monkeypatch.setenv(name, f"{name.lower()}-x")
    monkeypatch.delenv("RUNS_TABLE")
    with pytest.raises(config.ConfigError, match="RUNS_TABLE"):
        config.tables()


def test_runtime_defaults_and_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STEPWISE_MODEL", raising=False)
    monkeypatch.delenv("STEPWISE_EVENTS_TTL_DAYS", raising=False)
    assert config.models().default_model == "scripted" and config.runtime().events_ttl_days == 90
    config.reset()
    monkeypatch.setenv("STEPWISE_EVENTS_TTL_DAYS", "0")
    with pytest.raises(config.ConfigError, match="STEPWISE_EVENTS_TTL_DAYS"):
        config.runtime()


def test_local_api_keys_parse_extra_tenants() -> None:
    assert local_api_keys({}) == {"sk-local-dev": "local"}
    assert local_api_keys({"STEPWISE_LOCAL_API_KEY": "k0", "STEPWISE_LOCAL_API_KEYS": "k1:t1, k2:t2"}) == {
        "k0": "local",
        "k1": "t1",
        "k2": "t2",
    }
    with pytest.raises(ValueError, match="key:tenant"):
        local_api_keys({"STEPWISE_LOCAL_API_KEYS": "nocolon"})
