"""A step's tool calls: the scope they share, and what each comes to, as tagged unions (as
openai-agents' NextStep* are) rather than one object with optional fields.

- Gating a call the model asked for (stepwise.loop.gating) gives `Refused | Ready | Paused`.
- A wait that is over (stepwise.loop.waits) gives `Resolved | Ready`: a result to store, or an
  approved call to run with exactly the approved arguments.
- Acting on a Ready call (stepwise.loop.execution) stores its result, or, for an agent tool,
  gives the `Refused | Paused` of its delegation.

Arguments come from the stored assistant message, never from the state machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stepwise import ledger
from stepwise.agents.models import Agent
from stepwise.llm.models import Usage
from stepwise.mcp.models import McpToolRef
from stepwise.runs.models import Run
from stepwise.runs.state import CallRef, Wait
from stepwise.tools.base import TOOL_RESULT_LIMIT, ToolResult
from stepwise.tools.builtin import ToolScope
from stepwise.tools.models import AgentTool, BuiltinTool, CodeTool, HttpTool, WorkflowTool

# An agent or workflow tool delegates: its call is a child run.
Executable = HttpTool | CodeTool | BuiltinTool | McpToolRef | AgentTool | WorkflowTool
Message = dict[str, Any]


@dataclass(frozen=True)
class StepScope:
    """What every call of one step shares; the tools' and the ledger's scopes derive from it."""

    tenant_id: str
    run: Run
    agent: Agent
    step: int
    assistant: Message  # the step's stored assistant message
    # A what-if run's Replay (stepwise.loop.whatif, which imports this module): its record and what
    # became of its calls. None for every other run.
    replay: Any = None

    def tool_scope(self) -> ToolScope:
        """What a tool is given: tenant, agent, run, session and user, never from the model."""
        from stepwise.llm.client import resolve_model

        run = self.run
        return ToolScope(
            tenant_id=self.tenant_id,
            agent_id=run.agent_id,
            run_id=run.run_id,
            session_id=run.session_id,
            user_id=run.user_id,
            model=resolve_model(self.agent.model),
        )

    def call_scope(self, ref: CallRef) -> ledger.CallScope:
        """Where the ledger keys the call: a replay keeps its original's trigger."""
        run = self.run
        return ledger.CallScope(
            tenant_id=self.tenant_id,
            agent_id=run.agent_id,
            run_id=run.run_id,
            trigger_id=run.trigger_id or run.run_id,
            step=self.step,
            tool_call_id=ref.id,
        )


@dataclass(frozen=True)
class Ready:
    """A call allowed to run, with the arguments it runs with (a PreToolUse hook may have changed them)."""

    ref: CallRef
    tool: Executable
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Refused:
    """The call will not run: its error result is stored, as the model reads it."""

    ref: CallRef
    message: Message
    error: str | None  # the stored result's error code


@dataclass(frozen=True)
class Paused:
    """The call waits for a human, the app, or (a delegation) a child run."""

    ref: CallRef
    wait: Wait
    child_run_id: str | None = None  # the child run a delegation's wait is for


@dataclass(frozen=True)
class Resolved:
    """A wait is over with a result to store: an answer, a denial, a timeout, or a child's outcome."""

    ref: CallRef
    result: ToolResult
    spent: Usage | None = None  # a delegation's: what its child's subtree spent
    limit: int | None = TOOL_RESULT_LIMIT  # a child's answer reaches the model whole


Gated = Refused | Ready | Paused
Settled = Resolved | Ready
