"""Lambda authorizer (HTTP API, payload 2.0, simple responses): API key → tenant."""

from typing import Any

from aws_lambda_powertools import Logger

from stepwise.api.auth import authorize

logger = Logger(service="stepwise")


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    headers = event.get("headers") or {}
    return authorize(headers.get("authorization"))
