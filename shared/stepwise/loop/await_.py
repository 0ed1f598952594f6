"""Await (and each branch of AwaitAll): the first act of every wait. Store the task token on the
interaction, mark the run waiting, and tell whoever must answer (stepwise.approvals.notify).
Returns at once: while the run waits on its token, no Lambda runs; the answer (or the state's
timeout) resumes the run at Step."""

from __future__ import annotations

from typing import Any, cast

from aws_lambda_powertools import Logger
from pydantic import BaseModel

from stepwise.approvals import notify
from stepwise.core import observability, tracing
from stepwise.core.schema import rfc3339
from stepwise.interactions.models import Interaction
from stepwise.runs import answers, delegation, events
from stepwise.runs.models import EventType
from stepwise.runs.ports import stores
from stepwise.runs.queue import StartFailed, launch
from stepwise.runs.state import RUN_LEVEL_WAITS, Wait
from stepwise.usage import circuits
from stepwise.webhooks.enqueue import enqueue

logger = Logger(service="stepwise")


class WaitEvent(BaseModel):
    tenant_id: str
    run_id: str
    step: int = 0
    wait: Wait
    task_token: str


def handle(event: dict[str, Any]) -> dict[str, Any]:
    wait = WaitEvent.model_validate(event)
    if not tracing.enabled():
        return _handle(wait)
    run = stores().runs.get(wait.tenant_id, wait.run_id)  # read only for the trace: its root and session
    with tracing.await_span(wait.tenant_id, run, wait.step, wait.wait.kind):
        return _handle(wait)


def _handle(wait: WaitEvent) -> dict[str, Any]:
    interaction_id = wait.wait.interaction_id
    interaction = stores().interactions.attach_token(wait.tenant_id, interaction_id, wait.task_token)
    observability.bind(run_id=wait.run_id, session_id=interaction.session_id, step=wait.step)
    if interaction.status not in ("pending", "answered"):
        return {"interaction_id": interaction_id, "status": interaction.status}  # closed meanwhile
    if interaction.kind == "delegation":
        return _delegate(wait, interaction)
    if interaction.kind == circuits.PROVIDER_WAIT:
        return _provider(wait, interaction)
    if interaction.kind in RUN_LEVEL_WAITS:
        return _parked(wait, interaction)
    data: dict[str, Any] = {
        "interaction_id": interaction.interaction_id,
        "tool_call_id": interaction.tool_call_id,
        "tool_name": interaction.tool_name,
        "arguments": interaction.arguments,
    }
    etype: EventType = "approval_requested" if interaction.kind == "approval" else "client_tool_requested"
    if interaction.kind == "approval":
        data["approval_url"] = notify.approval_link(wait.tenant_id, interaction)
        data["expires_at"] = rfc3339(interaction.deadline)
    events.emit(wait.tenant_id, wait.run_id, etype, data)
    run = stores().runs.get(wait.tenant_id, wait.run_id)
    if run.root_run_id:  # a descendant's human wait shows in the stream the app watches, the root's
        events.emit(wait.tenant_id, run.root_run_id, etype, {**data, "run_id": run.run_id})
    # Keyed on the interaction: Await retried for the same wait queues no second delivery.
    enqueue(wait.tenant_id, run.target(), etype, data, key=interaction_id, at=interaction.created_at)
    if interaction.status == "answered":  # the answer beat the token (the app read the interaction list)
        answers.deliver(wait.tenant_id, interaction_id)
        return {"interaction_id": interaction_id, "status": "answered"}
    # After the event, so a client that sees "waiting" finds what it waits for in the events.
    stores().runs.transition(wait.tenant_id, wait.run_id, "waiting", allowed_from={"running", "waiting"})
    if interaction.kind == "approval":
        agent = stores().agents.get(wait.tenant_id, interaction.agent_id)
        notify.tell_humans(interaction, data["approval_url"], agent_name=agent.name)
    return {"interaction_id": interaction_id, "status": "pending"}


def _parked(wait: WaitEvent, interaction: Interaction) -> dict[str, Any]:
    """A run-level park (stepwise.loop.parking): announce it (its event and webhook, keyed on the
    interaction so a retried Await queues no second delivery), then mark the run waiting, unless it
    was resumed before the token was stored."""
    etype = str(interaction.arguments.get("event"))
    data = {"interaction_id": interaction.interaction_id, **dict(interaction.arguments.get("data") or {})}
    events.emit(wait.tenant_id, wait.run_id, cast(EventType, etype), data)
    run = stores().runs.get(wait.tenant_id, wait.run_id)
    enqueue(
        wait.tenant_id, run.target(), etype, data, key=interaction.interaction_id, at=interaction.created_at
    )
    if interaction.status == "answered":
        answers.deliver(wait.tenant_id, interaction.interaction_id)
        return {"interaction_id": interaction.interaction_id, "status": "answered"}
    stores().runs.transition(wait.tenant_id, wait.run_id, "waiting", allowed_from={"running", "waiting"})
    return {"interaction_id": interaction.interaction_id, "status": "parked"}


def _provider(wait: WaitEvent, interaction: Interaction) -> dict[str, Any]:
    """A provider's circuit is open: the run waits, told by `provider_paused`; nobody is notified (the
    sweep resumes it once a probe gets through)."""
    if interaction.status == "answered":  # the circuit closed and the sweep resumed it before the token
        answers.deliver(wait.tenant_id, interaction.interaction_id)
        return {"interaction_id": interaction.interaction_id, "status": "answered"}
    data = circuits.paused_event(interaction.arguments, interaction.interaction_id)
    events.emit(wait.tenant_id, wait.run_id, "provider_paused", data)
    stores().runs.transition(wait.tenant_id, wait.run_id, "waiting", allowed_from={"running", "waiting"})
    return {"interaction_id": interaction.interaction_id, "status": "pending"}


def _delegate(wait: WaitEvent, interaction: Interaction) -> dict[str, Any]:
    """A delegation's wait: start the child run (the Step recorded it), now that the token its ending
    sends back is stored. The parent stays `running`: it is working, through its child."""
    if interaction.status == "answered":  # a retried Await after the child ended: resume the parent
        answers.deliver(wait.tenant_id, interaction.interaction_id)
        return {"interaction_id": interaction.interaction_id, "status": "answered"}
    parent = stores().runs.get(wait.tenant_id, wait.run_id)
    child = stores().runs.get(wait.tenant_id, delegation.child_run_id(interaction))
    data = {
        "tool_call_id": interaction.tool_call_id,
        "tool_name": interaction.tool_name,
        "child_run_id": child.run_id,
        "agent_id": child.agent_id,
    }
    if child.kind == "workflow":  # a workflow tool's call: its run, on the workflow's own machine
        data["workflow_id"] = child.workflow_ref[0]
    events.emit(wait.tenant_id, parent.run_id, "delegation_started", data)
    if child.status == "queued":
        try:
            if child.kind == "workflow":
                from stepwise.workflows import starting

                starting.launch(wait.tenant_id, child)
            else:
                launch(wait.tenant_id, child)
        except StartFailed:  # recorded as failed: the parent resumes with that, rather than waiting a day
            delegation.report(wait.tenant_id, child)
    return {"interaction_id": interaction.interaction_id, "status": "delegated", "child_run_id": child.run_id}
