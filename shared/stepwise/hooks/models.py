"""Lifecycle hooks as the API takes them and the store keeps them, and the decision evaluating them yields.

A hook is checked against its event when it is created, so a hook that could never fire or never act
(an unknown event, a matcher on an event without a tool, a rule on the output before there is one, an
approval outside PreToolUse) is a 422 instead of a silent no-op.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, get_args

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from stepwise.core.masking import is_sealed
from stepwise.core.schema import Strict, Timestamp
from stepwise.hooks.patterns import compile_pattern
from stepwise.tools.models import TOOL_NAME

HookEvent = Literal["OnRunStart", "PreToolUse", "OnDelegation", "PostToolUse", "PreResponse", "OnRunComplete"]
HookType = Literal["http", "rule", "approval"]
HOOK_EVENTS: tuple[HookEvent, ...] = get_args(HookEvent)
HOOK_TYPES: tuple[HookType, ...] = get_args(HookType)

TOOL_EVENTS: tuple[HookEvent, ...] = ("PreToolUse", "OnDelegation", "PostToolUse")  # they have a tool
INPUT_EVENTS: tuple[HookEvent, ...] = ("PreToolUse",)  # hooks may replace the tool's arguments
OUTPUT_EVENTS: tuple[HookEvent, ...] = ("PostToolUse", "PreResponse")  # there is an output to see or replace
APPROVAL_EVENTS: tuple[HookEvent, ...] = ("PreToolUse",)  # a human can be asked before the tool runs
# Gates: a hook here stands between the model and an effect, so one that cannot answer denies unless its
# config says `fail_closed: false`. Elsewhere a broken hook is skipped with a warning unless it says true.
FAIL_CLOSED_EVENTS: tuple[HookEvent, ...] = ("PreToolUse", "OnDelegation")
# Stored hooks carry the shape they were stored in. Items without the key (shape 1) come from before
# fail-closed gates, when the default of the day (false) was written into every item, and from a short
# window after, when a stored false was asked for; the item cannot tell which. On a gate such a false is
# read as unset and the gate's default (closed) applies: erring closed, an explicit false of that window
# is overridden too. From shape 2 on a stored false is the author's choice and stays open. (Hooks are
# immutable: to keep an old one open, re-create it.)
SHAPE_KEY = "shape"
SHAPE = 2

OUTPUT_FIELD = "output"  # a rule field that names the output rather than an argument
Operator = Literal["CONTAINS", "STARTS_WITH", "MATCHES", "IN"]
HookAction = Literal["allow", "deny", "ask"]

# Header names are RFC 9110 tokens; values printable ASCII, so no header splitting and nothing httpx
# would fail to encode at call time.
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$")
_HEADER_VALUE = re.compile(r"^[\t\x20-\x7e]{0,8192}$")
_RESERVED_HEADERS = frozenset({"content-type", "content-length", "transfer-encoding", "host", "connection"})
_EMAIL = re.compile(r"^[^@\s]{1,64}@[^@\s]+\.[^@\s]+$")


def _web_url(value: str, *, schemes: frozenset[str], what: str) -> str:
    try:
        url = httpx.URL(value)
    except httpx.InvalidURL as exc:
        raise ValueError(f"{what} is not a valid URL: {exc}") from None
    if url.scheme not in schemes or not url.host:
        raise ValueError(f"{what} must be an {' or '.join(sorted(schemes))} URL with a host")
    if url.userinfo:
        raise ValueError(f"{what} must not carry credentials (user:password@); send them in headers")
    return value


# --- Configs, one per hook type -------------------------------------------------------------------


class HttpConfig(Strict):
    """POST the event to `url`; its JSON reply allows, denies or modifies.

    `fail_closed`: whether a hook that cannot answer (an error status, a timeout, no connection, a reply
    that is not the contract's) blocks (true) or is skipped with a warning (false). Left out, it is true
    on PreToolUse and OnDelegation, where the hook gates a call, and false elsewhere; the hook as stored
    and shown carries the value that applies.

    What is sent is bounded (stepwise.hooks.http): every string anywhere in `data` and `output` longer
    than 4,096 characters is cut there and ends with "…[truncated: N of M characters omitted]", the
    payload then says `"truncated": true`, and a payload still over 64 KiB is not sent at all: that
    counts as the hook failing (so a gate denies). A hook that must see whole values denies when
    `truncated` is true.
    """

    url: str = Field(min_length=1, max_length=2048)
    headers: dict[str, str] = Field(default_factory=dict, max_length=50)
    timeout_seconds: float = Field(default=5.0, ge=1, le=30)
    fail_closed: bool | None = None  # None: the event's default, resolved when the hook is made

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return _web_url(value, schemes=frozenset({"http", "https"}), what="url")

    @field_validator("headers")
    @classmethod
    def _sendable_headers(cls, headers: dict[str, str]) -> dict[str, str]:
        for name, value in headers.items():
            if not _HEADER_NAME.match(name):
                raise ValueError(f"header name {name!r} is not a valid HTTP header name")
            if name.lower() in _RESERVED_HEADERS:
                raise ValueError(f"header {name!r} is set by Stepwise and cannot be configured")
            # A sealed value (as stored) is ciphertext, checked when it was given in the clear.
            if not is_sealed(value) and not _HEADER_VALUE.match(value):
                raise ValueError(f"header {name!r} must be printable ASCII without line breaks")
        return headers


class Rule(Strict):
    """One condition on an argument (dotted path) or on the output, and what a match means."""

    field: str = Field(min_length=1, max_length=256)
    operator: Operator
    value: str | list[str]
    action: Literal["deny", "allow"] = "deny"
    message: str | None = Field(default=None, max_length=2000)

    @field_validator("field")
    @classmethod
    def _dotted_path(cls, value: str) -> str:
        if "" in value.split("."):
            raise ValueError(f"field {value!r} must be a name or a dotted path such as a.b or items.0.name")
        return value

    @model_validator(mode="after")
    def _value_fits_operator(self) -> Rule:
        if self.operator == "IN":
            if not isinstance(self.value, list) or not self.value:
                raise ValueError("IN takes a non-empty list of strings as its value")
            if len(self.value) > 1000:
                raise ValueError("IN takes at most 1000 values")
        elif not isinstance(self.value, str):
            raise ValueError(f"{self.operator} takes a string as its value (only IN takes a list)")
        elif len(self.value) > 10_000:
            raise ValueError("value is over 10,000 characters")
        if self.operator == "MATCHES":
            assert isinstance(self.value, str)
            compile_pattern(self.value)
        return self

    @property
    def path(self) -> list[str]:
        return self.field.split(".")

    @property
    def on_output(self) -> bool:
        return self.path[0] == OUTPUT_FIELD


class RuleConfig(Strict):
    rules: list[Rule] = Field(min_length=1, max_length=100)


class EmailChannel(Strict):
    type: Literal["email"]
    to: list[str] = Field(min_length=1, max_length=20)

    @field_validator("to")
    @classmethod
    def _addresses(cls, addresses: list[str]) -> list[str]:
        for address in addresses:
            if len(address) > 254 or not _EMAIL.match(address):
                raise ValueError(f"{address!r} is not an email address")
        return addresses


class SlackChannel(Strict):
    type: Literal["slack"]
    webhook_url: str = Field(min_length=1, max_length=2048)

    @field_validator("webhook_url")
    @classmethod
    def _https_url(cls, value: str) -> str:
        # The URL is the credential: it must not travel in clear text.
        return _web_url(value, schemes=frozenset({"https"}), what="webhook_url")


ApprovalChannel = Annotated[EmailChannel | SlackChannel, Field(discriminator="type")]


class ApprovalConfig(Strict):
    """Ask a human before the tool runs; no answer within `timeout` seconds blocks the call."""

    timeout: int = Field(default=300, ge=1, le=604_800)
    channels: list[ApprovalChannel] = Field(default_factory=list, max_length=10)


HookConfig = HttpConfig | RuleConfig | ApprovalConfig
CONFIG_MODELS: dict[str, type[HttpConfig] | type[RuleConfig] | type[ApprovalConfig]] = {
    "http": HttpConfig,
    "rule": RuleConfig,
    "approval": ApprovalConfig,
}
assert set(CONFIG_MODELS) == set(HOOK_TYPES)


# --- Hooks ----------------------------------------------------------------------------------------


class HookCreate(Strict):
    """The body of `POST /v1/agents/{agent_id}/hooks`."""

    event: HookEvent
    type: HookType
    matcher: str | None = Field(default=None, pattern=TOOL_NAME)  # a tool name; None: every tool
    config: HookConfig
    enabled: bool = True
    position: int = Field(default=0, ge=-(2**31), le=2**31 - 1)  # lower runs first

    @field_validator("event", mode="before")
    @classmethod
    def _known_event(cls, value: Any) -> Any:
        if value not in HOOK_EVENTS:
            raise ValueError(f"event must be one of {', '.join(HOOK_EVENTS)} (got {value!r})")
        return value

    @field_validator("type", mode="before")
    @classmethod
    def _known_type(cls, value: Any) -> Any:
        if value not in HOOK_TYPES:
            raise ValueError(f"type must be one of {', '.join(HOOK_TYPES)} (got {value!r})")
        return value

    @field_validator("config", mode="before")
    @classmethod
    def _config_of_type(cls, value: Any, info: ValidationInfo) -> Any:
        # `type` is declared before `config`, so it is in info.data once it is valid.
        kind = info.data.get("type")
        if kind is None:
            raise ValueError("config is checked against the hook's type, which is missing or not valid")
        return CONFIG_MODELS[kind].model_validate(value)

    @model_validator(mode="after")
    def _fits_event(self) -> HookCreate:
        if self.matcher is not None and self.event not in TOOL_EVENTS:
            raise ValueError(
                f"matcher only applies to tool events ({', '.join(TOOL_EVENTS)}); {self.event} has no tool"
            )
        if isinstance(self.config, HttpConfig) and self.config.fail_closed is None:
            self.config.fail_closed = self.event in FAIL_CLOSED_EVENTS
        if isinstance(self.config, ApprovalConfig) and self.event not in APPROVAL_EVENTS:
            raise ValueError(
                f"approval hooks only apply to {', '.join(APPROVAL_EVENTS)}, where a tool call can wait "
                f"for a human; not to {self.event}"
            )
        if isinstance(self.config, RuleConfig):
            if self.event == "OnRunComplete":
                raise ValueError(
                    "rule hooks cannot act on OnRunComplete: the run is over and nothing can block"
                )
            for index, rule in enumerate(self.config.rules):
                if rule.on_output and self.event not in OUTPUT_EVENTS:
                    raise ValueError(
                        f"config.rules.{index}.field {rule.field!r}: the output only exists for output "
                        f"events ({', '.join(OUTPUT_EVENTS)}), not {self.event}"
                    )
        return self


class Hook(HookCreate):
    model_config = ConfigDict(extra="ignore")

    hook_id: str
    created_at: Timestamp

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Hook:
        """A hook as the agent's item keeps it; an item of shape 1 (no shape key) on a gate reads its
        `fail_closed: false` as unset, so the gate's default applies (see SHAPE_KEY)."""
        config = item.get("config")
        if (
            item.get(SHAPE_KEY) is None
            and item.get("type") == "http"
            and item.get("event") in FAIL_CLOSED_EVENTS
            and isinstance(config, dict)
            and config.get("fail_closed") is False
        ):
            item = {**item, "config": {**config, "fail_closed": None}}  # resolved to the gate's default
        return cls.model_validate(item)

    def stored(self) -> dict[str, Any]:
        """The item the agent keeps: the hook as JSON, with the shape it was stored in."""
        return self.model_dump(mode="json") | {SHAPE_KEY: SHAPE}


def applied(item: dict[str, Any]) -> dict[str, Any]:
    """A stored hook as it applies now (an old item's gate default resolved), without storage keys: what
    the API shows. An item this version cannot read is shown as stored rather than hidden."""
    from pydantic import ValidationError

    try:
        return Hook.from_item(item).model_dump(mode="json")
    except ValidationError:
        return {key: value for key, value in item.items() if key != SHAPE_KEY}


# --- Decisions ------------------------------------------------------------------------------------


class HookDecision(BaseModel):
    """What a hook, or all of an event's hooks together, decided.

    `modified_input` and `modified_output` are None when nothing replaced them (so a hook cannot set an
    output to null). `hook_id` names the hook that denied or asks. `warnings` are for the log: hooks that
    failed open and were skipped.
    """

    action: HookAction = "allow"
    message: str | None = None
    modified_input: dict[str, Any] | None = None
    modified_output: Any = None
    hook_id: str | None = None
    approval: ApprovalConfig | None = None  # set when action is "ask"
    warnings: list[str] = Field(default_factory=list)
