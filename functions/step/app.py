"""Step: one model step of a run (see stepwise.loop.step). The only function that imports litellm."""

from typing import Any

from stepwise.core import observability, snapstart
from stepwise.core.observability import logger
from stepwise.store import wiring

metrics = observability.metrics()
wiring.install()  # this process's stores: DynamoDB's, built on first use
# Under SnapStart init runs once per published version: the loop and litellm are imported into the
# snapshot there, and clients are rebuilt after each restore. Without it (locally, $LATEST) the loop
# is imported by the first call, so the module itself stays as light as a minimal Powertools handler.


def warm() -> None:
    """What a snapshot should hold: the loop, and litellm loaded by the model client."""
    from stepwise.llm import client
    from stepwise.loop import step  # noqa: F401 — the handler imports it on its first call otherwise

    client.warm()


snapstart.prepare(warm)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@observability.traced
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from stepwise.loop import step

    # The step this call takes is bound (with the session) once the run is loaded.
    observability.bind(tenant_id=event.get("tenant_id"), run_id=event.get("run_id"), step=event.get("step"))
    return step.handle(event)
