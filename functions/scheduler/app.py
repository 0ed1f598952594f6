"""SchedulerFunction: a schedule's delivery (EventBridge Scheduler) or an EventBridge rule's event
starts its agent's run, once however often it is delivered. Both kinds share this function because
they share its dependency footprint and permissions: the payload says which it is (see
stepwise.schedules for the target configuration of each)."""

from typing import Any

from aws_lambda_powertools import Logger

from stepwise.schedules.triggers import deliver

logger = Logger(service="stepwise")


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    logger.append_keys(
        tenant_id=event.get("tenant_id"),
        agent_id=event.get("agent_id"),
        trigger=event.get("schedule_id") or event.get("id"),
    )
    outcome = deliver(event)
    logger.info("delivery handled", extra=outcome.model_dump())
    return outcome.model_dump()
