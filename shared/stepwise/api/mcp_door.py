"""/v1/mcp: the tenant's MCP-enabled agents as one MCP server (stepwise.protocols.mcp_server)."""

from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise.api.context import tenant
from stepwise.api.responses import JSON, error_response, responses

router = APIGatewayHttpRouter()
MCP = ["mcp"]

# A JSON-RPC message, as the OpenAPI spec can say it (the MCP schema itself is the protocol's).
JSONRPC_MESSAGE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "jsonrpc": {"type": "string", "enum": ["2.0"]},
        "id": {"type": ["string", "integer", "null"]},  # null: an error about a message it could not read
        "method": {"type": "string"},
        "params": {"type": "object"},
        "result": {"type": "object"},
        "error": {"type": "object"},
    },
    "required": ["jsonrpc"],
}
SSE_MESSAGES: dict[str, Any] = {
    "type": "string",
    "description": "`event: message` frames: progress notifications, then the JSON-RPC response",
}


@router.post(
    "/v1/mcp",
    summary="MCP server (streamable HTTP)",
    description="One JSON-RPC message of the Model Context Protocol (2025-11-25, and the handshake "
    "versions before it) per request, stateless (no `Mcp-Session-Id`). `tools/list` lists each agent "
    "with `mcp: {enabled: true}` as a tool taking `{message, session_id?}`; `tools/call` runs it and "
    "answers with the final reply, `run_id` and `session_id` in `structuredContent`. Called as a task "
    "(`params.task`), it answers at once and the task is the run: `tasks/get`, `tasks/result`, "
    "`tasks/cancel`, `tasks/list`. A blocking call waits up to 24 s; with a `progressToken` the answer is "
    "`text/event-stream`: progress notifications, then the result. A notification is 202 with no body; "
    "a body that is not JSON, or not one JSON-RPC 2.0 message, is 400 with the JSON-RPC error.",
    responses={
        **responses(
            200,
            "The JSON-RPC response (or a JSON-RPC error)",
            content={JSON: {"schema": JSONRPC_MESSAGE}, "text/event-stream": {"schema": SSE_MESSAGES}},
        ),
        # In the protocol's shape: an MCP client reads a JSON-RPC error here.
        400: {
            "description": "Not JSON (-32700), not one JSON-RPC message (-32600), or an unsupported "
            "MCP-Protocol-Version (-32022): a JSON-RPC error without id",
            # The contract's shape too: a body too large is refused before the door reads it.
            "content": {
                JSON: {"schema": {"anyOf": [{"$ref": "#/components/schemas/Error"}, JSONRPC_MESSAGE]}}
            },
        },
        **responses(202, "A notification or a response: accepted, nothing to answer", content={}),
    },
    tags=MCP,
)
def mcp_message() -> Response[Any]:
    # Imported on the first MCP request: the protocol's wire types cost ~0.4 s of import that no
    # other route of the API function should pay at cold start.
    from stepwise.protocols import mcp_server

    event = router.current_event
    reply = mcp_server.handle(tenant(router), event.body, event.headers)
    return Response(status_code=reply.status, content_type=reply.content_type, body=reply.body)


@router.get("/v1/mcp", include_in_schema=False)
def mcp_stream() -> Response[Any]:
    """No server-sent stream: the server is stateless and sends nothing outside its answers."""
    allow = {"Allow": "POST"}
    return error_response(405, "method_not_allowed", "POST MCP messages to /v1/mcp", headers=allow)
