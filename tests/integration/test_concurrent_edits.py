"""Lost updates: concurrent edits of one agent (tools, hooks, MCP servers, PATCH) all land, or the one
that cannot is a 409; none is silently overwritten by another's older read."""

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from stepwise.agents import mcp_store as mcp
from stepwise.agents import store as agents
from stepwise.agents.models import Agent
from stepwise.core.errors import Conflict
from stepwise.core.schema import utcnow
from stepwise.mcp.models import McpServer
from stepwise.tools.models import ClientTool
from stepwise_local.stack import LocalStack


def new_agent(stack: LocalStack) -> str:
    status, _, body = stack.invoke_api("POST", "/v1/agents", {"name": "concurrent"})
    assert status == 201
    return str(body["agent_id"])


def client_tool(name: str) -> ClientTool:
    return ClientTool(type="client", name=name, description="d", input_schema={"type": "object"})


def test_concurrent_additions_all_land(stack: LocalStack) -> None:
    # Threads against moto (the stack serializes moto's item writes as DynamoDB applies them), through
    # the store functions the routes call. (Not through the API: the local stack runs the resolver of
    # one function from many threads, and Powertools' routers keep the current request in themselves.)
    agent_id = new_agent(stack)
    hook = {"hook_id": "", "event": "PreToolUse", "type": "rule", "config": {"rules": []}}
    edits: list[tuple[str, Callable[[], Any]]] = []
    for i in range(6):
        edits.append((f"t{i}", lambda i=i: agents.add_tool("local", agent_id, client_tool(f"t{i}"))))
        edits.append(
            (f"hook{i}", lambda i=i: agents.add_hook("local", agent_id, {**hook, "hook_id": f"hook{i}"}))
        )
        server = McpServer(name=f"mcp{i}", url="http://127.0.0.1:9/mcp", enabled=False, created_at=utcnow())
        edits.append((f"mcp{i}", lambda server=server: mcp.add_server("local", agent_id, server)))
    start = threading.Barrier(len(edits))

    def apply(edit: tuple[str, Callable[[], Any]]) -> tuple[str, str]:
        name, change = edit
        start.wait()  # all at once: each reads the agent while the others are writing it
        try:
            change()
        except Conflict as exc:
            return name, exc.code  # lost more races than the retries cover: said, never silent
        return name, "ok"

    with ThreadPoolExecutor(max_workers=len(edits)) as pool:
        outcomes = dict(pool.map(apply, edits))

    assert set(outcomes.values()) <= {"ok", "conflict"}
    landed = sorted(name for name, outcome in outcomes.items() if outcome == "ok")
    # Every round of the race has a winner, and a loser tries MAX_ATTEMPTS rounds before its 409.
    assert len(landed) >= agents.MAX_ATTEMPTS
    final = agents.get("local", agent_id)
    kept = (
        [t.name for t in final.tools]
        + [h["hook_id"] for h in final.hooks]
        + [s["name"] for s in final.mcp_servers]
    )
    assert sorted(kept) == landed  # every edit that answered success is there; none was overwritten


def test_a_concurrent_patch_keeps_the_tool_added_meanwhile(stack: LocalStack) -> None:
    agent_id = new_agent(stack)
    tenant = "local"
    calls = 0

    def rename_while_a_tool_lands(agent: Agent) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 1:  # another request's edit lands between this read and this write
            agents.add_tool(tenant, agent_id, client_tool("added_meanwhile"))
        return {"name": "renamed"}

    result = agents.modify(tenant, agent_id, rename_while_a_tool_lands)

    assert calls == 2  # the version check refused the first write; the change was applied again
    assert result.name == "renamed" and [t.name for t in result.tools] == ["added_meanwhile"]
    stored = agents.get(tenant, agent_id)
    assert stored.name == "renamed" and [t.name for t in stored.tools] == ["added_meanwhile"]


def test_a_change_judges_the_fresh_agent_on_a_retry(stack: LocalStack) -> None:
    agent_id = new_agent(stack)
    calls = 0
    original_add: Callable[..., Agent] = agents.add_tool

    def racing(agent: Agent) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 1:  # the same name lands first, from another request
            original_add("local", agent_id, client_tool("same"))
        if agent.tool("same") is not None:
            raise Conflict("taken", code="tool_exists")
        return {"tools": [*agent.tools, client_tool("same")]}

    with pytest.raises(Conflict) as raised:
        agents.modify("local", agent_id, racing)
    assert raised.value.code == "tool_exists" and calls == 2
    assert [t.name for t in agents.get("local", agent_id).tools] == ["same"]


def test_an_agent_that_keeps_changing_is_a_409_conflict_after_bounded_retries(stack: LocalStack) -> None:
    agent_id = new_agent(stack)
    calls = 0

    def always_raced(agent: Agent) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        agents.update("local", agent_id, {"system_prompt": f"edit {calls}"})
        return {"name": "never"}

    with pytest.raises(Conflict) as raised:
        agents.modify("local", agent_id, always_raced)
    assert raised.value.code == "conflict" and raised.value.status == 409
    assert calls == agents.MAX_ATTEMPTS
    assert agents.get("local", agent_id).name == "concurrent"
