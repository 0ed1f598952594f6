"""Await: the first act of every wait. Stores the task token, then tells humans or the app
(see stepwise.loop.await_)."""

from typing import Any

from stepwise.core import observability
from stepwise.core.observability import logger
from stepwise.store import wiring

metrics = observability.metrics()
wiring.install()  # this process's stores: DynamoDB's, built on first use
# The domain is imported by the first call, not at init: the module stays as light as a minimal
# Powertools handler (tests/unit/test_imports.py; bench/cold_imports.py measures both).


# The event carries the wait's task token: never logged, and nothing of it is traced either.
@logger.inject_lambda_context(log_event=False, clear_state=True)
@metrics.log_metrics
@observability.traced
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from stepwise.loop import await_

    observability.bind(tenant_id=event.get("tenant_id"), run_id=event.get("run_id"), step=event.get("step"))
    return await_.handle(event)
