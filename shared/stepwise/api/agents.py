"""/v1/agents and their tools."""

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body, Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter
from pydantic import BaseModel

from stepwise.agents import bounds, service
from stepwise.agents import store as agents
from stepwise.agents.models import Agent, AgentCreate, AgentPatch, Door, MemoryConfig
from stepwise.api.context import tenant
from stepwise.api.params import AgentId
from stepwise.api.responses import json_response, model_content, responses
from stepwise.core.errors import Unprocessable
from stepwise.core.ids import new_id
from stepwise.core.masking import public_hook, public_tool
from stepwise.hooks.models import applied
from stepwise.loop import weight
from stepwise.mcp.models import public_servers
from stepwise.store import runs
from stepwise.tools.models import AgentTool, Tool, WorkflowTool
from stepwise.webhooks import keys as webhook_keys

router = APIGatewayHttpRouter()
AGENTS = ["agents"]
TOOLS = ["tools"]


class AgentList(BaseModel):
    agents: list[Agent]


class ToolList(BaseModel):
    tools: list[Tool]


def view(agent: Agent) -> dict[str, Any]:
    """An agent as the API shows it: the header values of its tools, hooks and MCP servers (credentials)
    masked."""
    shown = agent.model_dump(mode="json")
    return {
        **shown,
        "tools": [public_tool(t) for t in shown["tools"]],
        "hooks": [public_hook(applied(h)) for h in shown["hooks"]],
        "mcp_servers": public_servers(agent),
    }


def _check_delegates(tenant_id: str, tools: list[Any]) -> None:
    """An agent tool names an agent of the same tenant, a workflow tool a workflow of the tenant:
    another tenant's id is as unknown as a made-up one (422 either way, saying which tool)."""
    for tool in tools:
        if isinstance(tool, WorkflowTool):  # the workflow's, filled in: its description and input
            from stepwise.workflows import service as workflows

            workflows.declare_tool(tenant_id, tool)
        if isinstance(tool, AgentTool) and not agents.exists(tenant_id, tool.agent_id):
            raise Unprocessable(
                f"tool {tool.name}: agent {tool.agent_id} not found",
                code="unknown_agent",
                details=[{"loc": ["body", "agent_id"], "msg": "no such agent", "type": "value_error"}],
            )


@router.post(
    "/v1/agents",
    summary="Create an agent",
    description="An agent is a model, a system prompt, tools and permissions; runs start from it.",
    responses=responses(
        201,
        "The agent, with its `agent_id`",
        400,
        413,
        described={
            422: "Validation error; `model_not_allowed` when the model is outside AllowedModels, "
            "`webhook_secret_missing` for a `webhook` before POST /v1/webhooks/secret"
        },
    ),
    tags=AGENTS,
)
def create_agent(body: AgentCreate) -> Response[Agent]:
    bounds.check_named(body.model)
    _check_delegates(tenant(router), body.tools)
    if body.webhook is not None:
        webhook_keys.require(tenant(router))
    agent = agents.create(tenant(router), new_id("agt"), body)
    return json_response(view(agent), 201)


@router.get("/v1/agents", summary="List agents", responses=responses(200, "The tenant's agents"), tags=AGENTS)
def list_agents() -> Response[AgentList]:
    return json_response({"agents": [view(a) for a in agents.list_all(tenant(router))]})


@router.get(
    "/v1/agents/<agent_id>", summary="Get an agent", responses=responses(200, "The agent", 404), tags=AGENTS
)
def get_agent(agent_id: AgentId) -> Response[Agent]:
    return json_response(view(agents.get(tenant(router), agent_id)))


@router.patch(
    "/v1/agents/<agent_id>",
    summary="Change an agent",
    description="Only the fields sent change; `null` clears an optional field.",
    responses=responses(
        200,
        "The changed agent",
        400,
        404,
        409,
        413,
        described={
            422: "Validation error; `model_not_allowed` when the model is outside AllowedModels, "
            "`webhook_secret_missing` for a `webhook` before POST /v1/webhooks/secret"
        },
    ),
    tags=AGENTS,
)
def patch_agent(agent_id: AgentId, body: AgentPatch) -> Response[Agent]:
    changes = body.model_dump(exclude_unset=True)
    bounds.check_named(changes.get("model"))
    if changes.get("webhook") is not None:
        webhook_keys.require(tenant(router))
    if "memory" in changes and changes["memory"] is None:
        changes["memory"] = MemoryConfig().model_dump()  # off; what was remembered stays until forgotten
    for door in ("a2a", "mcp"):
        if door in changes and changes[door] is None:
            changes[door] = Door().model_dump()  # closed
    if "permissions" in changes and changes["permissions"] is None:
        # Clearing would silently fall back to the most permissive default; make the caller say so.
        raise Unprocessable(
            'permissions cannot be cleared; send {"default": ...} instead',
            details=[{"loc": ["body", "permissions"], "msg": "cannot be null", "type": "value_error"}],
        )
    return json_response(view(agents.update(tenant(router), agent_id, changes)))


@router.delete(
    "/v1/agents/<agent_id>",
    summary="Delete an agent",
    description="Its schedules are deleted with it, so nothing fires for a deleted agent, and so are "
    "everything it remembered about its users and its MCP servers' OAuth grants.",
    responses=responses(204, "Deleted", 404, content={}),
    tags=AGENTS,
)
def delete_agent(agent_id: AgentId) -> Response[None]:
    service.delete_agent(tenant(router), agent_id)
    return Response(status_code=204)


@router.get(
    "/v1/agents/<agent_id>/weight",
    summary="Weigh an agent's first call",
    description="The input tokens of the system prompt and of each tool declaration for the agent's "
    "model, counted offline: what every run's first call sends before the user's message.",
    responses=responses(200, "The weights, heaviest tool first", 404),
    tags=AGENTS,
)
def get_weight(agent_id: AgentId) -> Response[weight.AgentWeight]:
    tenant_id = tenant(router)
    return json_response(weight.weighed(tenant_id, agents.get(tenant_id, agent_id)).model_dump(mode="json"))


@router.get(
    "/v1/agents/<agent_id>/tool-usage",
    summary="How often the latest runs called each tool",
    description="The agent's declared tools with their calls over its last `last` runs (newest first); "
    "a tool called but no longer declared shows with `declared: false`. A declared tool nobody calls "
    "costs tokens on every call.",
    responses=responses(200, "Declared tools and their calls", 400, 404),
    tags=AGENTS,
)
def get_tool_usage(
    agent_id: AgentId, last: Annotated[int, Query(ge=1, le=100)] = 20
) -> Response[weight.ToolUsage]:
    tenant_id = tenant(router)
    agent = agents.get(tenant_id, agent_id)
    latest, _ = runs.list_runs(tenant_id, agent_id=agent_id, limit=last)
    usage = weight.tool_usage(agent, [r.tools_executed for r in latest])
    return json_response(usage.model_dump(mode="json"))


@router.post(
    "/v1/agents/<agent_id>/tools",
    summary="Add a tool to an agent",
    description="A builtin `{name, config?, permission?}`, a custom HTTP tool (`type: http`) or a client "
    "tool (`type: client`) that the calling app runs itself.",
    responses=responses(201, "The tool as stored", 400, 404, 409, 413, content=model_content(Tool)),
    tags=TOOLS,
)
def add_tool(agent_id: AgentId, body: Annotated[Tool, Body()]) -> Response[dict[str, Any]]:
    agents.get(tenant(router), agent_id)  # an unknown agent is a 404 before its tool's target is looked at
    _check_delegates(tenant(router), [body])
    agent = agents.add_tool(tenant(router), agent_id, body)
    tool = agent.tool(body.name)
    return json_response(public_tool(tool.model_dump(mode="json")) if tool else None, 201)


@router.get(
    "/v1/agents/<agent_id>/tools",
    summary="List an agent's tools",
    responses=responses(200, "The agent's tools", 404, content=model_content(ToolList)),
    tags=TOOLS,
)
def list_tools(agent_id: AgentId) -> Response[dict[str, list[dict[str, Any]]]]:
    agent = agents.get(tenant(router), agent_id)
    return json_response({"tools": [public_tool(t.model_dump(mode="json")) for t in agent.tools]})


@router.delete(
    "/v1/agents/<agent_id>/tools/<name>",
    summary="Remove a tool from an agent",
    responses=responses(204, "Removed", 404, 409, 413, content={}),
    tags=TOOLS,
)
def delete_tool(agent_id: AgentId, name: str) -> Response[None]:
    agents.remove_tool(tenant(router), agent_id, name)
    return Response(status_code=204)
