"""Schedules as the API takes and returns them, and the payloads that reach the SchedulerFunction."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from stepwise.core.schema import Strict, Timestamp, utcnow
from stepwise.runs.models import MESSAGE_LIMIT, _fits_an_item
from stepwise.schedules import expressions
from stepwise.schedules.expressions import At


class _Timing(Strict):
    """When a schedule fires: what an agent's and a workflow's schedules share."""

    expression: str = Field(
        min_length=1, max_length=256, examples=["rate(1 hour)", "cron(0 9 ? * MON-FRI *)"]
    )
    timezone: str = Field(default="UTC", min_length=1, max_length=64, examples=["Europe/Paris"])

    @field_validator("expression")
    @classmethod
    def _parses(cls, value: str) -> str:
        expressions.parse(value)  # InvalidExpression is a ValueError: a 422 naming the problem
        return value.strip()

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        expressions.zone(value)
        return value

    @model_validator(mode="after")
    def _at_is_ahead(self) -> _Timing:
        expression = expressions.parse(self.expression)
        if isinstance(expression, At):
            when = expressions.next_fire(expression, expressions.zone(self.timezone), utcnow(), utcnow())
            if when is None:
                raise ValueError(
                    f"{self.expression} is in the past, or does not exist in {self.timezone} "
                    "(a daylight saving gap): it would never fire"
                )
        return self


class ScheduleCreate(_Timing):
    message: str = Field(min_length=1, max_length=MESSAGE_LIMIT)
    enabled: bool = True

    _message_fits = field_validator("message")(_fits_an_item)


class WorkflowScheduleCreate(_Timing):
    """A workflow's schedule: each firing starts a workflow run on `input` (checked against the
    workflow's input_schema at creation and at each firing)."""

    input: dict[str, Any] = Field(default_factory=dict)
    enabled: bool = True

    @field_validator("input")
    @classmethod
    def _input_fits(cls, value: dict[str, Any]) -> dict[str, Any]:
        _fits_an_item(json.dumps(value, separators=(",", ":")))
        return value


class Schedule(BaseModel):
    model_config = ConfigDict(extra="ignore")

    schedule_id: str
    agent_id: str
    expression: str
    timezone: str
    message: str
    enabled: bool
    created_at: Timestamp  # whole seconds: a rate counts from here, and Scheduler's StartDate is this
    next_run: Timestamp | None = None  # computed when the schedule is read; None once it cannot fire

    def with_next_run(self, now: datetime | None = None) -> Schedule:
        """This schedule with `next_run`, its first fire time at or after `now` (none when disabled)."""
        when = None
        if self.enabled:
            when = expressions.next_fire(
                expressions.parse(self.expression),
                expressions.zone(self.timezone),
                self.created_at,
                (now or utcnow()) - timedelta(microseconds=1),
            )
        return self.model_copy(update={"next_run": when})


class ScheduleList(BaseModel):
    schedules: list[Schedule]


class WorkflowSchedule(BaseModel):
    """A workflow's schedule as the API shows it (stored as a schedule whose target is the workflow and
    whose message is the input, as JSON)."""

    schedule_id: str
    workflow_id: str
    expression: str
    timezone: str
    input: dict[str, Any]
    enabled: bool
    created_at: Timestamp
    next_run: Timestamp | None = None

    @classmethod
    def of(cls, schedule: Schedule) -> WorkflowSchedule:
        shown = schedule.model_dump(exclude={"agent_id", "message"})
        return cls(**shown, workflow_id=schedule.agent_id, input=json.loads(schedule.message or "{}"))


class WorkflowScheduleList(BaseModel):
    schedules: list[WorkflowSchedule]


# --- Deliveries -----------------------------------------------------------------------------------


class ScheduleDelivery(BaseModel):
    """What Scheduler sends: the Input the API wrote, with `<aws.scheduler.scheduled-time>` filled in."""

    model_config = ConfigDict(extra="ignore")

    tenant_id: str = Field(min_length=1)
    agent_id: str = Field(min_length=1)
    schedule_id: str = Field(min_length=1)
    scheduled_time: Timestamp

    @field_validator("scheduled_time")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        return value if value.tzinfo else value.replace(tzinfo=UTC)


class EventDelivery(BaseModel):
    """An EventBridge event, with the tenant and the agent (or the workflow) its rule's target adds (see
    stepwise.schedules)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    tenant_id: str = Field(min_length=1)
    agent_id: str | None = Field(default=None, min_length=1)
    workflow_id: str | None = Field(default=None, min_length=1)
    id: str = Field(min_length=1)
    detail_type: str = Field(alias="detail-type")
    source: str
    time: Timestamp
    detail: Any = None

    @model_validator(mode="before")
    @classmethod
    def _unwrap(cls, data: Any) -> Any:
        """`{"tenant_id", "agent_id", "event": <aws.events.event.json>}` is the same as a flat event."""
        if isinstance(data, dict) and isinstance(data.get("event"), dict):
            targets = {k: data.get(k) for k in ("tenant_id", "agent_id", "workflow_id")}
            return {**data["event"], **targets}
        return data

    @model_validator(mode="after")
    def _one_target(self) -> EventDelivery:
        if (self.agent_id is None) == (self.workflow_id is None):
            raise ValueError("an event's rule adds an agent_id or a workflow_id, one of them")
        return self

    @field_validator("time")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        return value if value.tzinfo else value.replace(tzinfo=UTC)
