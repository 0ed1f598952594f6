"""Failed: every state's Catch leads here; the run ends failed (see stepwise.loop.failed)."""

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
    from stepwise.loop import failed
    from stepwise.runs.state import FailedState

    observability.bind(tenant_id=event.get("tenant_id"), run_id=event.get("run_id"), step=event.get("step"))
    return failed.fail(FailedState.model_validate(event)).model_dump()
