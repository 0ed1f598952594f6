"""EvalFunction: the EvalRun state machine's tasks (see stepwise.evals.runner): start a case's run
with the task token it waits on, count an ended case, score the eval run, record its failure."""

from typing import Any

from stepwise.core import observability
from stepwise.core.observability import logger
from stepwise.store import wiring

metrics = observability.metrics()
wiring.install()  # this process's stores: DynamoDB's, built on first use
# The domain is imported by the first call, not at init: the module stays as light as a minimal
# Powertools handler (tests/unit/test_imports.py; bench/cold_imports.py measures both).


# A start_case event carries the case's task token: never logged, and nothing of it is traced either.
@logger.inject_lambda_context(log_event=False, clear_state=True)
@metrics.log_metrics
@observability.traced
def handler(event: dict[str, Any], context: Any) -> dict[str, Any] | None:
    from stepwise.evals import runner

    observability.bind(tenant_id=event.get("tenant_id"), eval_run_id=event.get("eval_run_id"))
    action = event.get("action")
    if action == "start_case":
        runner.start_case(event)
        return None
    if action == "case_done":
        return runner.case_done(event)
    if action == "score":
        return runner.score(event)
    if action == "failed":
        return runner.failed(event)
    raise ValueError(f"unknown eval action {action!r}")
