"""Agents, with their tools, as one item per agent: a run loads its agent with a single read."""

from __future__ import annotations

from typing import Any

from pynamodb.exceptions import DoesNotExist, PutError, UpdateError

from stepwise.agents.models import Agent, AgentCreate
from stepwise.errors import AgentGone, Conflict, NotFound
from stepwise.schema import utcnow
from stepwise.store.tables import AgentItem, bind, condition_failed
from stepwise.tools.models import BuiltinTool, ClientTool, HttpTool

LIST_LIMIT = 100


def _not_found(agent_id: str) -> NotFound:
    return NotFound(f"agent {agent_id} not found", code="agent_not_found")


def _item(tenant_id: str, agent_id: str) -> AgentItem:
    bind()
    try:
        return AgentItem.get(tenant_id, agent_id, consistent_read=True)
    except DoesNotExist:
        raise _not_found(agent_id) from None


def create(tenant_id: str, agent_id: str, spec: AgentCreate) -> Agent:
    bind()
    now = utcnow()
    agent = Agent(**spec.model_dump(), agent_id=agent_id, created_at=now, updated_at=now)
    AgentItem(tenant_id, agent_id, doc=agent.model_dump(mode="json")).save(
        condition=AgentItem.agent_id.does_not_exist()
    )
    return agent


def get(tenant_id: str, agent_id: str) -> Agent:
    return Agent.model_validate(_item(tenant_id, agent_id).doc)


def get_for_run(tenant_id: str, agent_id: str) -> Agent:
    """The agent of a running run: its absence is a step error the state machine can catch by name."""
    try:
        return get(tenant_id, agent_id)
    except NotFound as exc:
        raise AgentGone(f"agent {agent_id} was deleted; the run cannot continue") from exc


def list_all(tenant_id: str) -> list[Agent]:
    bind()
    return [Agent.model_validate(i.doc) for i in AgentItem.query(tenant_id)]


def delete(tenant_id: str, agent_id: str) -> None:
    item = _item(tenant_id, agent_id)
    item.delete()


def update(tenant_id: str, agent_id: str, changes: dict[str, Any]) -> Agent:
    """Apply field changes under optimistic locking; a concurrent edit makes this a 409, not a lost write."""
    item = _item(tenant_id, agent_id)
    current = Agent.model_validate(item.doc)
    merged = {**current.model_dump(), **changes, "updated_at": utcnow()}
    agent = Agent.model_validate(merged)
    item.doc = agent.model_dump(mode="json")
    try:
        item.save()
    except (PutError, UpdateError) as exc:
        if condition_failed(exc):
            raise Conflict(f"agent {agent_id} changed concurrently; retry", code="concurrent_update") from exc
        raise
    return agent


def add_tool(tenant_id: str, agent_id: str, tool: HttpTool | ClientTool | BuiltinTool) -> Agent:
    agent = get(tenant_id, agent_id)
    if agent.tool(tool.name) is not None:
        raise Conflict(f"agent {agent_id} already has a tool named {tool.name}", code="tool_exists")
    return update(tenant_id, agent_id, {"tools": [*agent.tools, tool]})


def add_hook(tenant_id: str, agent_id: str, hook: dict[str, Any]) -> Agent:
    agent = get(tenant_id, agent_id)
    return update(tenant_id, agent_id, {"hooks": [*agent.hooks, hook]})


def remove_hook(tenant_id: str, agent_id: str, hook_id: str) -> Agent:
    agent = get(tenant_id, agent_id)
    if not any(h.get("hook_id") == hook_id for h in agent.hooks):
        raise NotFound(f"agent {agent_id} has no hook {hook_id}", code="hook_not_found")
    return update(tenant_id, agent_id, {"hooks": [h for h in agent.hooks if h.get("hook_id") != hook_id]})


def remove_tool(tenant_id: str, agent_id: str, name: str) -> Agent:
    agent = get(tenant_id, agent_id)
    if agent.tool(name) is None:
        raise NotFound(f"agent {agent_id} has no tool named {name}", code="tool_not_found")
    return update(tenant_id, agent_id, {"tools": [t for t in agent.tools if t.name != name]})
