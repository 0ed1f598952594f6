"""POST /v1/agents/{agent_id}/ag-ui: the AG-UI door (stepwise.protocols.agui), served by the light events
function like the run's other streams."""

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise.api.context import tenant
from stepwise.api.params import AgentId
from stepwise.api.responses import responses
from stepwise.protocols import agui

router = APIGatewayHttpRouter()

# One AG-UI event, as the official clients' SSE parser reads it (OpenAPI 3.1 has no itemSchema yet).
AGUI_EVENT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "data": {
            "type": "string",
            "description": "One AG-UI 1.0 event as JSON (camelCase fields, discriminated by `type`)",
        }
    },
    "required": ["data"],
}


@router.post(
    "/v1/agents/<agent_id>/ag-ui",
    summary="Run the agent over AG-UI 1.0",
    description="Takes AG-UI's `RunAgentInput` and answers with AG-UI events as Server-Sent Events. "
    "`threadId` is the session (a `ses_…` id is that session; any other id names a session of its own); "
    "`runId` is the run's idempotency key (a retried request streams the same run); the last message, "
    "when it is the user's, starts a run; `tools` become client tools of that run alone; `state` and "
    "`forwardedProps` go into its metadata (`ag_ui`). A run that waits on approvals or client tools ends "
    "its stream with `RUN_FINISHED` `outcome: {type: interrupt}`, one interrupt per waiting interaction "
    "(its id is the interaction id); `resume` answers them and streams the same run on. A stream ends "
    "within `wait` seconds: a run still working then ends it with an interrupt of reason "
    "`stepwise:continue`, which a resume continues from where it stopped.",
    responses=responses(
        200,
        "AG-UI events",
        400,
        404,
        409,
        410,
        413,
        503,
        content={"text/event-stream": {"schema": AGUI_EVENT}},
    ),
    tags=["protocols"],
)
def run_agent(
    agent_id: AgentId,
    body: agui.RunAgentInput,
    wait: Annotated[
        float, Query(ge=0, le=agui.STREAM_BOUND, description="Seconds this response may stream")
    ] = agui.STREAM_BOUND,
) -> Response[str]:
    events = agui.run(tenant(router), agent_id, body, wait, lambda_context=router.lambda_context)
    return Response(
        status_code=200,
        content_type="text/event-stream",
        body=events,
        headers={"Cache-Control": "no-cache"},
    )
