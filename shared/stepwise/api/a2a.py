"""/a2a/{agent_id}: an agent's A2A door (stepwise.protocols.a2a translates; these routes only carry
requests in and answers out). Served by the light events function: a call may wait or stream."""

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Header
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise.agents import store as agents
from stepwise.agents.models import Agent
from stepwise.api.auth import PUBLIC
from stepwise.api.context import tenant
from stepwise.api.params import AgentId
from stepwise.api.responses import error_response, json_response, responses
from stepwise.core.errors import NotFound
from stepwise.protocols import a2a

router = APIGatewayHttpRouter()
A2A = ["a2a"]

# The JSON-RPC envelope (the methods' params and results are a2a.proto's JSON mapping).
JSON_RPC: dict[str, Any] = {
    "type": "object",
    "properties": {
        "jsonrpc": {"const": "2.0"},
        "id": {"anyOf": [{"type": "string"}, {"type": "integer"}], "description": "Echoed in the response"},
        "method": {"type": "string", "examples": ["SendMessage", "GetTask"]},
        "params": {"type": "object"},
    },
    "required": ["jsonrpc", "method"],
}
JSON_RPC_RESPONSE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "jsonrpc": {"const": "2.0"},
        "id": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
        "result": {"type": "object"},
        "error": {
            "type": "object",
            "properties": {"code": {"type": "integer"}, "message": {"type": "string"}, "data": {}},
            "required": ["code", "message"],
        },
    },
    "required": ["jsonrpc"],
}
SSE_RESPONSES: dict[str, Any] = {
    "type": "string",
    "description": "`data:` frames, each a JSON-RPC response; `id:` is the run's event seq",
}


def _base_url() -> str:
    """The API's own absolute URL as the caller reached it (host and stage of this request)."""
    event = router.current_event.raw_event
    context = event.get("requestContext") or {}
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    scheme = headers.get("x-forwarded-proto", "https")
    host = context.get("domainName") or headers.get("host", "")
    stage = context.get("stage") or "$default"
    return f"{scheme}://{host}" + ("" if stage == "$default" else f"/{stage}")


@router.get(
    "/a2a/<agent_id>/.well-known/agent-card.json",
    summary="An agent's A2A agent card",
    description="Public, like the approval pages: the agent's name, description and skills, its "
    "capabilities (streaming, push notifications), the bearer security scheme and its JSON-RPC interface "
    "`POST /a2a/{agent_id}`. 404 unless the agent has `a2a: {enabled: true}`.",
    responses=responses(200, "The agent card (A2A 1.0)", 404),
    tags=A2A,
    openapi_extensions=PUBLIC,
)
def agent_card(agent_id: AgentId) -> Response[dict[str, Any]]:
    found = agents.find_a2a(agent_id)
    if found is None:
        return error_response(404, "agent_not_found", f"agent {agent_id} has no A2A agent card")
    return json_response(a2a.card(found[1], _base_url()), headers={"Cache-Control": "max-age=60"})


@router.post(
    "/a2a/<agent_id>",
    summary="Call an agent over A2A (JSON-RPC)",
    description="A2A 1.0's JSON-RPC binding: SendMessage, SendStreamingMessage (SSE), GetTask, ListTasks, "
    "CancelTask, SubscribeToTask (SSE; resumes after `Last-Event-ID`), and the push notification config "
    "methods. A task is a run and its contextId the run's session. Errors are JSON-RPC errors with A2A's "
    "codes and, in `data`, an ErrorInfo whose `metadata.code` is stable. A stream ends within 20 s; "
    "resubscribe to go on.",
    responses=responses(
        200,
        "A JSON-RPC response (a result or a JSON-RPC error), or an SSE stream of them",
        400,  # a body that is not JSON at all is refused before the door reads it, in the API's shape
        413,
        content={
            "application/json": {"schema": JSON_RPC_RESPONSE},
            "text/event-stream": {"schema": SSE_RESPONSES},
        },
    ),
    tags=A2A,
    openapi_extensions={
        "requestBody": {"required": True, "content": {"application/json": {"schema": JSON_RPC}}}
    },
)
def call(
    agent_id: AgentId,
    last_event_id: Annotated[
        str | None, Header(alias="last-event-id", description="SubscribeToTask: resume after this event seq")
    ] = None,
) -> Response[Any]:
    tenant_id = tenant(router)

    def agent() -> Agent | None:
        try:
            found = agents.get(tenant_id, agent_id)
        except NotFound:
            return None
        return found if found.a2a.enabled else None

    reply = a2a.handle(
        tenant_id,
        agent_id,
        agent,
        router.current_event.decoded_body,
        last_event_id=last_event_id,
        lambda_context=router.lambda_context,
    )
    if reply.stream is not None:
        return Response(
            status_code=200,
            content_type="text/event-stream",
            body=reply.stream,
            headers={"Cache-Control": "no-cache"},
        )
    return json_response(reply.json)
