"""Telling humans that an approval waits for them: the signed link, and the email and Slack message
each approval hook's channels name. The Await state calls it once it has stored the task token."""

from __future__ import annotations

from aws_lambda_powertools import Logger

from stepwise.core import config
from stepwise.interactions.models import Interaction

logger = Logger(service="stepwise")


def public_url() -> str:
    return config.links().public_url


def approval_link(tenant_id: str, interaction: Interaction) -> str:
    """The signed link that opens the approval's page (a credential until its deadline)."""
    from stepwise.approvals import links  # the link secret's reader loads where approvals are made

    token = links.sign(interaction.interaction_id, tenant_id, interaction.deadline, links.secret())
    return links.approval_url(public_url(), token)


def _console_only() -> bool:
    """The local stack prints what it would send (it has no SES and no route to Slack)."""
    return config.channels().console_only


def tell_humans(interaction: Interaction, url: str, *, agent_name: str) -> None:
    """Email and Slack, per the approval hook's channels. A channel that fails is logged, not fatal:
    the approval still waits and can be answered through the API or the link."""
    from stepwise.approvals import links
    from stepwise.approvals.channels import email, slack

    token = url.rsplit("/", 1)[-1]
    for channel in interaction.channels or []:
        try:
            if channel.get("type") == "email":
                mail = email.approval_email(
                    agent_name=agent_name,
                    tool_name=interaction.tool_name,
                    arguments=interaction.arguments,
                    approve_url=links.approval_url(public_url(), token, decision="approve"),
                    review_url=url,
                    expires_at=interaction.deadline,
                )
                recipients = list(channel.get("to") or [])
                sender = config.channels().approval_sender
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
                    agent_name=agent_name,
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
