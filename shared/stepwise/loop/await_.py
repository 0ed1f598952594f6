"""Await (and each branch of AwaitAll): the first act of every wait. Store the task token on the
interaction, mark the run waiting, and tell whoever must answer. Returns at once: while the run
waits on its token, no Lambda runs; the answer (or the state's timeout) resumes the run at Step."""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools import Logger
from pydantic import BaseModel

from stepwise.core import observability, tracing
from stepwise.interactions.models import Interaction
from stepwise.runs import answers, delegation, events
from stepwise.runs.models import EventType
from stepwise.runs.ports import stores
from stepwise.runs.queue import StartFailed, launch
from stepwise.runs.state import Wait
from stepwise.webhooks.enqueue import enqueue

logger = Logger(service="stepwise")


class WaitEvent(BaseModel):
    tenant_id: str
    run_id: str
    step: int = 0
    wait: Wait
    task_token: str


def public_url() -> str:
    return os.environ.get("STEPWISE_PUBLIC_URL", "").rstrip("/")


def approval_link(tenant_id: str, interaction: Interaction) -> str:
    from stepwise.approvals import links

    token = links.sign(interaction.interaction_id, tenant_id, interaction.deadline, links.secret())
    return links.approval_url(public_url(), token)


def _console_only() -> bool:
    """The local stack prints what it would send (it has no SES and no route to Slack)."""
    return os.environ.get("STEPWISE_CHANNELS") == "console"


def _tell_humans(tenant_id: str, interaction: Interaction, url: str) -> None:
    """Email and Slack, per the approval hook's channels. A channel that fails is logged, not fatal:
    the approval still waits and can be answered through the API or the link."""
    from stepwise.approvals import links
    from stepwise.channels import email, slack

    agent = stores().agents.get(tenant_id, interaction.agent_id)
    token = url.rsplit("/", 1)[-1]
    for channel in interaction.channels or []:
        try:
            if channel.get("type") == "email":
                mail = email.approval_email(
                    agent_name=agent.name,
                    tool_name=interaction.tool_name,
                    arguments=interaction.arguments,
                    approve_url=links.approval_url(public_url(), token, decision="approve"),
                    review_url=url,
                    expires_at=interaction.deadline,
                )
                recipients = list(channel.get("to") or [])
                sender = os.environ.get("APPROVAL_SENDER", "")
                if _console_only():  # the local stack: show what would be sent, links and all
                    email.print_email(recipients, mail)
                elif sender:
                    email.send_email(sender, recipients, mail)
                else:
                    # In AWS the function's output is a log: the signed link, a credential until it
                    # expires, must never be written there. No sender means no mail, said without it.
                    logger.warning(
                        "approval email not sent: APPROVAL_SENDER (template parameter ApprovalSender) "
                        "is not set; answer through the API",
                        extra={"interaction_id": interaction.interaction_id, "recipients": len(recipients)},
                    )
            elif channel.get("type") == "slack":
                message = slack.approval_message(
                    agent_name=agent.name,
                    tool_name=interaction.tool_name,
                    arguments=interaction.arguments,
                    approve_value=token,
                    deny_value=token,
                    link_url=url,
                    expires_at=interaction.deadline,
                )
                if _console_only():  # the local stack: show what would be posted, with its link
                    slack.print_message(message)
                elif channel.get("webhook_url"):
                    slack.post_webhook(str(channel["webhook_url"]), message)
                else:  # as for email: never the link in a log
                    logger.warning(
                        "approval Slack message not sent: the channel has no webhook_url",
                        extra={"interaction_id": interaction.interaction_id},
                    )
        except Exception:  # one broken channel must not strand the approval
            logger.exception("approval channel failed", extra={"channel": channel.get("type")})


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
    data: dict[str, Any] = {
        "interaction_id": interaction.interaction_id,
        "tool_call_id": interaction.tool_call_id,
        "tool_name": interaction.tool_name,
        "arguments": interaction.arguments,
    }
    etype: EventType = "approval_requested" if interaction.kind == "approval" else "client_tool_requested"
    if interaction.kind == "approval":
        data["approval_url"] = approval_link(wait.tenant_id, interaction)
        data["expires_at"] = interaction.deadline.isoformat()
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
        _tell_humans(wait.tenant_id, interaction, data["approval_url"])
    return {"interaction_id": interaction_id, "status": "pending"}


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
    events.emit(wait.tenant_id, parent.run_id, "delegation_started", data)
    if child.status == "queued":
        try:
            launch(wait.tenant_id, child)
        except StartFailed:  # recorded as failed: the parent resumes with that, rather than waiting a day
            delegation.report(wait.tenant_id, child)
    return {"interaction_id": interaction.interaction_id, "status": "delegated", "child_run_id": child.run_id}
