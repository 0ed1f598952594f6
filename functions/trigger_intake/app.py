"""TriggerIntakeFunction: POST /v1/triggers/{trigger_id}/in, the public intake of webhook triggers.
It verifies, records and enqueues; it starts nothing (stepwise.triggers.intake)."""

from typing import Any

from aws_lambda_powertools.logging import correlation_paths

from stepwise.core import observability
from stepwise.core.observability import logger

metrics = observability.metrics()
# The resolver and the domain are imported by the first call, not at init: the module stays as light as
# a minimal Powertools handler (tests/unit/test_imports.py).


# log_event=False: a delivery's body and headers are the sender's data, not ours to log.
@logger.inject_lambda_context(
    correlation_id_path=correlation_paths.API_GATEWAY_HTTP, log_event=False, clear_state=True
)
@metrics.log_metrics
@observability.traced
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from stepwise.api import intake_app

    response = intake_app.handle(event, context)
    logger.info("trigger intake", extra={"status": response.get("statusCode")})
    return response
