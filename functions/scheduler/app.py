"""SchedulerFunction: a schedule's delivery (EventBridge Scheduler) or an EventBridge rule's event
starts its agent's run, once however often it is delivered. Both kinds share this function because
they share its dependency footprint and permissions: the payload says which it is (see
stepwise.schedules for the target configuration of each)."""

from typing import Any

from stepwise.core import observability
from stepwise.core.observability import logger
from stepwise.store import wiring

metrics = observability.metrics()
wiring.install()  # this process's stores: DynamoDB's, built on first use
# The domain is imported by the first call, not at init: the module stays as light as a minimal
# Powertools handler (tests/unit/test_imports.py; bench/cold_imports.py measures both).


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@observability.traced
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from stepwise.schedules.triggers import deliver

    observability.bind(
        tenant_id=event.get("tenant_id"),
        agent_id=event.get("agent_id"),
        trigger=event.get("schedule_id") or event.get("id"),
    )
    outcome = deliver(event)
    logger.info("delivery handled", extra=outcome.model_dump())
    return outcome.model_dump()
