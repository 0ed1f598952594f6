"""Prepare, Finalize and Failed: the states around the loop (one function each, one footprint)."""

from typing import Any

from aws_lambda_powertools import Logger

from stepwise import lifecycle
from stepwise.models import FailedState, RunState

logger = Logger(service="stepwise")


def _scope(event: dict[str, Any]) -> None:
    logger.append_keys(tenant_id=event.get("tenant_id"), run_id=event.get("run_id"), step=event.get("step"))


@logger.inject_lambda_context
def prepare(event: dict[str, Any], context: Any) -> dict[str, Any]:
    _scope(event)
    return lifecycle.prepare(RunState.model_validate(event)).model_dump()


@logger.inject_lambda_context
def finalize(event: dict[str, Any], context: Any) -> dict[str, Any]:
    _scope(event)
    return lifecycle.finalize(RunState.model_validate(event)).model_dump()


@logger.inject_lambda_context
def failed(event: dict[str, Any], context: Any) -> dict[str, Any]:
    _scope(event)
    return lifecycle.fail(FailedState.model_validate(event)).model_dump()
