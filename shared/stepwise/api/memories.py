"""/v1/agents/{agent_id}/memories: what an agent remembers about one of the app's users, listed and
forgotten. The user is named in the query; the tenant comes from the key, so another tenant's agent is
a 404 like an unknown one."""

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise.agents import store as agents
from stepwise.api.context import tenant
from stepwise.api.params import AgentId, MemoryId, UserIdQuery
from stepwise.api.responses import json_response, responses
from stepwise.core.errors import NotFound
from stepwise.memory import service
from stepwise.memory.models import MemoryList, MemoryNotFound, Owner

router = APIGatewayHttpRouter()
MEMORIES = ["memories"]
PAGE_LIMIT = 50


def _owner(agent_id: str, user_id: str) -> Owner:
    tenant_id = tenant(router)
    agents.get(tenant_id, agent_id)  # 404 agent_not_found, for another tenant's agent too
    return Owner(tenant_id=tenant_id, agent_id=agent_id, user_id=user_id)


@router.get(
    "/v1/agents/<agent_id>/memories",
    summary="List a user's memories",
    description="What the agent remembers about `user_id`, newest first; pass `next_token` from a page to "
    "get the next one.",
    responses=responses(200, "A page of memories", 400, 404),
    tags=MEMORIES,
)
def list_memories(
    agent_id: AgentId,
    user_id: UserIdQuery,
    limit: Annotated[int, Query(ge=1, le=100)] = PAGE_LIMIT,
    next_token: Annotated[str | None, Query(max_length=64)] = None,
) -> Response[MemoryList]:
    page, token = service.page(_owner(agent_id, user_id), next_token, limit)
    return json_response({"memories": [m.model_dump(mode="json") for m in page], "next_token": token})


@router.delete(
    "/v1/agents/<agent_id>/memories/<memory_id>",
    summary="Delete one memory",
    description="404 `memory_not_found` for a memory that is not this user's.",
    responses=responses(204, "Deleted", 404, content={}),
    tags=MEMORIES,
)
def delete_memory(agent_id: AgentId, memory_id: MemoryId, user_id: UserIdQuery) -> Response[None]:
    try:
        service.delete(_owner(agent_id, user_id), memory_id)
    except MemoryNotFound:
        raise NotFound(f"user {user_id} has no memory {memory_id}", code="memory_not_found") from None
    return Response(status_code=204)


@router.delete(
    "/v1/agents/<agent_id>/memories",
    summary="Forget a user",
    description="Deletes everything the agent remembers about `user_id` (a user's right to deletion); "
    "other users' memories stay. Idempotent: forgetting a user with no memories is a 204 too.",
    responses=responses(204, "Forgotten", 404, content={}),
    tags=MEMORIES,
)
def forget_user(agent_id: AgentId, user_id: UserIdQuery) -> Response[None]:
    service.forget(_owner(agent_id, user_id))
    return Response(status_code=204)
