"""`stepwise agents create|list|get|delete|pause|unpause|weight|tool-usage`."""

from __future__ import annotations

import argparse
from typing import Any

from stepwise_cli.client import data
from stepwise_cli.context import Context, UsageError, read_json
from stepwise_cli.render import block, clip, table, when


def register(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    agents = commands.add_parser("agents", help="create, list, show, delete, pause and weigh agents")
    actions = agents.add_subparsers(dest="action", required=True, metavar="ACTION")

    create = actions.add_parser("create", parents=[common], help="create an agent")
    create.add_argument("--name", required=True)
    create.add_argument("--model", help="a litellm model name (default: the stack's STEPWISE_MODEL)")
    create.add_argument("--system-prompt")
    create.add_argument(
        "--tool-file",
        metavar="FILE",
        help='a JSON file with the agent\'s tools: a list, or {"tools": [...]}, or one tool',
    )
    create.add_argument("--max-steps", type=int, metavar="N")
    create.set_defaults(handler=create_agent)

    actions.add_parser("list", parents=[common], help="list agents").set_defaults(handler=list_agents)

    get = actions.add_parser("get", parents=[common], help="show an agent")
    get.add_argument("agent_id")
    get.set_defaults(handler=get_agent)

    delete = actions.add_parser("delete", parents=[common], help="delete an agent and its schedules")
    delete.add_argument("agent_id")
    delete.set_defaults(handler=delete_agent)

    for verb, paused in (("pause", True), ("unpause", False)):
        helped = "refuse new runs (active runs go on)" if paused else "accept new runs again"
        toggle = actions.add_parser(verb, parents=[common], help=helped)
        toggle.add_argument("agent_id")
        toggle.set_defaults(handler=pause_agent, paused=paused)

    weight = actions.add_parser(
        "weight", parents=[common], help="the input tokens of the agent's first call, tool by tool"
    )
    weight.add_argument("agent_id")
    weight.set_defaults(handler=agent_weight)

    usage = actions.add_parser(
        "tool-usage", parents=[common], help="how often the agent's latest runs called each tool"
    )
    usage.add_argument("agent_id")
    usage.add_argument("--last", type=int, metavar="N", help="how many of the latest runs (API default 20)")
    usage.set_defaults(handler=agent_tool_usage)


def tools_from_file(path: str) -> list[Any]:
    loaded = read_json(path, "tool file")
    if isinstance(loaded, dict) and isinstance(loaded.get("tools"), list):
        return list(loaded["tools"])
    if isinstance(loaded, dict):
        return [loaded]
    if isinstance(loaded, list):
        return loaded
    raise UsageError(f'tool file {path} must hold a list of tools, {{"tools": [...]}}, or one tool')


def create_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"name": args.name}
    optional = {"model": args.model, "system_prompt": args.system_prompt, "max_steps": args.max_steps}
    body.update({k: v for k, v in optional.items() if v is not None})
    if args.tool_file:
        body["tools"] = tools_from_file(args.tool_file)
    return body


def create_agent(ctx: Context) -> int:
    agent = data(ctx.client.agents.create(create_body(ctx.args)))
    tools = ", ".join(t.get("name", "?") for t in agent.get("tools", [])) or "none"
    ctx.show(
        agent,
        [
            f"created agent {agent['agent_id']} ({agent['name']}), tools: {tools}",
            f'run it: {ctx.cli} run {agent["agent_id"]} "Hello"',
        ],
    )
    return 0


def list_agents(ctx: Context) -> int:
    listed = data(ctx.client.agents.list())
    agents = listed.get("agents", [])
    rows = [
        [
            a["agent_id"],
            a.get("name"),
            a.get("model") or "(default)",
            len(a.get("tools", [])),
            when(a.get("created_at")),
        ]
        for a in agents
    ]
    ctx.show(listed, table(["AGENT", "NAME", "MODEL", "TOOLS", "CREATED"], rows) if agents else ["no agents"])
    return 0


def agent_lines(agent: dict[str, Any]) -> list[str]:
    tools = [
        f"{t.get('name')} ({t.get('type', 'builtin')}, permission {t.get('permission', 'inherit')})"
        for t in agent.get("tools", [])
    ]
    prompt = agent.get("system_prompt")
    return block(
        [
            ("agent", agent.get("agent_id")),
            ("name", agent.get("name")),
            ("model", agent.get("model") or "(the stack's default)"),
            ("system prompt", clip(prompt, 200) if prompt else None),
            ("max steps", agent.get("max_steps")),
            ("permissions", (agent.get("permissions") or {}).get("default")),
            ("tools", "; ".join(tools) or "none"),
            ("mcp servers", ", ".join(s.get("name", "?") for s in agent.get("mcp_servers", [])) or None),
            ("hooks", len(agent.get("hooks", [])) or None),
            ("scripted", f"{len(agent['script'])} turns" if agent.get("script") else None),
            ("created", when(agent.get("created_at"))),
            ("updated", when(agent.get("updated_at"))),
        ]
    )


def get_agent(ctx: Context) -> int:
    agent = data(ctx.client.agents.get(ctx.args.agent_id))
    ctx.show(agent, agent_lines(agent))
    return 0


def pause_agent(ctx: Context) -> int:
    agents = ctx.client.agents
    agent = data(agents.pause(ctx.args.agent_id) if ctx.args.paused else agents.unpause(ctx.args.agent_id))
    state = "paused: new runs are refused" if agent.get("paused") else "running: new runs are accepted"
    ctx.show(agent, [f"agent {agent.get('agent_id')} is {state}"])
    return 0


def delete_agent(ctx: Context) -> int:
    ctx.client.agents.delete(ctx.args.agent_id)
    ctx.show({"agent_id": ctx.args.agent_id, "deleted": True}, [f"deleted agent {ctx.args.agent_id}"])
    return 0


def weight_lines(weight: dict[str, Any]) -> list[str]:
    tools = weight.get("tools", [])
    lines = block(
        [
            ("model", weight.get("model")),
            ("system prompt", f"{weight.get('system_tokens')} tokens"),
            ("tools", f"{weight.get('tools_tokens')} tokens ({len(tools)} declared)"),
            ("first call", f"{weight.get('first_call_tokens')} tokens before the user's message"),
        ]
    )
    if tools:
        lines += ["", *table(["TOOL", "TOKENS"], [[t.get("name"), t.get("tokens")] for t in tools])]
    return lines


def agent_weight(ctx: Context) -> int:
    weight = data(ctx.client.agents.weight(ctx.args.agent_id))
    ctx.show(weight, weight_lines(weight))
    return 0


def tool_usage_lines(usage: dict[str, Any]) -> list[str]:
    tools = usage.get("tools", [])
    runs = usage.get("runs", 0)
    head = [f"tool calls over the latest {runs} run{'' if runs == 1 else 's'}"]
    if not tools:
        return [*head, "no tools declared or called"]
    rows = [[t.get("name"), "yes" if t.get("declared") else "no (removed)", t.get("calls")] for t in tools]
    lines = [*head, *table(["TOOL", "DECLARED", "CALLS"], rows)]
    unused = [t.get("name") for t in tools if t.get("declared") and not t.get("calls")]
    if unused and runs:
        lines.append(f"never called: {', '.join(map(str, unused))} (each costs tokens on every call)")
    return lines


def agent_tool_usage(ctx: Context) -> int:
    usage = data(ctx.client.agents.tool_usage(ctx.args.agent_id, last=ctx.args.last))
    ctx.show(usage, tool_usage_lines(usage))
    return 0
