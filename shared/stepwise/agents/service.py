"""What happens to an agent across the features it owns: deleting one takes them with it."""

from __future__ import annotations

from stepwise.agents import mcp_servers
from stepwise.agents import store as agents
from stepwise.memory import service as memory
from stepwise.schedules import service as schedules
from stepwise.settings import service as settings


def delete_agent(tenant_id: str, agent_id: str) -> None:
    """The agent goes with its schedules (first: nothing fires for a deleted agent), everything it
    remembered about its users, its MCP servers' OAuth grants and its own provider keys. NotFound for
    another tenant's agent, like a missing one, before anything is deleted."""
    agent = agents.get(tenant_id, agent_id)
    for schedule in schedules.list_for_agent(tenant_id, agent_id):
        schedules.delete(tenant_id, agent_id, schedule.schedule_id)
    agents.delete(tenant_id, agent_id)
    memory.default_store().forget_agent(tenant_id, agent_id)  # no user's memories outlive the agent
    mcp_servers.forget_agent(tenant_id, agent)  # nor its MCP servers' OAuth clients and tokens
    settings.forget_agent(tenant_id, agent_id)  # nor its own provider keys
