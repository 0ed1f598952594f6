"""API function: every route of the HTTP API. Never imports litellm (see tests/unit/test_imports.py)."""

from typing import Any

from aws_lambda_powertools.logging import correlation_paths

from stepwise.api.app import handle
from stepwise.api.auth import known_tenant
from stepwise.core import observability
from stepwise.core.observability import logger
from stepwise.store import wiring

metrics = observability.metrics()
wiring.install()  # this process's stores: DynamoDB's, built on first use


# log_event=False whatever POWERTOOLS_LOGGER_LOG_EVENT says: events carry API keys, setting values and
# approval tokens. Nor do responses reach a trace.
@logger.inject_lambda_context(
    correlation_id_path=correlation_paths.API_GATEWAY_HTTP, log_event=False, clear_state=True
)
@metrics.log_metrics
@observability.traced
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    observability.bind_request(event, known_tenant(event))
    response = handle(event, context)
    # The route's template (`GET /v1/approvals/{token}`), never the raw path: a token is a credential.
    logger.info("request", extra={"route": event.get("routeKey"), "status": response.get("statusCode")})
    return response
