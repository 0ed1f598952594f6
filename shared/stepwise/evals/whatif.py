"""What-if replay: a recorded run again, with the same input and the session history it saw, under
new overrides (model, system prompt, tools, temperature, max_steps, or another agent), its tool calls
served from the original's record (stepwise.loop.whatif). It never performs an effect and never waits
on a human; it lives in a session of its own, so the original's is not extended."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from stepwise.agents import bounds
from stepwise.agents.models import AgentCreate, AgentPatch
from stepwise.core.errors import Conflict, Gone, NotFound, Unprocessable
from stepwise.core.ids import AGENT_ID, new_id
from stepwise.core.schema import Strict
from stepwise.llm.models import ScriptTurn
from stepwise.runs.models import Run, RunCreate
from stepwise.runs.ports import stores
from stepwise.runs.start import start_run
from stepwise.tools.models import AgentTool, Tool

TRIGGER = "what_if"


def _as_in_an_agent_edit(name: str) -> Any:
    """The agent edit's own field (type bounds and all): a what-if is validated like an agent edit."""
    return AgentPatch.model_fields[name]


class WhatIf(Strict):
    """`POST /v1/runs/{run_id}/what-if`: what changes, how calls are matched, and what may happen live."""

    model: str | None = _as_in_an_agent_edit("model")
    system_prompt: str | None = _as_in_an_agent_edit("system_prompt")
    tools: list[Tool] | None = Field(default=None, description="The agent's tool list, replaced")
    temperature: float | None = _as_in_an_agent_edit("temperature")
    max_steps: int | None = _as_in_an_agent_edit("max_steps")
    agent_id: str | None = Field(default=None, pattern=AGENT_ID, description="Another agent of the tenant")
    match: Literal["arguments", "name"] = Field(
        default="arguments",
        description="`arguments`: a call is served when a recorded call has the same tool and canonical "
        "arguments; `name`: the next unused recorded call of the same tool",
    )
    live_reads: bool = Field(default=False, description="Run unmatched read-only calls live")
    webhooks: bool = Field(
        default=False, description="Deliver the what-if run's own webhook (its end), as the agent's runs do"
    )
    script: list[ScriptTurn] | None = Field(
        default=None, description="The scripted model's turns (local and tests), else the original's"
    )

    @model_validator(mode="after")
    def _tools_like_an_agent(self) -> WhatIf:
        if self.tools is not None:  # unique names, as an agent's tool list must have
            AgentCreate(name="what-if", tools=self.tools)
        return self

    def request(self) -> dict[str, Any]:
        """What the run records: the overrides given, `match`, `live_reads` and `webhooks`."""
        shown = self.model_dump(mode="json", exclude_none=True, exclude={"script"})
        return {**shown, "match": self.match, "live_reads": self.live_reads, "webhooks": self.webhooks}


def _check(tenant_id: str, body: WhatIf) -> None:
    """What an agent edit checks beyond the body: the model's bounds, the delegates' existence."""
    bounds.check_named(body.model)
    agents = stores().agents
    for tool in body.tools or []:
        if isinstance(tool, AgentTool):
            try:
                agents.get(tenant_id, tool.agent_id)
            except NotFound as exc:
                raise Unprocessable(
                    f"tool {tool.name}: agent {tool.agent_id} not found", code="unknown_agent"
                ) from exc


def start_what_if(tenant_id: str, run_id: str, body: WhatIf, /, **start: Any) -> Run:
    """Start the what-if run of `run_id`. NotFound for an unknown run or another tenant's, Conflict
    `run_active` for one still going, Gone `input_gone` when its input or its record is no longer
    stored. `start` goes to start_run as it is (a suite passes its own arguments)."""
    store = stores()
    original = store.runs.get(tenant_id, run_id)
    if not original.done:
        raise Conflict(
            f"run {run_id} is still {original.status}; a what-if replays a finished run: wait for it "
            "or cancel it first",
            code="run_active",
        )
    if not original.input or original.attachments_erased_at is not None:
        raise Gone(f"the input of run {run_id} is no longer stored; it cannot be replayed", code="input_gone")
    if not store.sessions.run_messages(tenant_id, original.session_id, run_id):
        raise Gone(
            f"the record of run {run_id} (its messages) is past retention; it cannot be replayed",
            code="input_gone",
        )
    _check(tenant_id, body)
    agent_id = body.agent_id or original.agent_id
    create = RunCreate(
        message=original.input,
        max_steps=body.max_steps or original.max_steps,
        max_tokens_budget=original.max_tokens_budget,
        metadata=original.metadata,
        script=body.script if body.script is not None else original.script,
        user_id=original.user_id,  # the same user's memories are recalled; none are written
    )
    new_run_id = start.pop("run_id", None) or new_id("run")
    # What a door added to the original (its caller's instructions and own client tools) it sees again.
    start.setdefault("instructions", original.instructions)
    start.setdefault("client_tools", original.client_tools or None)
    return start_run(
        tenant_id,
        agent_id,
        create,
        run_id=new_run_id,
        trigger_id=start.pop("trigger_id", None) or f"{TRIGGER}:{new_run_id}",
        replayed=original if original.attachments else None,  # its files, copied under the new run
        what_if_of=original.run_id,
        what_if={**body.request(), "session_id": original.session_id},
        **start,
    )
