"""/v1/agents and their tools."""

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise.api.context import tenant
from stepwise.api.responses import json_response
from stepwise.ids import new_id
from stepwise.mcp.models import public_servers
from stepwise.models import Agent, AgentCreate, AgentPatch, Tool
from stepwise.schedules import service as schedules
from stepwise.store import agents

router = APIGatewayHttpRouter()


def view(agent: Agent) -> dict[str, Any]:
    """An agent as the API shows it: MCP server headers (credentials) masked."""
    return {**agent.model_dump(mode="json"), "mcp_servers": public_servers(agent)}


@router.post("/v1/agents")
def create_agent(body: AgentCreate) -> Response[Agent]:
    agent = agents.create(tenant(router), new_id("agt"), body)
    return json_response(view(agent), 201)


@router.get("/v1/agents")
def list_agents() -> Response[dict[str, list[Agent]]]:
    return json_response({"agents": [view(a) for a in agents.list_all(tenant(router))]})


@router.get("/v1/agents/<agent_id>")
def get_agent(agent_id: str) -> Response[Agent]:
    return json_response(view(agents.get(tenant(router), agent_id)))


@router.patch("/v1/agents/<agent_id>")
def patch_agent(agent_id: str, body: AgentPatch) -> Response[Agent]:
    changes = body.model_dump(exclude_unset=True)
    return json_response(view(agents.update(tenant(router), agent_id, changes)))


@router.delete("/v1/agents/<agent_id>")
def delete_agent(agent_id: str) -> Response[None]:
    tenant_id = tenant(router)
    agents.get(tenant_id, agent_id)
    for schedule in schedules.list_for_agent(tenant_id, agent_id):  # nothing fires for a deleted agent
        schedules.delete(tenant_id, agent_id, schedule.schedule_id)
    agents.delete(tenant_id, agent_id)
    return Response(status_code=204)


@router.post("/v1/agents/<agent_id>/tools")
def add_tool(agent_id: str, body: Annotated[Tool, Body()]) -> Response[dict[str, Any]]:
    agent = agents.add_tool(tenant(router), agent_id, body)
    tool = agent.tool(body.name)
    return json_response(tool.model_dump(mode="json") if tool else None, 201)


@router.get("/v1/agents/<agent_id>/tools")
def list_tools(agent_id: str) -> Response[dict[str, list[dict[str, Any]]]]:
    agent = agents.get(tenant(router), agent_id)
    return json_response({"tools": [t.model_dump(mode="json") for t in agent.tools]})


@router.delete("/v1/agents/<agent_id>/tools/<name>")
def delete_tool(agent_id: str, name: str) -> Response[None]:
    agents.remove_tool(tenant(router), agent_id, name)
    return Response(status_code=204)
