"""What the Step that gets the final answer does before Route sends the run to Done: PreResponse
hooks, then the run ends succeeded with its answer."""

from __future__ import annotations

from stepwise.agents.models import Agent
from stepwise.loop.working import Working
from stepwise.runs.ending import end_run
from stepwise.runs.hooks import fire
from stepwise.runs.state import RunContext

BLOCKED_ANSWER = "The answer was withheld by a policy hook: {message}"


def final_answer(work: Working) -> str:
    """The run's last words: its latest assistant message with text."""
    for message in reversed(work.current):
        if message.get("role") == "assistant" and message.get("content"):
            return str(message["content"])
    return ""


def finish(tenant_id: str, work: Working, agent: Agent, context: RunContext) -> bool:
    """PreResponse hooks may withhold or rewrite the answer; the run then ends with it."""
    output = final_answer(work)
    decision = fire(tenant_id, work.run.run_id, agent, "PreResponse", output=output)
    if decision.action == "deny":
        output = BLOCKED_ANSWER.format(message=decision.message or "no reason given")
    elif decision.modified_output is not None:
        output = str(decision.modified_output)
    return end_run(tenant_id, work.run.run_id, "succeeded", output=output, context=context)
