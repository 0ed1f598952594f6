"""Gate: permission, then execution of one tool call (see stepwise.gate)."""

from typing import Any

from stepwise import gate, observability
from stepwise.observability import logger

tracer = observability.tracer()
metrics = observability.metrics()


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    task = gate.GateTask.model_validate(event)
    observability.bind(
        tenant_id=task.tenant_id, run_id=task.run_id, step=task.step, tool_call_id=task.tool_call.id
    )
    return gate.gate(task).model_dump()
