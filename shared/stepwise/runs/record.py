"""The record of a finished run, as its own messages in its session hold it: each call the model asked
for (its tool and arguments as written) and the tool message the model read for it. What-if replay
serves calls from it (stepwise.loop.whatif) and the comparison reads trajectories from it
(stepwise.evals.compare); both compare arguments canonically."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

Message = dict[str, Any]


def canonical(arguments: Any) -> str:
    """Arguments as one string: keys sorted, no spacing, so equal objects compare equal."""
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def parsed(raw: Any) -> Any:
    """A call's arguments as the model wrote them: the JSON text parsed, else the text itself."""
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw or "{}")
    except ValueError:
        return raw


@dataclass(frozen=True)
class Recorded:
    """One call of the original run that has a result: what was asked, and the message the model read."""

    call_id: str
    name: str
    arguments: str  # canonical
    message: Message


def recorded_calls(messages: list[Message]) -> list[Recorded]:
    """The calls of a run's messages that were answered, in the model's order."""
    results = {str(m.get("tool_call_id")): m for m in messages if m.get("role") == "tool"}
    out: list[Recorded] = []
    for message in messages:
        if message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or []:
            answer = results.get(str(call.get("id")))
            if answer is None:  # asked, never answered (the run ended first)
                continue
            function = call.get("function") or {}
            arguments = canonical(parsed(function.get("arguments", "{}")))
            out.append(Recorded(str(call["id"]), str(function.get("name")), arguments, answer))
    return out
