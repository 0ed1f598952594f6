"""Reconciler: settles runs whose execution ended outside their steps (an EventBridge rule on the
state machine's status changes), and sweeps for any that slipped through (a 5-minute schedule)."""

from typing import Any

from stepwise.core import observability
from stepwise.core.observability import logger
from stepwise.store import wiring

metrics = observability.metrics()
wiring.install()  # this process's stores: DynamoDB's, built on first use
# The domain is imported by the first call, not at init: the module stays as light as a minimal
# Powertools handler (tests/unit/test_imports.py; bench/cold_imports.py measures both).

# Stop sweeping this long before the Lambda's own timeout, so the report still gets out.
SWEEP_MARGIN_SECONDS = 10.0


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@observability.traced
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from stepwise.runs import bulk_cancel, reconcile
    from stepwise.usage import circuits, service

    budget = context.get_remaining_time_in_millis() / 1000 - SWEEP_MARGIN_SECONDS
    if bulk_cancel.is_continuation(event):  # a bulk cancel too large for its request goes on here
        return bulk_cancel.go_on(event, seconds=max(budget, 1.0), function=context.invoked_function_arn)
    trigger = reconcile.parse(event)
    if isinstance(trigger, reconcile.ExecutionStatusChange):
        observability.bind(run_id=trigger.detail.name)
        return reconcile.on_status_change(trigger).model_dump(mode="json")
    budget = context.get_remaining_time_in_millis() / 1000 - SWEEP_MARGIN_SECONDS
    report = reconcile.sweep(budget_seconds=max(budget, 0.0)).model_dump(mode="json")
    # Runs parked on a budget that now allows them (its period turned): a bounded page, oldest first.
    report["resumed_parked"] = service.sweep()
    # Providers' circuits: probe the open ones (through the Step function, where litellm is), resume
    # the runs of the closed ones.
    report["circuits"] = circuits.sweep(circuits.probe_through_step).model_dump()
    return report
