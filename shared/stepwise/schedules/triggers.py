"""Deliveries: a schedule's tick or an EventBridge event becomes at most one run.

Both arrive at least once. The run id is derived from what was delivered (the schedule and its
scheduled time, or the event id), so a second delivery of the same thing finds its run recorded and
starts nothing (start_run raises RunExists). The derived id keeps the ULID shape, 48 bits of the
delivery's own time then 80 bits of a hash, so runs started this way still sort by time.
"""

from __future__ import annotations

import contextlib
import json
import logging
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel

from stepwise.core.errors import Forbidden, ModelNotAllowed, NotFound, Unprocessable
from stepwise.core.ids import derived_id
from stepwise.runs.models import MESSAGE_LIMIT, AgentPaused, RunCreate, RunExists
from stepwise.runs.ports import stores
from stepwise.runs.start import start_run
from stepwise.schedules import store
from stepwise.schedules.models import EventDelivery, ScheduleDelivery

log = logging.getLogger(__name__)

MESSAGE_BYTES = 300_000  # what RunCreate accepts: the message is stored in one DynamoDB item
TRUNCATED = "\n… (truncated)"


WORKFLOW = "wfl_"  # a schedule whose target id is a workflow's


class UnknownDelivery(ValueError):
    """A payload that is neither a schedule's delivery nor an EventBridge event; retrying cannot help."""


class Outcome(BaseModel):
    status: Literal["started", "duplicate", "skipped"]
    run_id: str
    reason: str | None = None


def iso(when: datetime) -> str:
    """Scheduler's format for `<aws.scheduler.scheduled-time>`: UTC, whole seconds, a Z."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def schedule_run_id(tenant_id: str, schedule_id: str, scheduled_time: datetime) -> str:
    return derived_id("run", scheduled_time, "schedule", tenant_id, schedule_id, iso(scheduled_time))


def event_run_id(tenant_id: str, agent_id: str, event_id: str, time: datetime) -> str:
    """One run per event and agent: two rules sending the same event to two agents start two runs."""
    return derived_id("run", time, "event", tenant_id, agent_id, event_id)


def deliver(payload: dict[str, Any]) -> Outcome:
    """Start the run a delivery asks for, unless it was started already or should not start."""
    if "schedule_id" in payload:
        return deliver_schedule(ScheduleDelivery.model_validate(payload))
    if "detail-type" in payload or isinstance(payload.get("event"), dict):
        return deliver_event(EventDelivery.model_validate(payload))
    raise UnknownDelivery(
        "expected a schedule's delivery {tenant_id, agent_id, schedule_id, scheduled_time} or an "
        "EventBridge event with tenant_id and agent_id added by its rule's target"
    )


def deliver_schedule(delivery: ScheduleDelivery) -> Outcome:
    tenant_id, when = delivery.tenant_id, delivery.scheduled_time
    run_id = schedule_run_id(tenant_id, delivery.schedule_id, when)
    schedule = store.find(tenant_id, delivery.schedule_id)
    if schedule is None or schedule.agent_id != delivery.agent_id:
        return _skipped(run_id, f"schedule {delivery.schedule_id} was deleted")
    if not schedule.enabled:
        return _skipped(run_id, f"schedule {delivery.schedule_id} is disabled")
    metadata = {"trigger": "schedule", "schedule_id": schedule.schedule_id, "scheduled_time": iso(when)}
    if schedule.agent_id.startswith(WORKFLOW):  # a workflow's schedule: its message is the run's input
        return _start_workflow(tenant_id, schedule.agent_id, json.loads(schedule.message), run_id, metadata)
    body = RunCreate(
        message=schedule.message,
        metadata={"trigger": "schedule", "schedule_id": schedule.schedule_id, "scheduled_time": iso(when)},
    )
    return _start(tenant_id, schedule.agent_id, body, run_id, f"schedule:{schedule.schedule_id}@{iso(when)}")


def deliver_event(event: EventDelivery) -> Outcome:
    if event.workflow_id is not None:  # a rule that targets a workflow: the event is its input
        run_id = event_run_id(event.tenant_id, event.workflow_id, event.id, event.time)
        payload = {
            "id": event.id,
            "detail-type": event.detail_type,
            "source": event.source,
            "time": iso(event.time),
            "detail": event.detail,
        }
        metadata = {"trigger": "event", "event_id": event.id, "source": event.source}
        return _start_workflow(event.tenant_id, event.workflow_id, {"event": payload}, run_id, metadata)
    assert event.agent_id is not None
    run_id = event_run_id(event.tenant_id, event.agent_id, event.id, event.time)
    body = RunCreate(
        message=event_message(event),
        metadata={
            "trigger": "event",
            "event_id": event.id,
            "source": event.source,
            "detail_type": event.detail_type,
        },
    )
    return _start(event.tenant_id, event.agent_id, body, run_id, f"event:{event.id}")


def event_message(event: EventDelivery) -> str:
    """What the agent reads: a line saying what happened, then the event as JSON (clipped to what a run
    accepts; an EventBridge event is at most 256 KB, a run's message 100,000 characters)."""
    head = f"EventBridge event {event.detail_type!r} from {event.source!r}:\n"
    body = json.dumps(
        {"detail-type": event.detail_type, "source": event.source, "detail": event.detail},
        ensure_ascii=False,
        default=str,
    )
    room_chars = MESSAGE_LIMIT - len(head) - len(TRUNCATED)
    room_bytes = MESSAGE_BYTES - len(head.encode()) - len(TRUNCATED.encode())
    if len(body) <= room_chars and len(body.encode()) <= room_bytes:
        return head + body
    clipped = body.encode()[:room_bytes].decode(errors="ignore")[:room_chars]
    return head + clipped + TRUNCATED


def _start(tenant_id: str, agent_id: str, body: RunCreate, run_id: str, trigger_id: str) -> Outcome:
    try:
        start_run(tenant_id, agent_id, body, run_id=run_id, trigger_id=trigger_id)
    except RunExists:
        log.info("delivery %s was seen before (run %s): nothing started", trigger_id, run_id)
        return Outcome(status="duplicate", run_id=run_id)
    except NotFound as exc:
        if exc.code != "agent_not_found":
            raise
        return _skipped(run_id, f"agent {agent_id} was deleted")
    except ModelNotAllowed as exc:  # the operator's bound: retrying the delivery cannot help
        return _skipped(run_id, exc.message)
    except AgentPaused as exc:
        # Skipped, not retried: a paused agent's missed ticks are not made up when it is unpaused.
        # The agent shows how many were skipped (skipped_while_paused).
        with contextlib.suppress(NotFound):
            stores().agents.count_skipped(tenant_id, agent_id)
        return _skipped(run_id, exc.message)
    except Forbidden as exc:  # the tenant is suspended: nothing of theirs starts
        return _skipped(run_id, exc.message)
    return Outcome(status="started", run_id=run_id)


def _start_workflow(
    tenant_id: str, workflow_id: str, payload: dict[str, Any], run_id: str, metadata: dict[str, Any]
) -> Outcome:
    """A workflow run on `payload`, once per delivery: the run id is the delivery's, and a run recorded
    by an earlier delivery that died before its start is started now."""
    from stepwise.runs import suspension
    from stepwise.workflows import starting
    from stepwise.workflows.models import WorkflowRunCreate

    try:
        suspension.check_request(tenant_id)
        body = WorkflowRunCreate(input=payload)
        run = starting.record(tenant_id, workflow_id, body, run_id=run_id, metadata=metadata)
    except RunExists:
        run = stores().runs.get(tenant_id, run_id)
        if run.status != "queued":
            log.info("delivery for run %s was seen before: nothing started", run_id)
            return Outcome(status="duplicate", run_id=run_id)
    except NotFound as exc:  # the workflow (or its version) was deleted
        return _skipped(run_id, exc.message)
    except (Unprocessable, Forbidden) as exc:  # the input no longer fits; the tenant is suspended
        return _skipped(run_id, exc.message)
    starting.launch(tenant_id, run)
    return Outcome(status="started", run_id=run_id)


def _skipped(run_id: str, reason: str) -> Outcome:
    log.info("nothing started: %s", reason)
    return Outcome(status="skipped", run_id=run_id, reason=reason)
