"""A schedule is two things kept together: our item (what to say to which agent) and its EventBridge
Scheduler twin (when), named after the schedule id in the stack's schedule group. The item is written
first and removed again if the twin cannot be made, so a failed create leaves nothing behind; a
delivery whose item is gone starts nothing, so a twin that outlives its item is harmless."""

from __future__ import annotations

import json
import logging
from typing import Any

from stepwise.core import aws, config
from stepwise.core.errors import Unavailable
from stepwise.core.ids import new_id
from stepwise.core.schema import utcnow
from stepwise.runs.ports import stores
from stepwise.schedules import expressions, store
from stepwise.schedules.expressions import At
from stepwise.schedules.models import Schedule, ScheduleCreate, WorkflowSchedule, WorkflowScheduleCreate

log = logging.getLogger(__name__)

# Scheduler substitutes this context attribute in the target's Input at each delivery.
SCHEDULED_TIME = "<aws.scheduler.scheduled-time>"
# Scheduler's own defaults, stated: a delivery that fails is retried for up to a day.
RETRY_POLICY = {"MaximumEventAgeInSeconds": 86_400, "MaximumRetryAttempts": 185}


class ScheduleUnavailable(Unavailable):
    code = "schedule_unavailable"


def delivery_input(tenant_id: str, schedule: Schedule) -> str:
    """The twin's target Input: the delivery payload, its time left for Scheduler to fill in."""
    return json.dumps(
        {
            "tenant_id": tenant_id,
            "agent_id": schedule.agent_id,
            "schedule_id": schedule.schedule_id,
            "scheduled_time": SCHEDULED_TIME,
        }
    )


def create(tenant_id: str, agent_id: str, body: ScheduleCreate) -> Schedule:
    stores().agents.get(tenant_id, agent_id)  # another tenant's agent is a 404 like a missing one
    return _create(tenant_id, agent_id, body.model_dump())


def create_for_workflow(tenant_id: str, workflow_id: str, body: WorkflowScheduleCreate) -> WorkflowSchedule:
    """A workflow's schedule: stored as any schedule, its target the workflow and its message the
    input as JSON. The input is checked against the workflow's latest input_schema now (a 422 here
    rather than a firing that starts nothing) and again, against the version then latest, at each
    firing."""
    from stepwise.workflows import service as workflows
    from stepwise.workflows.starting import check_input

    found = workflows.get(tenant_id, workflow_id)  # another tenant's workflow is a 404 too
    if found.input_schema:
        check_input(found.input_schema, body.input)
    fields = body.model_dump(exclude={"input"})
    fields["message"] = json.dumps(body.input, separators=(",", ":"))
    return WorkflowSchedule.of(_create(tenant_id, workflow_id, fields))


def _create(tenant_id: str, target_id: str, fields: dict[str, Any]) -> Schedule:
    now = utcnow().replace(microsecond=0)
    schedule = Schedule(**fields, schedule_id=new_id("sch"), agent_id=target_id, created_at=now)
    store.create(tenant_id, schedule)
    try:
        _create_twin(tenant_id, schedule)
    except Exception as exc:
        store.delete(tenant_id, schedule.schedule_id)
        raise ScheduleUnavailable("the schedule could not be created; nothing was kept, try again") from exc
    return schedule.with_next_run(now)


def _create_twin(tenant_id: str, schedule: Schedule) -> None:
    where = config.scheduling()
    args: dict[str, Any] = {
        "Name": schedule.schedule_id,
        "GroupName": where.group,
        "ClientToken": schedule.schedule_id,
        "Description": f"Stepwise: runs {_target(schedule.agent_id)}",
        "ScheduleExpression": schedule.expression,
        "ScheduleExpressionTimezone": schedule.timezone,
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "State": "ENABLED" if schedule.enabled else "DISABLED",
        "Target": {
            "Arn": where.function_arn,
            "RoleArn": where.role_arn,
            "Input": delivery_input(tenant_id, schedule),
            "RetryPolicy": RETRY_POLICY,
            "DeadLetterConfig": {"Arn": where.dead_letter_arn},
        },
    }
    if not isinstance(expressions.parse(schedule.expression), At):
        # The same start the API reports next_run from: a rate counts from it (Scheduler ignores
        # StartDate for one-time schedules).
        args["StartDate"] = schedule.created_at
    aws.client("scheduler").create_schedule(**args)


def _target(target_id: str) -> str:
    return f"workflow {target_id}" if target_id.startswith("wfl_") else f"agent {target_id}"


def list_for_workflow(tenant_id: str, workflow_id: str) -> list[WorkflowSchedule]:
    from stepwise.workflows import service as workflows

    workflows.get(tenant_id, workflow_id)
    now = utcnow()
    return [WorkflowSchedule.of(s.with_next_run(now)) for s in store.list_for_agent(tenant_id, workflow_id)]


def list_for_agent(tenant_id: str, agent_id: str) -> list[Schedule]:
    stores().agents.get(tenant_id, agent_id)
    now = utcnow()
    return [s.with_next_run(now) for s in store.list_for_agent(tenant_id, agent_id)]


def delete(tenant_id: str, agent_id: str, schedule_id: str) -> None:
    """The twin first: if removing it fails, the item stays and deleting again finishes the job."""
    schedule = store.get(tenant_id, agent_id, schedule_id)  # the target's (an agent's or a workflow's)
    client = aws.client("scheduler")
    try:
        client.delete_schedule(Name=schedule.schedule_id, GroupName=config.scheduling().group)
    except client.exceptions.ResourceNotFoundException:
        log.info("schedule %s had no Scheduler twin left", schedule_id)
    store.delete(tenant_id, schedule_id)
