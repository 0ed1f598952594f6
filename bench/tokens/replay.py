"""Replay a scenario twice, naive and through Stepwise's prompt path, and record every request.

naive: every message re-sent as it is, each tool result pasted whole, the tools in the agent's order
shuffled once per run (a dict or set rebuilt by each cold function; MCP discovery order), no compaction.
Stepwise: stepwise.loop.prompt.build_messages and tool_declarations (sorted; result_read declared from the
first call), each result as the loop stores it (stepwise.tools.tables.describe, else the result cut at
TOOL_RESULT_LIMIT), then stepwise.loop.compaction.fit for the model's window.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any, Literal

from bench.tokens.agent import agent as bench_agent
from bench.tokens.scenarios import Call, Read, Scenario
from stepwise.loop.compaction import fit
from stepwise.loop.prompt import _function, build_messages, tool_declarations
from stepwise.runs.state import Compacted
from stepwise.tools import tables
from stepwise.tools.base import ToolResult

Mode = Literal["naive", "stepwise"]
FIT_MODEL = "gpt-4.1"  # the window compaction aims at (its real one, from litellm's map)


@dataclass
class Request:
    run: int  # the turn (one run each)
    step: int  # the model call within the run, from 1
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    reply: dict[str, Any]  # the assistant message the model answered with
    compacted: bool = False


@dataclass
class Replay:
    mode: Mode
    requests: list[Request]
    failures: list[str]  # quality checks that failed, as "run N: missing ..."


def replay(scenario: Scenario, mode: Mode, *, window: int | None = None) -> Replay:
    """`window` overrides the model's (to watch compaction at work in a conversation that fits)."""
    agent = bench_agent()
    history: list[dict[str, Any]] = []
    requests: list[Request] = []
    failures: list[str] = []
    for run, turn in enumerate(scenario.turns, start=1):
        naive_tools = [{"type": "function", "function": _function(t)} for t in agent.tools]
        random.Random(f"{scenario.name}/{run}").shuffle(naive_tools)
        history.append({"role": "user", "content": turn.user})
        wholes: list[tuple[str, str]] = []  # (tool_call_id, whole text) of this turn's calls
        steps = [s for s in turn.steps if mode == "stepwise" or not isinstance(s, Read)]
        kept: Compacted | None = None  # a run's compaction, applied again to its later calls
        for index, step in enumerate([*steps, None], start=1):
            if mode == "stepwise":
                messages = build_messages(agent, history)
                tools = tool_declarations(agent, history)
                prompt, report = fit(messages, model=FIT_MODEL, tools=tools, window=window, kept=kept)
                kept = report.kept if report is not None else kept
            else:
                prompt, tools, report = _naive_messages(agent.system_prompt, history), naive_tools, None
            reply = _reply(run, index, step, wholes, turn.answer)
            requests.append(Request(run, index, prompt, tools, reply, compacted=report is not None))
            if step is None:
                failures += _quality(run, prompt, turn.facts, [t.answer for t in scenario.turns[: run - 1]])
            history.append(reply)
            for call in reply.get("tool_calls") or []:
                history.append(_result(mode, call, step, wholes))
    return Replay(mode, requests, failures)


def _naive_messages(system: str | None, history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return ([{"role": "system", "content": system}] if system else []) + list(history)


def _reply(
    run: int, index: int, step: list[Call] | Read | None, wholes: list[tuple[str, str]], answer: str
) -> dict[str, Any]:
    if step is None:
        return {"role": "assistant", "content": answer}
    if isinstance(step, Read):
        arguments = {"tool_call_id": wholes[step.call][0], "offset": step.offset, "limit": step.limit}
        calls = [(tables.RESULT_READ, arguments)]
    else:
        calls = [(c.tool, c.arguments) for c in step]
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{run}_{index}_{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments, sort_keys=True)},
            }
            for i, (name, arguments) in enumerate(calls)
        ],
    }


def _result(
    mode: Mode, call: dict[str, Any], step: list[Call] | Read | None, wholes: list[tuple[str, str]]
) -> dict[str, Any]:
    call_id = call["id"]
    if isinstance(step, Read):  # what result_read answers: a page of the stored whole
        page = tables.page(wholes[step.call][1], wholes[step.call][0], step.offset, step.limit)
        return {"role": "tool", "tool_call_id": call_id, "content": ToolResult(output=page).for_model()}
    assert step is not None
    tool = step[int(call_id.rsplit("_", 1)[1])]
    result = ToolResult(output=tool.result)
    whole = result.for_model(None)
    wholes.append((call_id, whole))
    if mode == "naive":
        raw = tool.result if isinstance(tool.result, str) else json.dumps(tool.result)
        return {"role": "tool", "tool_call_id": call_id, "content": raw}
    content = tables.describe(whole, call_id) or result.for_model()
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def visible_text(messages: list[dict[str, Any]]) -> str:
    """What the model reads: every message's text and every call's arguments."""
    parts: list[str] = []
    for message in messages:
        if isinstance(message.get("content"), str):
            parts.append(message["content"])
        for call in message.get("tool_calls") or []:
            parts.append(call["function"]["arguments"])
    return "\n".join(parts)


def _quality(run: int, prompt: list[dict[str, Any]], facts: list[str], earlier: list[str]) -> list[str]:
    """The answering call must see the facts of this turn's results and every earlier answer."""
    text = visible_text(prompt)
    missing = [f"run {run}: fact {fact!r} not in view" for fact in facts if fact not in text]
    missing += [f"run {run}: earlier answer {a[:40]!r}… not in view" for a in earlier if a not in text]
    return missing
