"""TriggerWorkerFunction: start the runs of queued trigger deliveries, once each
(stepwise.triggers.worker)."""

from typing import Any

from stepwise.core import observability
from stepwise.core.observability import logger
from stepwise.store import wiring
from stepwise.triggers import worker

metrics = observability.metrics()
wiring.install()  # this process's stores: DynamoDB's, built on first use


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@observability.traced
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return worker.handle(event, context)
