"""Environment is validated once, and a missing variable is named rather than defaulted."""

import pytest

from stepwise.core import config, credentials
from stepwise_local.stack import local_api_keys


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


# --- Read on every call ---------------------------------------------------------------------------

PER_CALL = (
    config.Models,
    config.Compaction,
    config.Guards,
    config.Links,
    config.Channels,
    config.Follow,
    config.Storage,
    config.Providers,
    config.SecretVariables,
    config.Platform,
    config.Telemetry,
)


@pytest.fixture
def bare(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """None of the per-call models' variables set."""
    for model in PER_CALL:
        for field in model.model_fields.values():
            assert field.alias is not None
            monkeypatch.delenv(field.alias, raising=False)
    return monkeypatch


def test_unset_variables_mean_the_defaults_every_function_can_run_with(bare: pytest.MonkeyPatch) -> None:
    models, storage, follow = config.models(), config.storage(), config.follow()

    assert models.default_model == "scripted"
    assert models.summary_model is None and models.embedding_model is None
    assert config.compaction().context_window is None
    assert config.guards().allow_hosts == "" and not config.guards().allow_stdio_mcp
    assert config.links().public_url == "" and config.links().link_secret is None
    assert not config.channels().console_only and config.channels().approval_sender == ""
    assert follow.url is None and follow.api_endpoint is None
    assert storage.bucket is None and storage.local_s3_url is None and storage.sqlite_dir is None
    assert config.providers().exa_base_url is None
    assert config.platform().any_region == "us-east-1" and config.platform().function_name == ""
    assert not config.telemetry().exports


def test_a_per_call_accessor_sees_a_change_without_a_reset(bare: pytest.MonkeyPatch) -> None:
    bare.setenv("STEPWISE_MODEL", "openai/gpt-4o-mini")
    assert config.models().default_model == "openai/gpt-4o-mini"

    bare.setenv("STEPWISE_MODEL", "bedrock/amazon.nova-lite-v1:0")
    assert config.models().default_model == "bedrock/amazon.nova-lite-v1:0"


@pytest.mark.parametrize("value", ["0", "-5", "lots", "1.5"])
def test_a_bad_context_window_fails_naming_the_variable(bare: pytest.MonkeyPatch, value: str) -> None:
    bare.setenv("STEPWISE_CONTEXT_WINDOW", value)

    with pytest.raises(config.ConfigError, match="STEPWISE_CONTEXT_WINDOW"):
        config.compaction()


def test_a_bad_window_fails_compaction_only(bare: pytest.MonkeyPatch) -> None:
    bare.setenv("STEPWISE_CONTEXT_WINDOW", "lots")

    assert config.models().default_model == "scripted"
    with pytest.raises(config.ConfigError):
        config.compaction()


def test_an_error_names_the_variable_and_never_shows_its_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEPWISE_EVENTS_TTL_DAYS", "sk-not-a-number-but-a-secret")
    config.reset()  # a background thread of an earlier test in this process may have read it since

    with pytest.raises(config.ConfigError, match="STEPWISE_EVENTS_TTL_DAYS") as caught:
        config.runtime()
    assert "sk-not-a-number" not in str(caught.value)


def test_values_are_read_as_the_code_always_read_them(bare: pytest.MonkeyPatch) -> None:
    bare.setenv("STEPWISE_MODEL", "  ")
    bare.setenv("STEPWISE_CONTEXT_WINDOW", " 32000 ")
    bare.setenv("STEPWISE_ALLOW_STDIO_MCP", " True ")
    bare.setenv("STEPWISE_PUBLIC_URL", "https://api.example.com//")
    bare.setenv("STORAGE_BUCKET", " files ")
    bare.setenv("STEPWISE_SQLITE_DIR", "   ")
    bare.setenv("STEPWISE_CHANNELS", "console")
    bare.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    bare.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")

    assert config.models().default_model == "scripted"  # blank is unset
    assert config.compaction().context_window == 32_000
    assert config.guards().allow_stdio_mcp
    assert config.links().public_url == "https://api.example.com"
    assert (config.storage().bucket, config.storage().sqlite_dir) == ("files", None)
    assert config.channels().console_only
    assert config.platform().any_region == "eu-west-1"
    assert config.telemetry().exports

    bare.setenv("STEPWISE_ALLOW_STDIO_MCP", "yes")  # only "true" turns it on
    bare.setenv("OTEL_SDK_DISABLED", "TRUE")
    bare.setenv("AWS_REGION", "ap-south-1")
    assert not config.guards().allow_stdio_mcp
    assert not config.telemetry().exports
    assert config.platform().any_region == "ap-south-1"


def test_every_deployment_secret_has_its_value_and_its_arn_variable(bare: pytest.MonkeyPatch) -> None:
    for name in credentials.NAMES:
        bare.setenv(name, f"{name.lower()}-value")
        bare.setenv(name + credentials.ARN_SUFFIX, f"arn:{name}")

    variables = config.secret_variables()

    for name in credentials.NAMES:
        assert variables.get(name) == f"{name.lower()}-value"
        assert variables.get(name + credentials.ARN_SUFFIX) == f"arn:{name}"
    with pytest.raises(config.ConfigError, match="AWS_SECRET_ACCESS_KEY"):
        variables.get("AWS_SECRET_ACCESS_KEY")


def test_credential_values_are_those_of_credential_looking_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_PROVIDER_API_KEY", "a-long-enough-key")
    monkeypatch.setenv("SHORT_TOKEN", "short")
    monkeypatch.setenv("STEPWISE_GREETING", "a-long-harmless-value")

    values = config.credential_values(min_length=8)

    assert "a-long-enough-key" in values
    assert "short" not in values and "a-long-harmless-value" not in values


def test_a_model_names_the_variable_a_field_is_read_from() -> None:
    assert config.Guards.variable("allow_hosts") == "STEPWISE_ALLOW_HOSTS"
    with pytest.raises(KeyError):
        config.Guards.variable("allowed_hosts")
