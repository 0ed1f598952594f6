"""ModelStep: one model call. The only function that imports litellm (through stepwise.step)."""

from typing import Any

from aws_lambda_powertools import Logger

from stepwise import step
from stepwise.models import RunState

logger = Logger(service="stepwise")


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    logger.append_keys(tenant_id=event.get("tenant_id"), run_id=event.get("run_id"), step=event.get("step"))
    if event.get("mode") == "sync":  # POST /v1/agents/{id}/run, invoked by the API function
        run = step.sync_answer(event["tenant_id"], event["run_id"])
        return {"run_id": run.run_id, "status": run.status}
    return step.model_step(RunState.model_validate(event)).model_dump()
