"""Environment, validated once per cold start. A missing variable fails fast with its name, rather
than defaulting to something that only breaks later."""

from __future__ import annotations

import os
from functools import cache
from typing import TypeVar

from pydantic import BaseModel, Field, ValidationError

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


class Runtime(BaseModel):
    events_ttl_days: int = Field(default=90, ge=1, alias="STEPWISE_EVENTS_TTL_DAYS")
    # A session's messages expire like run events unless told otherwise; its shell never does.
    messages_ttl_days: int | None = Field(default=None, ge=1, alias="STEPWISE_MESSAGES_TTL_DAYS")
    default_model: str = Field(default="scripted", min_length=1, alias="STEPWISE_MODEL")

    @property
    def message_retention_days(self) -> int:
        return self.messages_ttl_days or self.events_ttl_days


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
def api_targets() -> ApiTargets:
    return _load(ApiTargets)


@cache
def settings_key() -> SettingsKey:
    return _load(SettingsKey)


def reset() -> None:
    """Forget the cached environment (the local stack and tests set it after import)."""
    tables.cache_clear()
    runtime.cache_clear()
    api_targets.cache_clear()
    machine.cache_clear()
    scheduling.cache_clear()
    settings_key.cache_clear()
