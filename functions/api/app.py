"""API function: every route of the HTTP API. Never imports litellm (see tests/unit/test_imports.py)."""

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging import correlation_paths

from stepwise.api.app import handle

logger = Logger(service="stepwise")


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return handle(event, context)
