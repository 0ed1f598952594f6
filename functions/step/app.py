"""Step: one model step of a run (see stepwise.loop.step). The only function that imports litellm."""

from typing import Any

from stepwise import observability, snapstart
from stepwise.loop import step
from stepwise.models import RunState
from stepwise.observability import logger

tracer = observability.lazy_tracer()  # no X-Ray SDK at import: built on the first traced call
metrics = observability.metrics()
snapstart.prepare()  # under SnapStart: litellm warm in the snapshot, clients rebuilt after restore


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    # The step this call takes is bound (with the session) once the run is loaded.
    observability.bind(tenant_id=event.get("tenant_id"), run_id=event.get("run_id"), step=event.get("step"))
    if event.get("mode") == "sync":  # POST /v1/agents/{id}/run, invoked by the API function
        run = step.sync_answer(event["tenant_id"], event["run_id"])
        return {"run_id": run.run_id, "status": run.status}
    return step.step(RunState.model_validate(event)).model_dump()
