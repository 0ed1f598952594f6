"""Lambda authorizer (HTTP API, payload 2.0, simple responses): API key → tenant."""

from typing import Any

from aws_lambda_powertools.logging import correlation_paths

from stepwise.api.auth import authorize
from stepwise.core import observability
from stepwise.core.observability import logger
from stepwise.store import wiring

metrics = observability.metrics()
wiring.install()  # this process's stores: DynamoDB's, built on first use


# The event carries the API key: never logged (log_event=False whatever the environment says), and
# neither is the decision's context traced.
@logger.inject_lambda_context(
    correlation_id_path=correlation_paths.API_GATEWAY_HTTP, log_event=False, clear_state=True
)
@metrics.log_metrics
@observability.traced
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    headers = event.get("headers") or {}
    return authorize(headers.get("authorization"))
