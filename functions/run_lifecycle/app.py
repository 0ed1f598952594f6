"""Prepare, Finalize and Failed: the states around the loop (one function each, one footprint)."""

from typing import Any

from stepwise import lifecycle, observability
from stepwise.models import FailedState, RunState
from stepwise.observability import logger

tracer = observability.tracer()
metrics = observability.metrics()


def _scope(event: dict[str, Any]) -> None:
    # The session is added where the run is loaded (stepwise.lifecycle → observability.bind_run).
    observability.bind(tenant_id=event.get("tenant_id"), run_id=event.get("run_id"), step=event.get("step"))


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def prepare(event: dict[str, Any], context: Any) -> dict[str, Any]:
    _scope(event)
    return lifecycle.prepare(RunState.model_validate(event)).model_dump()


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def finalize(event: dict[str, Any], context: Any) -> dict[str, Any]:
    _scope(event)
    return lifecycle.finalize(RunState.model_validate(event)).model_dump()


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def failed(event: dict[str, Any], context: Any) -> dict[str, Any]:
    _scope(event)
    return lifecycle.fail(FailedState.model_validate(event)).model_dump()
