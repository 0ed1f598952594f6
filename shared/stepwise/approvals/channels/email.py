"""Email: the approval request as a message with a text and an HTML part, sent with SES v2.

Both links lead to the approval page, because opening a link never decides anything (mail scanners
open every link in a message). The "approve" link carries `?decision=approve`, which only highlights
the Approve button there; the human still presses it.
"""

from __future__ import annotations

import html
import re
import sys
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TextIO

from stepwise.approvals.channels import ChannelError
from stepwise.approvals.display import (
    as_utc,
    deadline_text,
    pretty_arguments,
    require_web_url,
    reveal_hidden,
    truncate,
)

MAX_RECIPIENTS = 50  # SES v2 send_email takes at most 50 destinations per message
MAX_ARGUMENTS_CHARS = 20_000  # beyond this the page, not the inbox, is the place to read them
MAX_SUBJECT_CHARS = 150
_ARGUMENTS_CUT = "\n… (cut short: the approval page shows all of the arguments)"
_FONT = "system-ui,-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif"
_BUTTON = (
    "display:inline-block;padding:12px 22px;margin:0 8px 8px 0;border-radius:6px;font-weight:700;"
    "font-size:17px;text-decoration:none;"
)


@dataclass(frozen=True)
class ApprovalEmail:
    subject: str
    text: str
    html: str


def approval_email(
    *,
    agent_name: str,
    tool_name: str,
    arguments: Mapping[str, Any],
    approve_url: str,
    review_url: str,
    expires_at: datetime,
) -> ApprovalEmail:
    """The message asking a human to decide; `approve_url` should be the page with `?decision=approve`."""
    require_web_url(approve_url)
    require_web_url(review_url)
    agent, tool = reveal_hidden(agent_name), reveal_hidden(tool_name)
    shown = truncate(pretty_arguments(arguments), MAX_ARGUMENTS_CHARS, mark=_ARGUMENTS_CUT)
    deadline = deadline_text(expires_at)
    subject = _subject(f"Approval needed: {agent} wants to run {tool}")
    text = f"""Agent {agent} wants to run the tool {tool} and needs your decision.

Arguments:
{shown}

Decide before {deadline}. After that the request expires and the agent is told it timed out.

Approve (you confirm on the page):
{approve_url}

Review, then approve or deny:
{review_url}

Opening a link decides nothing: each one leads to a page where you press Approve or Deny.
"""
    e = html.escape
    body = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{e(subject)}</title>
</head>
<body style="margin:0;padding:0;background:#ffffff;color:#1a1a1a;font-family:{_FONT};font-size:16px;\
line-height:1.5">
<div role="article" aria-label="{e(subject)}" style="max-width:640px;margin:0 auto;padding:20px 16px">
<h1 style="font-size:22px;line-height:1.3;margin:0 0 16px">Approval needed</h1>
<p style="margin:0 0 16px">Agent <strong>{e(agent)}</strong> wants to run the tool <strong><code>{e(tool)}\
</code></strong> and needs your decision.</p>
<h2 style="font-size:17px;margin:20px 0 8px">Arguments</h2>
<pre style="margin:0;padding:12px;background:#f2f3f5;border:1px solid #767676;border-radius:6px;\
white-space:pre-wrap;word-break:break-word;font-family:Menlo,Consolas,monospace;font-size:14px;\
line-height:1.45">{e(shown)}</pre>
<p style="margin:16px 0">Decide before <strong><time datetime="{as_utc(expires_at).isoformat()}">\
{e(deadline)}</time></strong>. After that the request expires and the agent is told it timed out.</p>
<p style="margin:24px 0 8px">
<a href="{e(approve_url)}" style="{_BUTTON}background:#0b6b2f;color:#ffffff">Approve…</a>
<a href="{e(review_url)}" style="{_BUTTON}background:#ffffff;color:#1a1a1a;border:2px solid #1a1a1a">\
Review and decide</a>
</p>
<p style="margin:16px 0;color:#4a4a4a;font-size:14px">Opening a link decides nothing: each one leads to a \
page where you press Approve or Deny. If the buttons do not work, open this address:<br>\
<a href="{e(review_url)}" style="color:#1d4ed8;word-break:break-all">{e(review_url)}</a></p>
</div>
</body>
</html>
"""
    return ApprovalEmail(subject=subject, text=text, html=body)


def _subject(text: str) -> str:
    # One line, no control or format characters (a header must not break or hide text), bounded.
    cleaned = "".join(" " if unicodedata.category(c)[0] in "CZ" else c for c in text)
    return truncate(re.sub(r"\s+", " ", cleaned).strip(), MAX_SUBJECT_CHARS)


def send_email(sender: str, to: Sequence[str], message: ApprovalEmail, *, client: Any = None) -> None:
    """Send `message` to everyone in `to` with SES v2 (one message; recipients deduplicated).

    More than MAX_RECIPIENTS is a ValueError rather than several sends, so a failure can never leave
    some approvers mailed and others not. SES failures raise ChannelError. `client` is an SES v2
    client (default: the process's shared one).
    """
    recipients = list(dict.fromkeys(address.strip() for address in to if address.strip()))
    if not recipients:
        raise ValueError("an approval email needs at least one recipient")
    if len(recipients) > MAX_RECIPIENTS:
        raise ValueError(f"an approval email can go to at most {MAX_RECIPIENTS} recipients")
    from botocore.exceptions import BotoCoreError, ClientError

    if client is None:
        from stepwise.core import aws

        client = aws.client("sesv2")
    try:
        client.send_email(
            FromEmailAddress=sender,
            Destination={"ToAddresses": recipients},
            Content={
                "Simple": {
                    "Subject": {"Data": message.subject, "Charset": "UTF-8"},
                    "Body": {
                        "Text": {"Data": message.text, "Charset": "UTF-8"},
                        "Html": {"Data": message.html, "Charset": "UTF-8"},
                    },
                }
            },
        )
    except (ClientError, BotoCoreError) as exc:
        raise ChannelError(f"SES could not send the approval email: {exc}") from exc


def print_email(to: Sequence[str], message: ApprovalEmail, *, file: TextIO | None = None) -> None:
    """Print the email instead of sending it (the local stack has no SES): headers, then the text part."""
    out = file or sys.stdout
    print(f"---- email (local stack: printed, not sent) {'-' * 29}", file=out)
    print(f"To: {', '.join(to)}", file=out)
    print(f"Subject: {message.subject}", file=out)
    print(file=out)
    print(message.text.rstrip("\n"), file=out)
    print("-" * 73, file=out, flush=True)
