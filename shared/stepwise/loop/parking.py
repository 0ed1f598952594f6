"""Parking a run: a pause of the whole run with no tool call (its budget is reached, its provider's
circuit is open), taken by the Step before the model call.

A park is an interaction of its own kind (`budget`, `provider`) holding the pause's data, returned
as the Step's `{action: "wait", wait}`: Await stores the task token on it exactly as for an approval
and announces it (the event named in its data, and the webhook), so no Lambda runs while it waits and
no state transition is added beyond Await's. Its timeout is when the reason may have passed by
itself (a budget's next period). Resuming answers the interaction and sends the token back
(stepwise.runs.answers.resume_parked, which whatever lifts the reason calls); the next Step closes
the park and goes on to the model call, where the reason is checked again.

The run is also listed under its tenant in the parked runs (QuotasTable, stepwise.usage.parked), in
the order it parked, for the reconciler's sweep to find.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stepwise.interactions.models import NewInteraction, digest
from stepwise.runs.models import Run
from stepwise.runs.ports import stores
from stepwise.runs.state import RunContext, Wait
from stepwise.usage import parked

# A park has no tool call: its interaction's call fields say so.
NO_CALL = ""
NO_INDEX = -1


@dataclass(frozen=True)
class Parked:
    """Like a call's Paused, for the whole run: the wait Await starts on."""

    wait: Wait
    event: str
    data: dict[str, Any]


def park_id(run: Run, context: RunContext, kind: str) -> str:
    """Derived from the run and its count of parks, so a retried Step finds the park it made."""
    return f"int_{run.run_id.removeprefix('run_')}_{kind[0]}{context.parks + 1}"


def park(
    tenant_id: str,
    run: Run,
    context: RunContext,
    kind: str,
    data: dict[str, Any],
    *,
    event: str,
    timeout_seconds: int,
) -> tuple[Parked, RunContext]:
    """Create the park's interaction (once) and the wait; the context counts the park. `event` is what
    Await announces with `data` (`budget_reached`, `provider_paused`)."""
    interaction_id = park_id(run, context, kind)
    arguments = {"event": event, "data": data}
    new = NewInteraction(
        interaction_id=interaction_id,
        run_id=run.run_id,
        session_id=run.session_id,
        listed_session_id=run.root_session_id,
        agent_id=run.agent_id,
        kind=kind,
        step=context.steps,
        tool_call_id=NO_CALL,
        tool_call_index=NO_INDEX,
        tool_name=kind,
        arguments=arguments,
        digest=digest(tenant_id, kind, arguments),
        timeout_seconds=timeout_seconds,
    )
    interaction = stores().interactions.create(tenant_id, new)
    wait = Wait(
        interaction_id=interaction.interaction_id,
        tool_call_id=NO_CALL,
        kind=kind,
        timeout_seconds=interaction.timeout_seconds,
    )
    context = context.model_copy(update={"parks": context.parks + 1, "waits": [wait]})
    parked.add(tenant_id, run.run_id, interaction.interaction_id, kind, data, interaction.created_at)
    return Parked(wait=wait, event=event, data=data), context


def unpark(tenant_id: str, run: Run, context: RunContext) -> RunContext:
    """The Step after a park: close it (answered: resumed; else its timeout passed) and go on. The
    reason is checked again before the model call, which may park anew."""
    for wait in context.waits:
        if wait.run_level:
            stores().interactions.close(tenant_id, wait.interaction_id, "expired")  # no-op once answered
    stores().runs.transition(tenant_id, run.run_id, "running", allowed_from={"waiting"})
    return context.model_copy(update={"waits": [w for w in context.waits if not w.run_level]})
