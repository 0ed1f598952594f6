"""What an agent's first call weighs, and which of its tools its runs really call: the first two checks
of a token diet (declared tools cost input tokens on every call whether or not they are used).

`weigh` counts with litellm's offline tokenizer, so it runs in the Step function (the only one that
imports litellm); the API asks it through a synchronous invocation, as it does for sync runs.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from pydantic import BaseModel

from stepwise.agents.models import Agent

# A one-token user turn: token counters frame a conversation, so the parts are weighed inside one and
# this turn's own cost is taken out again.
_PROBE = [{"role": "user", "content": "."}]


class ToolWeight(BaseModel):
    name: str
    tokens: int  # what the first call would weigh less without this tool


class AgentWeight(BaseModel):
    model: str
    system_tokens: int  # the system prompt
    tools_tokens: int  # every tool declaration, together (their shared framing included)
    first_call_tokens: int  # what every run's first call sends before the user's message
    tools: list[ToolWeight]  # heaviest first


class ToolUse(BaseModel):
    name: str
    declared: bool  # still on the agent (a call of a removed tool shows as declared: false)
    calls: int


class ToolUsage(BaseModel):
    runs: int  # how many of the agent's latest runs were looked at
    tools: list[ToolUse]


def weigh(agent: Agent) -> AgentWeight:
    from stepwise.llm.client import resolve_model
    from stepwise.loop.compaction import count_tokens
    from stepwise.loop.prompt import build_messages, tool_declarations

    model = resolve_model(agent.model)
    system = build_messages(agent, [])
    declarations = tool_declarations(agent)
    probe = count_tokens(model, _PROBE)
    with_system = count_tokens(model, [*system, *_PROBE])
    first = count_tokens(model, [*system, *_PROBE], declarations or None)
    # Each tool's weight is what removing it would save: the first call without it, subtracted.
    tools = [
        ToolWeight(
            name=str(d["function"]["name"]),
            tokens=first
            - count_tokens(model, [*system, *_PROBE], [o for o in declarations if o is not d] or None),
        )
        for d in declarations
    ]
    return AgentWeight(
        model=model,
        system_tokens=with_system - probe,
        tools_tokens=first - with_system,
        first_call_tokens=first - probe,
        tools=sorted(tools, key=lambda t: (-t.tokens, t.name)),
    )


def tool_usage(agent: Agent, tools_executed: list[list[str] | None]) -> ToolUsage:
    """How often the latest runs (their `tools_executed`) called each tool, declared ones first."""
    from stepwise.loop.prompt import tool_declarations

    calls: Counter[str] = Counter(name for names in tools_executed for name in names or [])
    declared = [str(d["function"]["name"]) for d in tool_declarations(agent)]
    used = [ToolUse(name=n, declared=True, calls=calls.pop(n, 0)) for n in declared]
    gone = [ToolUse(name=n, declared=False, calls=c) for n, c in sorted(calls.items())]
    return ToolUsage(runs=len(tools_executed), tools=[*used, *gone])


def weigh_request(tenant_id: str, agent_id: str) -> dict[str, Any]:
    """The Step function's answer to the API's Weigh invocation."""
    from stepwise.agents import store as agents

    return weigh(agents.get(tenant_id, agent_id)).model_dump(mode="json")


def weighed(tenant_id: str, agent: Agent) -> AgentWeight:
    """`GET /v1/agents/{id}/weight`: the API function never imports litellm, so the Step function
    counts, invoked synchronously."""
    import json

    from stepwise.core import aws, config
    from stepwise.runs.state import Weigh

    payload = Weigh(tenant_id=tenant_id, agent_id=agent.agent_id).model_dump_json()
    response = aws.client("lambda").invoke(
        FunctionName=config.api_targets().step_function, Payload=payload.encode()
    )
    body = json.loads(response["Payload"].read() or b"null")
    if response.get("FunctionError"):
        raise RuntimeError(f"weighing agent {agent.agent_id} failed: {body}")
    return AgentWeight.model_validate(body)
