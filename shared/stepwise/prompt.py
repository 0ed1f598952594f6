"""What the model is sent, in a cache-friendly order: system prompt, tool declarations sorted by name,
then history. Nothing volatile (timestamps, ids, relevance order) goes into the stable prefix."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from stepwise.agents.models import Agent
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


def tool_declarations(agent: Agent, run_builtins: Iterable[str] = ()) -> list[dict[str, Any]]:
    """OpenAI-style function declarations, sorted by name so the prefix is byte-for-byte stable.
    `run_builtins` are builtins this run offers though the agent does not list them (attachment_read
    when the conversation holds files)."""
    from stepwise import mcp  # the cached MCP tools of the agent's enabled servers (never a connection)

    listed = {tool.name for tool in agent.tools}
    own = [_canonical(_function(tool)) for tool in agent.tools]
    own += [_canonical(catalog.declaration(name)) for name in sorted(set(run_builtins) - listed)]
    return sorted([*own, *mcp.declarations(agent)], key=lambda d: str(d["function"]["name"]))


def described_reads(history: list[dict[str, Any]]) -> list[str]:
    """`result_read` once the stored conversation (not a compacted copy, so it stays declared for the
    rest of the session) holds a tool result the model read as a description: declaring it to every
    agent would cost each first call its tokens, and the scripted model would call it."""
    described = any(m.get("role") == "tool" and tables.is_description(m.get("content")) for m in history)
    return [tables.RESULT_READ] if described else []


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


def build_messages(agent: Agent, history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    system = [{"role": "system", "content": agent.system_prompt}] if agent.system_prompt else []
    return system + _answered(history)
