"""Schedules, one item each under the tenant. An agent has few, so its list is a filtered query of the
tenant's partition rather than an index."""

from __future__ import annotations

from pynamodb.exceptions import DoesNotExist, TransactWriteError
from pynamodb.transactions import TransactWrite

from stepwise.core import config, quotas
from stepwise.core.errors import NotFound
from stepwise.core.tables import ScheduleItem, bind, connection
from stepwise.schedules.models import Schedule


def _to_model(item: ScheduleItem) -> Schedule:
    return Schedule(
        schedule_id=item.schedule_id,
        agent_id=item.agent_id,
        expression=item.expression,
        timezone=item.timezone,
        message=item.message,
        enabled=bool(item.enabled),
        created_at=item.created_at,
    )


def create(tenant_id: str, schedule: Schedule) -> Schedule:
    """Store the schedule; it takes one of the tenant's schedule slots in the same write (429 when none
    is left)."""
    bind()
    item = ScheduleItem(
        tenant_id,
        schedule.schedule_id,
        agent_id=schedule.agent_id,
        expression=schedule.expression,
        timezone=schedule.timezone,
        message=schedule.message,
        enabled=schedule.enabled,
        created_at=schedule.created_at,
    )
    limit = config.quotas().max_schedules
    try:
        with TransactWrite(connection=connection()) as tx:
            tx.save(item, condition=ScheduleItem.schedule_id.does_not_exist())
            quotas.take(tx, tenant_id, quotas.SCHEDULES, limit)
    except TransactWriteError as exc:
        if quotas.refused_by(exc, 1) and not quotas.refused_by(exc, 0):
            raise quotas.exceeded(quotas.SCHEDULES, limit) from exc
        raise
    return schedule


def find(tenant_id: str, schedule_id: str) -> Schedule | None:
    """The schedule, or None when it was deleted (or never was)."""
    bind()
    try:
        return _to_model(ScheduleItem.get(tenant_id, schedule_id, consistent_read=True))
    except DoesNotExist:
        return None


def get(tenant_id: str, agent_id: str, schedule_id: str) -> Schedule:
    """The agent's schedule; another agent's (or another tenant's) is as absent as a missing one."""
    schedule = find(tenant_id, schedule_id)
    if schedule is None or schedule.agent_id != agent_id:
        raise NotFound(f"agent {agent_id} has no schedule {schedule_id}", code="schedule_not_found")
    return schedule


def list_for_agent(tenant_id: str, agent_id: str) -> list[Schedule]:
    """The agent's schedules, oldest first (schedule ids sort by creation time)."""
    bind()
    items = ScheduleItem.query(tenant_id, filter_condition=ScheduleItem.agent_id == agent_id)
    return [_to_model(item) for item in items]


def delete(tenant_id: str, schedule_id: str) -> None:
    """Remove the schedule and give its slot back, once: deleting it again changes nothing."""
    bind()
    try:
        with TransactWrite(connection=connection()) as tx:
            tx.delete(ScheduleItem(tenant_id, schedule_id), condition=ScheduleItem.schedule_id.exists())
            quotas.give_back(tx, tenant_id, quotas.SCHEDULES)
    except TransactWriteError as exc:
        if not quotas.refused_by(exc, 0):
            raise
