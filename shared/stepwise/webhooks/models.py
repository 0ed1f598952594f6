"""Webhooks as the API takes and shows them."""

from __future__ import annotations

from typing import Any, Literal, get_args

import httpx
from pydantic import BaseModel, Field, field_validator

from stepwise.core.schema import Strict, Timestamp

WebhookEvent = Literal[
    "run_completed",
    "run_failed",
    "run_cancelled",
    "approval_requested",
    "client_tool_requested",
    "budget_reached",
    "budget_warning",
]
WEBHOOK_EVENTS: tuple[WebhookEvent, ...] = get_args(WebhookEvent)
DEFAULT_EVENTS: tuple[WebhookEvent, ...] = ("run_completed", "run_failed", "run_cancelled")
# What a delivery reports: a webhook's event, an A2A task's new state to one of its push configs, or an
# eval run's end to its suite's webhook (stepwise.evals.runner).
DeliveryEvent = WebhookEvent | Literal["a2a_task", "eval_run.completed"]

DeliveryStatus = Literal["pending", "retrying", "delivered", "failed"]
FINAL_STATUSES: frozenset[str] = frozenset({"delivered", "failed"})


class WebhookConfig(Strict):
    """Where a run's events are POSTed. `events` defaults to the run's ending (`run_completed`,
    `run_failed`, `run_cancelled`); `approval_requested`, `client_tool_requested`, `budget_reached` and
    `budget_warning` may be added."""

    url: str = Field(min_length=1, max_length=2048)
    events: list[WebhookEvent] = Field(default_factory=lambda: list(DEFAULT_EVENTS), min_length=1)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        try:
            url = httpx.URL(value)
        except httpx.InvalidURL as exc:
            raise ValueError(f"url is not a valid URL: {exc}") from None
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError("url must be an http or https URL with a host")
        if url.userinfo:
            # Deliveries are authenticated by their signature; credentials in a URL end up in logs.
            raise ValueError("url must not carry credentials (user:password@)")
        return value

    @field_validator("events")
    @classmethod
    def _unique(cls, events: list[WebhookEvent]) -> list[WebhookEvent]:
        return list(dict.fromkeys(events))

    def wants(self, event: str) -> bool:
        return event in self.events


class RunTarget(BaseModel):
    """What a delivery needs to know of its run."""

    run_id: str
    agent_id: str
    session_id: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    webhook: WebhookConfig | None = None


class Attempt(BaseModel):
    """One try at a delivery: when, how long, and what came back (a status code, or why none did)."""

    at: Timestamp
    duration_ms: int
    status_code: int | None = None
    error: str | None = None


class Delivery(BaseModel):
    """A webhook delivery as `GET /v1/runs/{run_id}/webhooks` shows it. `attempts` counts the tries so
    far; `history` lists the most recent of them."""

    webhook_id: str
    event: DeliveryEvent
    url: str
    status: DeliveryStatus
    attempts: int
    last_status_code: int | None = None
    last_error: str | None = None
    created_at: Timestamp
    next_attempt_at: Timestamp | None = None
    delivered_at: Timestamp | None = None
    gives_up_at: Timestamp
    history: list[Attempt] = Field(default_factory=list)


class DeliveryList(BaseModel):
    deliveries: list[Delivery]


class WebhookSecret(BaseModel):
    """The tenant's new signing secret, shown this once. The one it replaces still signs deliveries
    (beside the new one) until `previous_valid_until`, so receivers can switch without missing any."""

    secret: str
    created_at: Timestamp
    previous_valid_until: Timestamp | None = None


class DeliveryRecord(Delivery):
    """A delivery as the store keeps it: the exact body every attempt sends (signed afresh each time,
    with that attempt's timestamp)."""

    run_id: str
    body: str
    lease_until: int | None = None  # epoch seconds: a worker holds the next attempt until then
    headers: dict[str, str] = Field(default_factory=dict)  # sent besides the signature's; never shown

    def view(self) -> Delivery:
        return Delivery.model_validate(self.model_dump(exclude={"run_id", "body", "lease_until", "headers"}))
