"""Agents, with their tools, as one item per agent: a run loads its agent with a single read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pynamodb.exceptions import DoesNotExist, PutError, UpdateError

from stepwise.agents.models import Agent, AgentCreate
from stepwise.core.errors import AgentGone, Conflict, NotFound
from stepwise.core.schema import utcnow
from stepwise.core.tables import AgentItem, bind, check_fits, condition_failed
from stepwise.tools.models import DeclaredTool

LIST_LIMIT = 100
# Version races one edit survives before it is a 409: each retry re-reads and re-applies the change,
# so only an agent edited this many times over within one request's few milliseconds gets there.
MAX_ATTEMPTS = 5
WHAT = "the agent (its prompt, script, tools, hooks and MCP servers together)"


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
    from stepwise.header_secrets import seal_agent_doc  # KMS only where agents are written

    doc = seal_agent_doc(tenant_id, agent.model_dump(mode="json"))  # header secrets only as ciphertext
    item = AgentItem(tenant_id, agent_id, doc=doc, a2a_id=_a2a_id(agent))
    check_fits(item, WHAT)
    item.save(condition=AgentItem.agent_id.does_not_exist())
    return agent


def _a2a_id(agent: Agent) -> str | None:
    return agent.agent_id if agent.a2a.enabled else None


def find_a2a(agent_id: str) -> tuple[str, Agent] | None:
    """(tenant, agent) of the agent whose A2A door is open, from its id alone (the public agent card
    has no API key to tell the tenant); None for an unknown id or a closed door."""
    bind()
    for key in AgentItem.by_a2a.query(agent_id, limit=1):
        try:
            agent = get(key.tenant_id, key.agent_id)
        except NotFound:
            return None
        return (key.tenant_id, agent) if agent.a2a.enabled else None
    return None


def exists(tenant_id: str, agent_id: str) -> bool:
    try:
        get(tenant_id, agent_id)
    except NotFound:
        return False
    return True


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


Change = Callable[[Agent], dict[str, Any] | None]


def modify(tenant_id: str, agent_id: str, change: Change) -> Agent:
    """Apply `change` to the agent as stored and save it under its version: one read, one
    version-checked write. `change` gets the current agent and returns the fields to set (None: nothing
    to do); it may raise (a name taken, a hook not found), judged on that same agent. When another edit
    lands between the read and the write, the whole change is applied again to the fresh agent, so
    neither edit is lost; after MAX_ATTEMPTS such races it is a 409 `conflict`."""
    for _ in range(MAX_ATTEMPTS):
        item = _item(tenant_id, agent_id)
        current = Agent.model_validate(item.doc)
        changes = change(current)
        if changes is None:
            return current
        agent = Agent.model_validate({**current.model_dump(), **changes, "updated_at": utcnow()})
        from stepwise.header_secrets import seal_agent_doc  # KMS only where agents are written

        item.doc = seal_agent_doc(tenant_id, agent.model_dump(mode="json"))
        item.a2a_id = _a2a_id(agent)
        check_fits(item, WHAT)
        try:
            item.save()  # pynamodb adds `version = <the version read>` as the write's condition
        except (PutError, UpdateError) as exc:
            if condition_failed(exc):
                continue  # changed (or deleted: the next read says 404) since the read
            raise
        return agent
    raise Conflict(f"agent {agent_id} kept changing while this edit was applied; retry", code="conflict")


def update(tenant_id: str, agent_id: str, changes: dict[str, Any]) -> Agent:
    """Set fields (a PATCH): merged into the agent as stored when it is saved, never into an older read.
    Pausing an agent that was running starts its count of skipped deliveries afresh."""

    def changing(current: Agent) -> dict[str, Any]:
        if changes.get("paused") and not current.paused:
            return {**changes, "skipped_while_paused": 0}
        return changes

    return modify(tenant_id, agent_id, changing)


def count_skipped(tenant_id: str, agent_id: str) -> None:
    """One more delivery skipped because the agent is paused."""
    modify(tenant_id, agent_id, lambda current: {"skipped_while_paused": current.skipped_while_paused + 1})


def add_tool(tenant_id: str, agent_id: str, tool: DeclaredTool) -> Agent:
    def adding(agent: Agent) -> dict[str, Any]:
        if agent.tool(tool.name) is not None:
            raise Conflict(f"agent {agent_id} already has a tool named {tool.name}", code="tool_exists")
        return {"tools": [*agent.tools, tool]}

    return modify(tenant_id, agent_id, adding)


def add_hook(tenant_id: str, agent_id: str, hook: dict[str, Any]) -> Agent:
    return modify(tenant_id, agent_id, lambda agent: {"hooks": [*agent.hooks, hook]})


def remove_hook(tenant_id: str, agent_id: str, hook_id: str) -> Agent:
    def removing(agent: Agent) -> dict[str, Any]:
        if not any(h.get("hook_id") == hook_id for h in agent.hooks):
            raise NotFound(f"agent {agent_id} has no hook {hook_id}", code="hook_not_found")
        return {"hooks": [h for h in agent.hooks if h.get("hook_id") != hook_id]}

    return modify(tenant_id, agent_id, removing)


def remove_tool(tenant_id: str, agent_id: str, name: str) -> Agent:
    def removing(agent: Agent) -> dict[str, Any]:
        if agent.tool(name) is None:
            raise NotFound(f"agent {agent_id} has no tool named {name}", code="tool_not_found")
        return {"tools": [t for t in agent.tools if t.name != name]}

    return modify(tenant_id, agent_id, removing)
