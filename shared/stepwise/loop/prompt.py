"""What the model is sent, in a cache-friendly order: system prompt, tool declarations sorted by name,
then history. Nothing volatile (timestamps, ids, relevance order) goes into the stable prefix."""

from __future__ import annotations

import json
from typing import Any

from stepwise.agents.models import Agent
from stepwise.attachments.render import READ_TOOL, has_files
from stepwise.tools import tables
from stepwise.tools.builtin import catalog
from stepwise.tools.models import BuiltinTool, DeclaredTool


def _function(tool: DeclaredTool) -> dict[str, Any]:
    if isinstance(tool, BuiltinTool):
        return catalog.declaration(tool.name)
    return {"name": tool.name, "description": tool.description, "parameters": tool.input_schema}


def _canonical(function: dict[str, Any]) -> dict[str, Any]:
    """Keys sorted at every level: the same tools give the same bytes on every call."""
    return {"type": "function", "function": json.loads(json.dumps(function, sort_keys=True))}


def tool_declarations(agent: Agent, history: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """OpenAI-style function declarations, sorted by name so the prefix is byte-for-byte stable: the
    agent's tools, its MCP servers' cached tools, and the builtins a run offers beside them for
    `history` (the stored conversation, not a compacted copy).

    `result_read` is declared from the first call of every agent that has tools, not once a table was
    described: the declarations come before the whole conversation in every provider's layout, so a
    builtin joining mid-run would change the request from its first bytes and that call could reuse
    nothing of the previous one's cache. Any tool can answer with a table (an HTTP API, a query, a
    client, a sub-agent's CSV), so "has tools" is the only test known on the first call; it costs the
    first call the declaration's tokens, which the weight route shows. A history holding a description
    gets it without tools too (an agent whose tools were removed since). `attachment_read` joins when
    the conversation first holds files: at a run's start (its attachments), or on a tool's first image.
    """
    from stepwise import mcp  # the cached MCP tools of the agent's enabled servers (never a connection)

    history = history or []
    served = mcp.declarations(agent)
    offered: set[str] = set()
    if agent.tools or served or described_in(history):
        offered.add(tables.RESULT_READ)
    if has_files(history):
        offered.add(READ_TOOL)
    listed = {tool.name for tool in agent.tools}
    own = [_canonical(_function(tool)) for tool in agent.tools]
    own += [_canonical(catalog.declaration(name)) for name in sorted(offered - listed)]
    return sorted([*own, *served], key=lambda d: str(d["function"]["name"]))


def described_in(history: list[dict[str, Any]]) -> bool:
    """Whether the stored conversation (not a compacted copy) holds a tool result the model read as a
    description."""
    return any(m.get("role") == "tool" and tables.is_description(m.get("content")) for m in history)


def _answered(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give every tool call a result: providers reject a conversation with a dangling call (a run that
    failed mid-step leaves one), so a missing result is stated rather than dropped."""
    out: list[dict[str, Any]] = []
    pending: list[str] = []

    def close_pending() -> None:
        for call_id in pending:
            out.append(
                {"role": "tool", "tool_call_id": call_id, "content": '{"error": "no result recorded"}'}
            )
        pending.clear()

    for message in history:
        role = message.get("role")
        if role == "tool":
            if message.get("tool_call_id") in pending:
                pending.remove(message["tool_call_id"])
                out.append(message)
            continue  # a result whose call is not in view would be rejected too
        close_pending()
        out.append(message)
        if role == "assistant":
            pending.extend(call["id"] for call in message.get("tool_calls") or [])
    close_pending()
    return out


def build_messages(
    agent: Agent, history: list[dict[str, Any]], instructions: str | None = None
) -> list[dict[str, Any]]:
    """The system prompt, then the conversation. A run's own `instructions` (a protocol door's, for that
    run only) follow the agent's system prompt in the same message: the agent's prompt stays the first
    bytes of every call, so a provider's cached prefix is still shared with the agent's other runs."""
    prompt = "\n\n".join(part for part in (agent.system_prompt, instructions) if part)
    system = [{"role": "system", "content": prompt}] if prompt else []
    return system + _answered(history)
