"""Environment, validated once per cold start. A missing variable fails fast with its name, rather
than defaulting to something that only breaks later."""

from __future__ import annotations

import os
from fnmatch import fnmatchcase
from functools import cache
from typing import Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError, field_validator

T = TypeVar("T", bound=BaseModel)


class ConfigError(RuntimeError):
    pass


class Tables(BaseModel):
    api_keys: str = Field(alias="API_KEYS_TABLE")
    agents: str = Field(alias="AGENTS_TABLE")
    sessions: str = Field(alias="SESSIONS_TABLE")
    runs: str = Field(alias="RUNS_TABLE")
    run_events: str = Field(alias="RUN_EVENTS_TABLE")
    followers: str = Field(alias="FOLLOWERS_TABLE")
    interactions: str = Field(alias="INTERACTIONS_TABLE")
    effects: str = Field(alias="EFFECTS_TABLE")
    schedules: str = Field(alias="SCHEDULES_TABLE")
    settings: str = Field(alias="SETTINGS_TABLE")
    mcp_auth: str = Field(alias="MCP_AUTH_TABLE")
    idempotency: str = Field(alias="IDEMPOTENCY_TABLE")
    quotas: str = Field(alias="QUOTAS_TABLE")
    webhooks: str = Field(alias="WEBHOOKS_TABLE")
    memories: str = Field(alias="MEMORIES_TABLE")


class Runtime(BaseModel):
    events_ttl_days: int = Field(default=90, ge=1, alias="STEPWISE_EVENTS_TTL_DAYS")
    # A session's messages expire like run events unless told otherwise; its shell never does.
    messages_ttl_days: int | None = Field(default=None, ge=1, alias="STEPWISE_MESSAGES_TTL_DAYS")
    default_model: str = Field(default="scripted", min_length=1, alias="STEPWISE_MODEL")

    # The operator's bound on the models tenants may name: comma-separated glob patterns.
    allowed_models: tuple[str, ...] = Field(default=("*",), alias="STEPWISE_ALLOWED_MODELS")

    @field_validator("allowed_models", mode="before")
    @classmethod
    def _patterns(cls, value: object) -> object:
        if isinstance(value, str):
            patterns = tuple(p.strip() for p in value.split(",") if p.strip())
            if not patterns:
                raise ValueError("STEPWISE_ALLOWED_MODELS needs at least one pattern ('*' allows any model)")
            return patterns
        return value

    @property
    def message_retention_days(self) -> int:
        return self.messages_ttl_days or self.events_ttl_days

    def model_allowed(self, model: str) -> bool:
        """Case-sensitive, like provider model ids: `bedrock/*` allows every Bedrock model."""
        return any(fnmatchcase(model, pattern) for pattern in self.allowed_models)


class Quotas(BaseModel):
    """Per-tenant limits; each is counted on a counter item with a conditional update (store.quotas)."""

    max_active_runs: int = Field(default=100, ge=1, alias="STEPWISE_MAX_ACTIVE_RUNS")
    max_schedules: int = Field(default=100, ge=1, alias="STEPWISE_MAX_SCHEDULES")


class Secrets(BaseModel):
    """Where deployment secrets come from (stepwise.core.credentials): the environment, or Secrets Manager."""

    source: Literal["env", "aws"] = Field(default="env", alias="STEPWISE_SECRETS")


class Machine(BaseModel):
    """The agent-run state machine: the API starts runs on it, a finishing run starts the next queued one."""

    state_machine_arn: str = Field(alias="STATE_MACHINE_ARN")

    def execution_arn(self, run_id: str) -> str:
        """Executions are named after their run."""
        return f"{self.state_machine_arn.replace(':stateMachine:', ':execution:', 1)}:{run_id}"


class SettingsKey(BaseModel):
    """The KMS key that encrypts tenants' settings (the API encrypts with it, tools decrypt)."""

    key_id: str = Field(min_length=1, alias="SETTINGS_KEY_ID")


class Scheduling(BaseModel):
    """What the API needs to create a schedule's twin in EventBridge Scheduler: where it delivers,
    as whom, in which group."""

    function_arn: str = Field(alias="SCHEDULER_FUNCTION_ARN")
    role_arn: str = Field(alias="SCHEDULER_ROLE_ARN")
    group: str = Field(alias="SCHEDULE_GROUP")
    # Where Scheduler sends a delivery it could not make within its retry policy.
    dead_letter_arn: str = Field(alias="SCHEDULE_DLQ_ARN")


class WebhookQueue(BaseModel):
    """Where run events that a webhook asks for are queued for WebhookFunction to deliver."""

    queue_url: str = Field(min_length=1, alias="WEBHOOK_QUEUE_URL")


class ApiTargets(BaseModel):
    """What only the API function needs: where sync calls go."""

    step_function: str = Field(alias="STEP_FUNCTION")


def _load(model: type[T]) -> T:
    try:
        return model.model_validate(dict(os.environ))
    except ValidationError as exc:
        missing = [str(e["loc"][0]) for e in exc.errors()]
        raise ConfigError(f"invalid or missing environment: {', '.join(missing)}") from exc


@cache
def tables() -> Tables:
    return _load(Tables)


@cache
def runtime() -> Runtime:
    return _load(Runtime)


@cache
def scheduling() -> Scheduling:
    return _load(Scheduling)


@cache
def machine() -> Machine:
    return _load(Machine)


@cache
def webhook_queue() -> WebhookQueue:
    return _load(WebhookQueue)


@cache
def api_targets() -> ApiTargets:
    return _load(ApiTargets)


@cache
def settings_key() -> SettingsKey:
    return _load(SettingsKey)


@cache
def quotas() -> Quotas:
    return _load(Quotas)


@cache
def secrets() -> Secrets:
    return _load(Secrets)


def reset() -> None:
    """Forget the cached environment (the local stack and tests set it after import)."""
    tables.cache_clear()
    runtime.cache_clear()
    api_targets.cache_clear()
    machine.cache_clear()
    scheduling.cache_clear()
    settings_key.cache_clear()
    quotas.cache_clear()
    secrets.cache_clear()
    webhook_queue.cache_clear()
