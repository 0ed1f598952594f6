"""Gate: permission, then execution of one tool call (see stepwise.gate)."""

from typing import Any

from aws_lambda_powertools import Logger

from stepwise import gate

logger = Logger(service="stepwise")


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    task = gate.GateTask.model_validate(event)
    logger.append_keys(
        tenant_id=task.tenant_id, run_id=task.run_id, step=task.step, tool_call_id=task.tool_call.id
    )
    return gate.gate(task).model_dump()
