"""Triggers and their deliveries as the API takes and returns them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from stepwise.core.ids import AGENT_ID
from stepwise.core.schema import Strict, Timestamp
from stepwise.runs.models import MESSAGE_LIMIT
from stepwise.triggers import templates
from stepwise.triggers.verify import Scheme

TriggerType = Literal["webhook", "gmail", "outlook", "ses"]
# Served now; the others are accepted by the model and refused by the service until their intake lands.
SERVED_TYPES: frozenset[str] = frozenset({"webhook", "ses", "gmail", "outlook"})
EMAIL_TYPES: frozenset[str] = frozenset({"gmail", "outlook", "ses"})
# An address as SES receives it: a plain local part (letters, digits, . _ + -) at a domain.
ADDRESS = r"^[a-z0-9][a-z0-9._+-]{0,63}@[a-z0-9.-]{1,253}$"
DeliveryStatus = Literal["received", "retrying", "started", "deduplicated", "refused", "failed"]
HEADER = r"^[A-Za-z0-9-]{1,64}$"
DEDUPE_PATH = r"^\$?\.?[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*$"
SECRET_HINT = "at least 16 characters; given, it is used as is (e.g. the secret Stripe shows for an endpoint)"


def _template(value: str | None) -> str | None:
    if value is not None:
        templates.check(value)  # TemplateError is a ValueError: a 422 naming the placeholder
    return value


class TriggerTarget(Strict):
    """What a delivery starts: an agent's run, or (once workflows land) a workflow's."""

    agent_id: str | None = Field(default=None, pattern=AGENT_ID)
    workflow_id: str | None = Field(default=None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")

    @model_validator(mode="after")
    def _exactly_one(self) -> TriggerTarget:
        if (self.agent_id is None) == (self.workflow_id is None):
            raise ValueError("target names exactly one of agent_id and workflow_id")
        return self


class SessionByKey(Strict):
    by_key: str = Field(min_length=1, max_length=1024, description="A template: one key, one session")

    _checked = field_validator("by_key")(_template)


Session = Literal["new"] | SessionByKey


class TriggerCreate(Strict):
    type: TriggerType
    name: str | None = Field(default=None, max_length=200)
    target: TriggerTarget
    message: str = Field(
        min_length=1,
        max_length=MESSAGE_LIMIT,
        description="A template over the event: `{{path.in.body}}`, `{{$event}}`, `{{$headers.name}}`",
        examples=["GitHub {{$headers.x-github-event}} on {{repository.full_name}}:\n\n{{$event}}"],
    )
    session: Session = "new"
    user_id: str | None = Field(default=None, min_length=1, max_length=1024, description="A template")
    enabled: bool = True
    verification: Scheme | None = Field(default=None, description="webhook: default standard-webhooks")
    signature_header: str | None = Field(default=None, pattern=HEADER, description="hmac-sha256's header")
    dedupe_path: str | None = Field(
        default=None,
        max_length=256,
        pattern=DEDUPE_PATH,
        description="A JSON path in the body, e.g. `event.id`",
    )
    secret: str | None = Field(default=None, min_length=16, max_length=256, description=SECRET_HINT)
    address: str | None = Field(
        default=None,
        max_length=320,
        pattern=ADDRESS,
        description="ses: the address at the operator's SesInboundDomain that starts it (lower case); "
        "default `<trigger id>@<domain>`",
    )
    allow_automated: bool = Field(
        default=False,
        description="email: also start on Auto-Submitted, bulk and list mail (never on the mailbox's own)",
    )

    _message = field_validator("message")(_template)
    _user = field_validator("user_id")(_template)

    @model_validator(mode="after")
    def _consistent(self) -> TriggerCreate:
        if self.address is not None and self.type != "ses":
            raise ValueError(f"address applies to ses triggers, not {self.type}")
        if self.type == "webhook":
            self.verification = self.verification or "standard-webhooks"
            if self.verification == "hmac-sha256" and not self.signature_header:
                raise ValueError("hmac-sha256 verification names its header: signature_header")
        elif self.verification is not None:
            raise ValueError(f"verification applies to webhook triggers, not {self.type}")
        standard = self.verification == "standard-webhooks"
        if self.secret is not None and standard and not self.secret.startswith("whsec_"):
            raise ValueError("a standard-webhooks secret is whsec_ followed by base64")
        return self


class TriggerPatch(Strict):
    name: str | None = Field(default=None, max_length=200)
    target: TriggerTarget | None = None
    message: str | None = Field(default=None, min_length=1, max_length=MESSAGE_LIMIT)
    session: Session | None = None
    user_id: str | None = Field(default=None, min_length=1, max_length=1024)
    enabled: bool | None = None
    dedupe_path: str | None = Field(default=None, max_length=256, pattern=DEDUPE_PATH)
    allow_automated: bool | None = None

    _message = field_validator("message")(_template)
    _user = field_validator("user_id")(_template)


class TriggerSecretRotate(Strict):
    secret: str | None = Field(default=None, min_length=16, max_length=256, description=SECRET_HINT)
    previous_valid_seconds: int = Field(
        default=86_400, ge=0, le=7 * 86_400, description="How long the replaced secret still verifies"
    )


class TriggerRefusals(BaseModel):
    """Requests the intake refused before recording anything, by reason."""

    bad_signature: int = 0
    stale: int = 0
    too_large: int = 0


class Trigger(BaseModel):
    model_config = ConfigDict(extra="ignore")

    trigger_id: str
    type: TriggerType
    name: str | None = None
    target: TriggerTarget
    message: str
    session: Session = "new"
    user_id: str | None = None
    enabled: bool = True
    verification: Scheme | None = None
    signature_header: str | None = None
    dedupe_path: str | None = None
    url: str | None = None  # the public intake path of a webhook trigger
    address: str | None = None  # an ses trigger's inbound address; a gmail trigger's mailbox
    allow_automated: bool = False
    # gmail: null until a person authorized the mailbox (then `address` is it) and its watch is set.
    connected: bool | None = None
    watch_expires_at: Timestamp | None = None
    subscription_id: str | None = None  # outlook: Graph's change-notification subscription
    created_at: Timestamp
    updated_at: Timestamp
    secret_created_at: Timestamp | None = None
    previous_secret_valid_until: Timestamp | None = None
    refused: TriggerRefusals = Field(default_factory=TriggerRefusals)

    def stored(self) -> dict[str, Any]:
        """What the item's `doc` keeps (the counters and the URL are not part of it)."""
        return self.model_dump(mode="json", exclude={"url", "refused"})


class TriggerCreated(Trigger):
    secret: str | None = Field(default=None, description="Shown only in this response")
    authorization_url: str | None = Field(
        default=None,
        description="gmail, outlook: Stepwise's start link, where a person authorizes the mailbox (it opens "
        "once, in the browser that completes the authorization; valid 10 minutes)",
    )


class TriggerList(BaseModel):
    triggers: list[Trigger]


class TriggerSecret(BaseModel):
    secret: str
    created_at: Timestamp
    previous_valid_until: Timestamp | None = None


class TriggerDelivery(BaseModel):
    delivery_id: str
    status: DeliveryStatus
    received_at: Timestamp
    dedupe_key: str | None = None
    run_id: str | None = None
    duplicate_of: str | None = None
    reason: str | None = None
    attempts: int = 0
    updated_at: Timestamp | None = None


class TriggerDeliveryList(BaseModel):
    deliveries: list[TriggerDelivery]
    next_token: str | None = None


class MailAccepted(BaseModel):
    """What a mail route answers its sender (SNS, Pub/Sub): the deliveries it queued."""

    type: str
    deliveries: list[str] = Field(default_factory=list)
    deduplicated: list[str] = Field(default_factory=list)
    ignored: int = 0


class TriggerDeliveryAccepted(BaseModel):
    """What the intake answers: 202 for a new delivery, 200 with `deduplicated` for a repeat."""

    delivery_id: str
    status: Literal["received", "deduplicated"]
    deduplicated: bool = False
    duplicate_of: str | None = None
