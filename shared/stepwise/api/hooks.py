"""/v1/agents/{id}/hooks: create, list, delete. Hooks are immutable: change one by replacing it."""

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter
from pydantic import BaseModel

from stepwise.agents import store as agents
from stepwise.api.context import tenant
from stepwise.api.params import AgentId, HookId
from stepwise.api.responses import json_response, responses
from stepwise.core.ids import new_id
from stepwise.core.masking import public_hook
from stepwise.core.schema import utcnow
from stepwise.hooks.models import Hook, HookCreate, applied

router = APIGatewayHttpRouter()
HOOKS = ["hooks"]


class HookList(BaseModel):
    hooks: list[Hook]


@router.post(
    "/v1/agents/<agent_id>/hooks",
    summary="Add a hook to an agent",
    description="`http`, `rule` or `approval` hooks on lifecycle events; immutable once created.",
    responses=responses(201, "The hook, with its `hook_id`", 400, 404, 409, 413),
    tags=HOOKS,
)
def create_hook(agent_id: AgentId, body: HookCreate) -> Response[Hook]:
    hook = Hook(**body.model_dump(), hook_id=new_id("hook"), created_at=utcnow())
    agents.add_hook(tenant(router), agent_id, hook.stored())
    return json_response(public_hook(hook.model_dump(mode="json")), 201)


@router.get(
    "/v1/agents/<agent_id>/hooks",
    summary="List an agent's hooks",
    responses=responses(200, "The hooks", 404),
    tags=HOOKS,
)
def list_hooks(agent_id: AgentId) -> Response[HookList]:
    agent = agents.get(tenant(router), agent_id)
    return json_response({"hooks": [public_hook(applied(h)) for h in agent.hooks]})


@router.delete(
    "/v1/agents/<agent_id>/hooks/<hook_id>",
    summary="Delete a hook",
    responses=responses(204, "Deleted", 404, 409, 413, content={}),
    tags=HOOKS,
)
def delete_hook(agent_id: AgentId, hook_id: HookId) -> Response[None]:
    agents.remove_hook(tenant(router), agent_id, hook_id)
    return Response(status_code=204)
