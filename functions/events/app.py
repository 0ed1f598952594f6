"""Events function: the light reads and the pushes of a run's events (GET …/events, GET …/stream,
POST …/follow) and the WebSocket API that follows a run (its authorizer, $connect, $disconnect).
At 256 MB with none of litellm, sqlglot, SQLAlchemy or the MCP SDK (see tests/unit/test_imports.py),
it is the function a client keeps busy while it long-polls."""

from typing import Any

from aws_lambda_powertools.logging import correlation_paths

from stepwise.api.auth import known_tenant
from stepwise.core import observability
from stepwise.core.observability import logger
from stepwise.store import wiring

metrics = observability.metrics()
wiring.install()  # this process's stores: DynamoDB's, built on first use
# The domain is imported by the first call, not at init: the module stays as light as a minimal
# Powertools handler (tests/unit/test_imports.py; bench/cold_imports.py measures both).


# log_event=False: the follow URL's token is a credential, and events carry API keys.
@logger.inject_lambda_context(
    correlation_id_path=correlation_paths.API_GATEWAY_HTTP, log_event=False, clear_state=True
)
@metrics.log_metrics
@observability.traced
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from stepwise.api import light
    from stepwise.follow import handlers

    kind = handlers.kind(event)
    if kind == "authorize":
        return handlers.authorize(event)
    if kind == "connect":
        return handlers.connect(event, context.invoked_function_arn)
    if kind == "disconnect":
        return handlers.disconnect(event)
    if kind == "flush":
        return handlers.flush(event)
    observability.bind_request(event, known_tenant(event))
    response = light.handle(event, context)
    logger.info("request", extra={"route": event.get("routeKey"), "status": response.get("statusCode")})
    return response
