"""Notify: the first act of every wait. Stores the task token, then tells humans or the app."""

from typing import Any

from aws_lambda_powertools import Logger

from stepwise import waits

logger = Logger(service="stepwise")


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    logger.append_keys(tenant_id=event.get("tenant_id"), run_id=event.get("run_id"))
    return waits.handle(event)
