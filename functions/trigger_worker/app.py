"""TriggerWorkerFunction: start the runs of queued trigger deliveries, once each
(stepwise.triggers.worker)."""

from typing import Any

from stepwise.core import observability
from stepwise.core.observability import logger
from stepwise.store import wiring

metrics = observability.metrics()
wiring.install()  # this process's stores: DynamoDB's, built on first use
# The domain is imported by the first call, not at init: the module stays as light as a minimal
# Powertools handler (tests/unit/test_imports.py).


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@observability.traced
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    if event.get("renew") == "watches":  # the daily schedule: mailbox watches near their end
        from stepwise.triggers import gmail

        renewed = gmail.renew_due()
        logger.info("watches renewed", extra={"triggers": renewed})
        return {"renewed": renewed}
    from stepwise.triggers import worker

    return worker.handle(event, context)
