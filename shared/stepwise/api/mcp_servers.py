"""/v1/agents/{id}/mcp-servers: register, list, show, delete and refresh an agent's MCP servers.

Header values are secrets (they usually carry credentials): no response shows them, only their names.
"""

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise.api.context import tenant
from stepwise.api.params import AgentId
from stepwise.api.responses import json_response, responses
from stepwise.mcp import servers
from stepwise.mcp.models import MCP_TIMEOUT, McpServerCreate, McpServerList, McpServerView
from stepwise.store import mcp as store

router = APIGatewayHttpRouter()
MCP = ["mcp-servers"]

RESPONSE_MARGIN = 5.0  # seconds of the Lambda's time kept for storing and answering after a discovery


def _discovery_timeout() -> float:
    """MCP_TIMEOUT, or less when the Lambda has less time left: a discovery cut short is recorded as an
    error, whereas a Lambda stopped mid-discovery would store nothing and answer nothing."""
    remaining = router.lambda_context.get_remaining_time_in_millis() / 1000
    return max(1.0, min(MCP_TIMEOUT, remaining - RESPONSE_MARGIN))


@router.post(
    "/v1/agents/<agent_id>/mcp-servers",
    summary="Register an MCP server",
    description="Discovers the server's tools right away; a discovery that fails is kept as `last_error`. "
    "Header values are never shown again, only their names.",
    responses=responses(201, "The server with the tools found", 400, 404, 409, 413),
    tags=MCP,
)
def register_mcp_server(agent_id: AgentId, body: McpServerCreate) -> Response[McpServerView]:
    server = servers.register(tenant(router), agent_id, body, timeout=_discovery_timeout())
    return json_response(server.view().model_dump(mode="json"), 201)


@router.get(
    "/v1/agents/<agent_id>/mcp-servers",
    summary="List an agent's MCP servers",
    responses=responses(200, "The servers", 404),
    tags=MCP,
)
def list_mcp_servers(agent_id: AgentId) -> Response[McpServerList]:
    found = store.list_servers(tenant(router), agent_id)
    return json_response({"mcp_servers": [s.view().model_dump(mode="json") for s in found]})


@router.get(
    "/v1/agents/<agent_id>/mcp-servers/<name>",
    summary="Get an MCP server",
    responses=responses(200, "The server", 404),
    tags=MCP,
)
def get_mcp_server(agent_id: AgentId, name: str) -> Response[McpServerView]:
    return json_response(store.get_server(tenant(router), agent_id, name).view().model_dump(mode="json"))


@router.delete(
    "/v1/agents/<agent_id>/mcp-servers/<name>",
    summary="Remove an MCP server",
    responses=responses(204, "Removed", 404, 409, content={}),
    tags=MCP,
)
def delete_mcp_server(agent_id: AgentId, name: str) -> Response[None]:
    store.remove_server(tenant(router), agent_id, name)
    return Response(status_code=204)


@router.post(
    "/v1/agents/<agent_id>/mcp-servers/<name>/refresh",
    summary="Re-discover an MCP server's tools",
    responses=responses(200, "The server with the tools found, or `last_error`", 404, 409),
    tags=MCP,
)
def refresh_mcp_server(agent_id: AgentId, name: str) -> Response[McpServerView]:
    """Discover the server's tools now; the answer has the tools found, or `last_error`."""
    server = servers.refresh(tenant(router), agent_id, name, timeout=_discovery_timeout())
    return json_response(server.view().model_dump(mode="json"))
