"""WorkflowFunction: the tasks of every workflow's state machine (see stepwise.workflows.running):
start a node's child run with the task token it waits on, turn what came back into the node's output,
record a failed node, end the workflow run."""

from typing import Any

from stepwise.core import observability
from stepwise.core.observability import logger
from stepwise.store import wiring

metrics = observability.metrics()
wiring.install()  # this process's stores: DynamoDB's, built on first use
# The domain is imported by the first call, not at init: the module stays as light as a minimal
# Powertools handler (tests/unit/test_imports.py).


# A start event carries the node's task token: never logged.
@logger.inject_lambda_context(log_event=False, clear_state=True)
@metrics.log_metrics
@observability.traced
def handler(event: dict[str, Any], context: Any) -> dict[str, Any] | None:
    from stepwise.workflows import running

    ctx = (event.get("state") or {}).get("ctx") or {}
    observability.bind(tenant_id=ctx.get("tenant_id"), run_id=ctx.get("run_id"), node_id=event.get("node"))
    return running.handle(event)
