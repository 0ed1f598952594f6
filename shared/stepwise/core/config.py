"""The environment, read here and nowhere else (tests/unit/test_config_only.py holds the code to it).

Each model is what one group of functions needs, so that a function never fails for a variable only
another one is given. A missing or invalid variable fails with its name, rather than defaulting to
something that only breaks later.

Two kinds of accessor. The cached ones (`tables()`, `runtime()`, ...) validate once per cold start;
`reset()` forgets them. The others validate on every call: tests and the local stack change those
variables after import, and the callers either read them once themselves (and have their own reset)
or cheaply, per use, as they always have.
"""

from __future__ import annotations

import os
import re
from fnmatch import fnmatchcase
from functools import cache
from typing import Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError, field_validator

SCRIPTED_MODEL = "scripted"  # stepwise.llm.client's built-in model, for agents and deployments that name none
ARN_SUFFIX = "_ARN"  # `<NAME>_ARN` names the Secrets Manager secret that holds `<NAME>` in AWS


class ConfigError(RuntimeError):
    pass


class Environment(BaseModel):
    """A group of variables; each field's alias is the variable it is read from."""

    @classmethod
    def variable(cls, field: str) -> str:
        """The variable `field` is read from: for messages that tell the operator what to set."""
        alias = cls.model_fields[field].alias
        if alias is None:
            raise TypeError(f"{cls.__name__}.{field} names no environment variable")
        return alias


T = TypeVar("T", bound=Environment)


def _blank_is_none(value: object) -> object:
    """Unset, for a variable set to nothing but whitespace (the template's empty parameters)."""
    return (value.strip() or None) if isinstance(value, str) else value


def _is_true(value: object) -> object:
    """Only "true" (any case, spaces around) turns a switch on; anything else leaves it off."""
    return value.strip().lower() == "true" if isinstance(value, str) else value


def _load(model: type[T]) -> T:
    try:
        return model.model_validate(dict(os.environ))
    except ValidationError as exc:
        # The variable and what is wrong with it; never its value (it may be a secret).
        problems = [f"{e['loc'][0]} ({e['msg']})" for e in exc.errors()]
        raise ConfigError(f"invalid or missing environment: {', '.join(problems)}") from exc


# --- Validated once per cold start; reset() forgets them ------------------------------------------


class Tables(Environment):
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
    evals: str = Field(alias="EVALS_TABLE")
    workflows: str = Field(alias="WORKFLOWS_TABLE")
    triggers: str = Field(alias="TRIGGERS_TABLE")


class Runtime(Environment):
    events_ttl_days: int = Field(default=90, ge=1, alias="STEPWISE_EVENTS_TTL_DAYS")
    # A session's messages expire like run events unless told otherwise; its shell never does.
    messages_ttl_days: int | None = Field(default=None, ge=1, alias="STEPWISE_MESSAGES_TTL_DAYS")
    # An effect entry must outlive every replay it guards (DECISIONS.md, "Effects").
    effects_ttl_days: int = Field(default=400, ge=1, alias="STEPWISE_EFFECTS_TTL_DAYS")

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


class Quotas(Environment):
    """Per-tenant limits; each is counted on a counter item with a conditional update (store.quotas)."""

    max_active_runs: int = Field(default=100, ge=1, alias="STEPWISE_MAX_ACTIVE_RUNS")
    max_schedules: int = Field(default=100, ge=1, alias="STEPWISE_MAX_SCHEDULES")
    max_workflows: int = Field(default=20, ge=1, alias="STEPWISE_MAX_WORKFLOWS")


class Secrets(Environment):
    """Where deployment secrets come from (stepwise.core.credentials): the environment, or Secrets Manager."""

    source: Literal["env", "aws"] = Field(default="env", alias="STEPWISE_SECRETS")


class Machine(Environment):
    """The agent-run state machine: the API starts runs on it, a finishing run starts the next queued one."""

    state_machine_arn: str = Field(alias="STATE_MACHINE_ARN")

    def execution_arn(self, run_id: str) -> str:
        """Executions are named after their run."""
        return f"{self.state_machine_arn.replace(':stateMachine:', ':execution:', 1)}:{run_id}"


class SettingsKey(Environment):
    """The KMS key that encrypts tenants' settings (the API encrypts with it, tools decrypt)."""

    key_id: str = Field(min_length=1, alias="SETTINGS_KEY_ID")


class Scheduling(Environment):
    """What the API needs to create a schedule's twin in EventBridge Scheduler: where it delivers,
    as whom, in which group."""

    function_arn: str = Field(alias="SCHEDULER_FUNCTION_ARN")
    role_arn: str = Field(alias="SCHEDULER_ROLE_ARN")
    group: str = Field(alias="SCHEDULE_GROUP")
    # Where Scheduler sends a delivery it could not make within its retry policy.
    dead_letter_arn: str = Field(alias="SCHEDULE_DLQ_ARN")


class WebhookQueue(Environment):
    """Where run events that a webhook asks for are queued for WebhookFunction to deliver."""

    queue_url: str = Field(min_length=1, alias="WEBHOOK_QUEUE_URL")


class TriggerQueue(Environment):
    """Where accepted trigger deliveries wait for TriggerWorkerFunction to start their runs
    (stepwise.triggers), and how many receives a delivery gets before it is failed."""

    queue_url: str = Field(min_length=1, alias="TRIGGER_QUEUE_URL")
    max_attempts: int = Field(default=5, ge=1, le=20, alias="TRIGGER_MAX_ATTEMPTS")
    deliveries_ttl_days: int = Field(default=30, ge=1, alias="TRIGGER_DELIVERIES_TTL_DAYS")


class InboundMail(Environment):
    """Email triggers through SES (stepwise.triggers.ses): the domain whose addresses tenants' `ses`
    triggers claim (SesInboundDomain; empty, no `ses` triggers), the SNS topic the receipt rule notifies
    (only its messages are taken), and where SNS signing certificates may come from: Amazon's SNS hosts
    over HTTPS. The last is a setting for the tests alone, which serve a test certificate on loopback."""

    ses_domain: str | None = Field(default=None, alias="STEPWISE_SES_DOMAIN")
    ses_topic_arn: str | None = Field(default=None, alias="STEPWISE_SES_TOPIC_ARN")
    sns_cert_url: str = Field(
        default=r"^https://sns\.[a-z0-9-]+\.amazonaws\.com(\.cn)?/[^?#]+\.pem$",
        alias="STEPWISE_SNS_CERT_URL_PATTERN",
    )

    _blank = field_validator("ses_domain", "ses_topic_arn", mode="before")(_blank_is_none)


class Gmail(Environment):
    """Gmail triggers (stepwise.triggers.gmail): the operator's Google OAuth client, the Pub/Sub topic
    mailboxes are watched on (GmailPubSubTopic) and the audience its push subscription's OIDC tokens
    carry. Google's endpoints are settings for the tests alone, which serve fakes on loopback."""

    client_id: str | None = Field(default=None, alias="GOOGLE_CLIENT_ID")
    pubsub_topic: str | None = Field(default=None, alias="GMAIL_PUBSUB_TOPIC")
    push_audience: str | None = Field(default=None, alias="GMAIL_PUSH_AUDIENCE")
    auth_url: str = Field(default="https://accounts.google.com/o/oauth2/v2/auth", alias="GOOGLE_AUTH_URL")
    token_url: str = Field(default="https://oauth2.googleapis.com/token", alias="GOOGLE_TOKEN_URL")
    api_url: str = Field(default="https://gmail.googleapis.com", alias="GMAIL_API_URL")
    certs_url: str = Field(default="https://www.googleapis.com/oauth2/v3/certs", alias="GOOGLE_CERTS_URL")

    _blank = field_validator("client_id", "pubsub_topic", "push_audience", mode="before")(_blank_is_none)


class EvalMachine(Environment):
    """The EvalRun state machine: the API starts an eval run's execution on it."""

    state_machine_arn: str = Field(alias="EVAL_STATE_MACHINE_ARN")


class WorkflowDeploy(Environment):
    """What compiles workflows into state machines: the workflow-node function their tasks call, the
    role their executions run as, and the name prefix the IAM policy scopes (`<prefix>-<workflow>-v<n>`)."""

    # Only the API deploys machines; other functions read the prefix alone (a cancel finds the execution).
    function_arn: str = Field(default="", alias="WORKFLOW_FUNCTION_ARN")
    role_arn: str = Field(default="", alias="WORKFLOW_ROLE_ARN")
    prefix: str = Field(default="stepwise-wf", alias="WORKFLOW_MACHINE_PREFIX")


class ApiTargets(Environment):
    """What only the API function needs: where sync calls go."""

    step_function: str = Field(alias="STEP_FUNCTION")


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
def eval_machine() -> EvalMachine:
    return _load(EvalMachine)


@cache
def webhook_queue() -> WebhookQueue:
    return _load(WebhookQueue)


@cache
def trigger_queue() -> TriggerQueue:
    return _load(TriggerQueue)


@cache
def api_targets() -> ApiTargets:
    return _load(ApiTargets)


@cache
def settings_key() -> SettingsKey:
    return _load(SettingsKey)


@cache
def workflow_deploy() -> WorkflowDeploy:
    return _load(WorkflowDeploy)


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
    eval_machine.cache_clear()
    workflow_deploy.cache_clear()
    scheduling.cache_clear()
    settings_key.cache_clear()
    quotas.cache_clear()
    secrets.cache_clear()
    webhook_queue.cache_clear()
    trigger_queue.cache_clear()


# --- Validated on every call ----------------------------------------------------------------------


class Models(Environment):
    """Which litellm models: the deployment's default for agents that name none (the API holds it to
    the allowed models, the Step function calls it), the light one that summarizes old conversation,
    and the one that embeds memories (only the Step function is given it). None of them can be
    invalid, so any function may read them."""

    default_model: str = Field(default=SCRIPTED_MODEL, alias="STEPWISE_MODEL")
    # Unset, the run's own model summarizes.
    summary_model: str | None = Field(default=None, alias="STEPWISE_SUMMARY_MODEL")
    # Unset, memories are searched by BM25 alone.
    embedding_model: str | None = Field(default=None, alias="STEPWISE_EMBEDDING_MODEL")
    # Describes images (web_scrape's, a tool's, an attachment's) for a model that cannot see them;
    # unset, such a model is told an image is there and not shown it.
    vision_model: str | None = Field(default=None, alias="STEPWISE_VISION_MODEL")

    @field_validator("default_model", mode="before")
    @classmethod
    def _default_model(cls, value: object) -> object:
        return (value.strip() or SCRIPTED_MODEL) if isinstance(value, str) else value


class Compaction(Environment):
    """An operator's bound on the context window, instead of the model's own (litellm's model map).
    A model of its own so that a bad value fails compaction, where it is used, and nothing else."""

    context_window: int | None = Field(default=None, gt=0, alias="STEPWISE_CONTEXT_WINDOW")

    @field_validator("context_window", mode="before")
    @classmethod
    def _window(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        text = value.strip()
        if not text:
            return None
        try:
            return int(text)
        except ValueError:
            raise ValueError("must be a positive integer") from None


class Guards(Environment):
    """What the operator exempts from the outbound guards (every function): the hosts and CIDRs the
    SSRF guard lets through (stepwise.net.ssrf parses them), and whether stdio MCP servers may run."""

    allow_hosts: str = Field(default="", alias="STEPWISE_ALLOW_HOSTS")
    allow_stdio_mcp: bool = Field(default=False, alias="STEPWISE_ALLOW_STDIO_MCP")

    _switch = field_validator("allow_stdio_mcp", mode="before")(_is_true)


class Links(Environment):
    """What the links the deployment hands out need: the API's public origin that approval links (and,
    when set, the OAuth callback) are under, and the secret that signs approval links and follow URLs:
    the value itself locally, a Secrets Manager ARN in AWS (stepwise.approvals.links)."""

    # Empty when unset: the Await function is given it; the API falls back to the request's host.
    public_url: str = Field(default="", alias="STEPWISE_PUBLIC_URL")
    link_secret: str | None = Field(default=None, alias="STEPWISE_LINK_SECRET")
    link_secret_arn: str | None = Field(default=None, alias="LINK_SECRET_ARN")

    @field_validator("public_url", mode="before")
    @classmethod
    def _no_trailing_slash(cls, value: object) -> object:
        return value.rstrip("/") if isinstance(value, str) else value


class Channels(Environment):
    """How the Await function tells humans: the SES identity approval mail is sent from (none, no
    mail), and `console` on the local stack, which prints what it would send."""

    channels: str = Field(default="", alias="STEPWISE_CHANNELS")
    approval_sender: str = Field(default="", alias="APPROVAL_SENDER")

    @property
    def console_only(self) -> bool:
        return self.channels == "console"


class Follow(Environment):
    """The WebSocket API that runs are followed over: the URL clients connect to (the Events function
    issues follow URLs under it) and the management endpoint every function posts events through.
    Unset, the feature that needs one says so when used."""

    url: str | None = Field(default=None, alias="STEPWISE_FOLLOW_URL")
    api_endpoint: str | None = Field(default=None, alias="FOLLOW_API_ENDPOINT")


class Storage(Environment):
    """Where files live: the bucket of attachments and storage tools (the API and Step functions), and,
    on the local stack only, its loopback S3 endpoint and the directory of tenants' SQLite databases."""

    bucket: str | None = Field(default=None, alias="STORAGE_BUCKET")
    local_s3_url: str | None = Field(default=None, alias="STEPWISE_LOCAL_S3_URL")
    sqlite_dir: str | None = Field(default=None, alias="STEPWISE_SQLITE_DIR")

    _blank = field_validator("bucket", "local_s3_url", "sqlite_dir", mode="before")(_blank_is_none)


class Providers(Environment):
    """Base URLs that replace the built-in tools' providers' (tests, proxies); the calls still go
    through the SSRF guard."""

    exa_base_url: str | None = Field(default=None, alias="EXA_BASE_URL")
    firecrawl_base_url: str | None = Field(default=None, alias="FIRECRAWL_BASE_URL")


class SecretVariables(Environment):
    """Where each deployment secret is (stepwise.core.credentials): locally the variable `<NAME>` holds
    the value, in AWS `<NAME>_ARN` names its Secrets Manager secret. Each function is given the ones
    it uses."""

    slack_signing_secret: str | None = Field(default=None, alias="SLACK_SIGNING_SECRET")
    slack_signing_secret_arn: str | None = Field(default=None, alias="SLACK_SIGNING_SECRET_ARN")
    openai_api_key: str | None = Field(default=None, alias="OPENAI_API_KEY")
    openai_api_key_arn: str | None = Field(default=None, alias="OPENAI_API_KEY_ARN")
    anthropic_api_key: str | None = Field(default=None, alias="ANTHROPIC_API_KEY")
    anthropic_api_key_arn: str | None = Field(default=None, alias="ANTHROPIC_API_KEY_ARN")
    google_client_secret: str | None = Field(default=None, alias="GOOGLE_CLIENT_SECRET")
    google_client_secret_arn: str | None = Field(default=None, alias="GOOGLE_CLIENT_SECRET_ARN")

    def get(self, variable: str) -> str | None:
        """The value of `variable`, one of this model's (`<NAME>` or `<NAME>_ARN`); None when unset."""
        values: dict[str, str | None] = self.model_dump(by_alias=True)
        if variable not in values:
            raise ConfigError(f"{variable} is not a deployment secret's variable")
        return values[variable]


class Platform(Environment):
    """Where this process runs: what Lambda sets (all empty elsewhere) and the AWS region."""

    function_name: str = Field(default="", alias="AWS_LAMBDA_FUNCTION_NAME")
    function_version: str = Field(default="", alias="AWS_LAMBDA_FUNCTION_VERSION")
    # `snap-start` or `provisioned-concurrency` when init runs ahead of any request.
    initialization_type: str = Field(default="", alias="AWS_LAMBDA_INITIALIZATION_TYPE")
    region: str = Field(default="", alias="AWS_REGION")  # Lambda's
    default_region: str = Field(default="", alias="AWS_DEFAULT_REGION")  # a shell's, boto3's fallback

    @property
    def any_region(self) -> str:
        """The region, as boto3 would find it, else us-east-1 (pynamodb wants one named)."""
        return self.region or self.default_region or "us-east-1"


class KillSwitch(Environment):
    """The operator's spend controls. `STEPWISE_SUSPENDED_TENANTS` lists suspended tenants (commas)
    locally; in AWS `STEPWISE_SUSPENDED_TENANTS_PARAMETER` names the SSM parameter (a StringList) that
    holds the list, read through Powertools Parameters (stepwise.runs.suspension). With
    `STEPWISE_REQUIRE_TENANT_KEYS` a model call never falls back to the deployment's provider keys."""

    suspended_tenants: str = Field(default="", alias="STEPWISE_SUSPENDED_TENANTS")
    suspended_parameter: str | None = Field(default=None, alias="STEPWISE_SUSPENDED_TENANTS_PARAMETER")
    require_tenant_keys: bool = Field(default=False, alias="STEPWISE_REQUIRE_TENANT_KEYS")

    _blank = field_validator("suspended_parameter", mode="before")(_blank_is_none)
    _switch = field_validator("require_tenant_keys", mode="before")(_is_true)


class BulkCancel(Environment):
    """Where the API hands a bulk cancel too large for one request (stepwise.runs.bulk_cancel)."""

    function: str = Field(alias="RECONCILER_FUNCTION_ARN")


class Circuits(Environment):
    """Provider circuits (stepwise.usage.circuits): how many rate-limited or unavailable answers in a
    row, within how many seconds, open a provider's circuit. `STEPWISE_CIRCUIT_THRESHOLDS` overrides
    per provider: `openai=10,anthropic=3`."""

    threshold: int = Field(default=5, ge=0, alias="STEPWISE_CIRCUIT_THRESHOLD")  # 0: circuits off
    window_seconds: int = Field(default=60, ge=1, alias="STEPWISE_CIRCUIT_WINDOW_SECONDS")
    per_provider: str = Field(default="", alias="STEPWISE_CIRCUIT_THRESHOLDS")

    def threshold_for(self, provider: str) -> int:
        for pair in self.per_provider.split(","):
            name, _, value = pair.partition("=")
            if name.strip() == provider and value.strip().isdigit():
                return int(value)
        return self.threshold


class Telemetry(Environment):
    """The OpenTelemetry variables that decide whether runs are traced (stepwise.core.tracing). The
    exporter reads the rest of OTEL_EXPORTER_OTLP_* itself."""

    sdk_disabled: bool = Field(default=False, alias="OTEL_SDK_DISABLED")
    traces_endpoint: str = Field(default="", alias="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    endpoint: str = Field(default="", alias="OTEL_EXPORTER_OTLP_ENDPOINT")
    service_name: str = Field(default="", alias="OTEL_SERVICE_NAME")

    _switch = field_validator("sdk_disabled", mode="before")(_is_true)

    @property
    def exports(self) -> bool:
        """Whether spans have somewhere to go."""
        return not self.sdk_disabled and any(e.strip() for e in (self.traces_endpoint, self.endpoint))


def models() -> Models:
    return _load(Models)


def compaction() -> Compaction:
    return _load(Compaction)


def guards() -> Guards:
    return _load(Guards)


def links() -> Links:
    return _load(Links)


def channels() -> Channels:
    return _load(Channels)


def follow() -> Follow:
    return _load(Follow)


def storage() -> Storage:
    return _load(Storage)


def inbound_mail() -> InboundMail:
    return _load(InboundMail)


def gmail() -> Gmail:
    return _load(Gmail)


def providers() -> Providers:
    return _load(Providers)


def secret_variables() -> SecretVariables:
    return _load(SecretVariables)


def platform() -> Platform:
    return _load(Platform)


def telemetry() -> Telemetry:
    return _load(Telemetry)


def kill_switch() -> KillSwitch:
    return _load(KillSwitch)


def bulk_cancel() -> BulkCancel:
    return _load(BulkCancel)


def circuits() -> Circuits:
    return _load(Circuits)


# Names of variables that may hold a credential: ours, and those litellm and boto3 read themselves.
_CREDENTIAL_NAME = re.compile(r"(?i)(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL)")


def credential_values(min_length: int = 8) -> list[str]:
    """The values of every credential-looking variable (its name says KEY, TOKEN, SECRET, ...) at least
    `min_length` long: what an error text quoted from a provider must never show."""
    return [v for k, v in os.environ.items() if len(v) >= min_length and _CREDENTIAL_NAME.search(k)]
