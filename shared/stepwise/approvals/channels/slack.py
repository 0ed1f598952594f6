"""Slack: the approval message with its buttons, the button clicks coming back, and the signature that
proves a click came from Slack.

The buttons carry the signed approval token (the same one as in the link), never a task token. A click
arrives at `POST /v1/integrations/slack/interactions`; the API checks the request with
`verify_signature` before reading anything from it, then `parse_interaction`, then `links.verify` on the
token, then answers the interaction exactly as the web form does.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import sys
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TextIO

import httpx

from stepwise.approvals import Decision
from stepwise.approvals.channels import ChannelError
from stepwise.approvals.display import (
    TRUNCATION_MARK,
    deadline_text,
    pretty_arguments,
    reveal_hidden,
    truncate,
)
from stepwise.core import credentials, safejson
from stepwise.core.config import ConfigError
from stepwise.core.errors import Malformed, Unauthorized
from stepwise.net.outbound import OutboundRefused
from stepwise.net.ssrf import guarded_client

SIGNING_SECRET_ENV = credentials.SLACK_SIGNING_SECRET
SIGNATURE_VERSION = "v0"
REPLAY_WINDOW_SECONDS = 5 * 60  # Slack's own recommendation
BLOCK_TEXT_LIMIT = 3000  # a section's text
BUTTON_VALUE_LIMIT = 2000
ACTION_IDS: dict[str, Decision] = {"stepwise_approve": "approve", "stepwise_deny": "deny"}
ACTION_ID_FOR: dict[Decision, str] = {decision: action_id for action_id, decision in ACTION_IDS.items()}

_TIMESTAMP = re.compile(r"[0-9]{1,15}")
_ERROR_BODY_CHARS = 200
_FENCE = "```"
_TRUNCATED_NOTE = "\n_Arguments cut short here: the approval page shows all of them._"
_SLACK_LINK = re.compile(r"<([^|>]+)\|([^>]+)>")


class InvalidSlackSignature(Unauthorized):
    """The request is not provably from Slack, or is a replay: 401."""

    code = "invalid_slack_signature"


class MalformedSlackPayload(Malformed):
    """A signed request whose interaction payload is not a Stepwise button click: 400."""

    code = "malformed_slack_payload"


@dataclass(frozen=True)
class SlackAction:
    """One button click: what was decided, on which token, by whom, and where to update the message."""

    decision: Decision
    token: str
    user_id: str
    user_name: str | None
    response_url: str | None


# --- Verifying requests ---------------------------------------------------------------------------


def signing_secret() -> str:
    """The Slack signing secret (`SLACK_SIGNING_SECRET` locally, its Secrets Manager secret in AWS),
    read when called; unset is a ConfigError, never an open door."""
    value = credentials.get(SIGNING_SECRET_ENV)
    if not value:
        raise ConfigError(f"{SIGNING_SECRET_ENV} is not set: Slack interactions cannot be verified")
    return value


def verify_signature(
    signing_secret: str, timestamp: str, raw_body: bytes, signature: str, now: float
) -> None:
    """Raise InvalidSlackSignature unless `signature` is Slack's v0 signature of this request, made
    within REPLAY_WINDOW_SECONDS of `now` (epoch seconds).

    Slack's algorithm: `v0=` + hex(HMAC-SHA256(signing secret, "v0:{timestamp}:{raw body}")), with the
    timestamp and signature from the `X-Slack-Request-Timestamp` and `X-Slack-Signature` headers.
    `raw_body` must be the bytes Slack sent (base64-decoded if API Gateway encoded them), not a form
    re-encoded from parsed fields.
    """
    if not signing_secret:
        raise ConfigError("the Slack signing secret is empty")
    if not timestamp or not _TIMESTAMP.fullmatch(timestamp):
        raise InvalidSlackSignature("the Slack request timestamp is missing or not a number")
    if abs(now - int(timestamp)) > REPLAY_WINDOW_SECONDS:
        raise InvalidSlackSignature("the Slack request timestamp is more than 5 minutes away from now")
    base = f"{SIGNATURE_VERSION}:{timestamp}:".encode() + raw_body
    digest = hmac.new(signing_secret.encode(), base, hashlib.sha256).hexdigest()
    expected = f"{SIGNATURE_VERSION}={digest}".encode()
    if not hmac.compare_digest(expected, (signature or "").encode("utf-8", "replace")):
        raise InvalidSlackSignature("the Slack request signature does not match")


# --- Reading clicks -------------------------------------------------------------------------------


def parse_interaction(form_body: str) -> SlackAction:
    """The click in Slack's interaction request: a form whose `payload` field is a block_actions JSON.

    Call only after `verify_signature`. Raises MalformedSlackPayload for anything else.
    """
    try:
        fields = urllib.parse.parse_qs(form_body, max_num_fields=10, errors="strict")
    except ValueError as exc:
        raise MalformedSlackPayload(f"the Slack request is not a form: {exc}") from None
    raw = fields.get("payload")
    if not raw or len(raw) != 1:
        raise MalformedSlackPayload("the Slack request has no payload field")
    try:
        payload = safejson.loads(raw[0])
    except ValueError:
        raise MalformedSlackPayload("the Slack payload is not JSON") from None
    if not isinstance(payload, dict) or payload.get("type") != "block_actions":
        kind = payload.get("type") if isinstance(payload, dict) else type(payload).__name__
        raise MalformedSlackPayload(f"expected a block_actions payload, got {kind!r}")
    actions = payload.get("actions")
    if not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
        raise MalformedSlackPayload("the Slack payload has no actions")
    action = actions[0]
    decision = ACTION_IDS.get(str(action.get("action_id")))
    if decision is None:
        raise MalformedSlackPayload(f"unknown action_id {action.get('action_id')!r}")
    token = action.get("value")
    if not isinstance(token, str) or not token:
        raise MalformedSlackPayload("the clicked button has no value")
    user = payload.get("user")
    if not isinstance(user, dict) or not isinstance(user.get("id"), str) or not user["id"]:
        raise MalformedSlackPayload("the Slack payload names no user")
    user_name = user.get("username") or user.get("name")
    response_url = payload.get("response_url")
    return SlackAction(
        decision=decision,
        token=token,
        user_id=user["id"],
        user_name=user_name if isinstance(user_name, str) else None,
        response_url=response_url if isinstance(response_url, str) and response_url else None,
    )


# --- Building messages ----------------------------------------------------------------------------


def approval_message(
    *,
    agent_name: str,
    tool_name: str,
    arguments: Mapping[str, Any],
    approve_value: str,
    deny_value: str,
    link_url: str,
    expires_at: datetime | None = None,
) -> dict[str, Any]:
    """A Block Kit message asking for a decision: who wants to run what, the arguments, two buttons, and
    the approval page as a fallback (and the place to read arguments too long for Slack)."""
    for value in (approve_value, deny_value):
        if not value or len(value) > BUTTON_VALUE_LIMIT:
            raise ValueError(f"a button value must be 1 to {BUTTON_VALUE_LIMIT} characters")
    agent, tool = _mrkdwn(reveal_hidden(agent_name)), _mrkdwn(reveal_hidden(tool_name))
    summary = f"Approval needed: *{agent}* wants to run `{tool}`."
    link = f"<{_mrkdwn(link_url)}|Open the approval page>"
    context = f"Buttons not working? {link}"
    if expires_at is not None:
        context += f" · Decide before {deadline_text(expires_at)}."
    return {
        "text": f"Approval needed: {agent} wants to run {tool}",  # notifications and screen readers
        "blocks": [
            {"type": "section", "block_id": "stepwise_summary", "text": _text(summary)},
            {"type": "section", "block_id": "stepwise_arguments", "text": _text(_arguments_block(arguments))},
            {
                "type": "actions",
                "block_id": "stepwise_decision",
                "elements": [
                    _button("approve", "Approve", "primary", approve_value),
                    _button("deny", "Deny", "danger", deny_value),
                ],
            },
            {"type": "context", "block_id": "stepwise_link", "elements": [_text(context)]},
        ],
    }


def decided_message(*, agent_name: str, tool_name: str, decision: Decision, user_id: str) -> dict[str, Any]:
    """What to POST to a click's `response_url`: the request, buttons gone, with who decided what."""
    verb = "approved" if decision == "approve" else "denied"
    agent, tool = _mrkdwn(reveal_hidden(agent_name)), _mrkdwn(reveal_hidden(tool_name))
    text = f"<@{_mrkdwn(user_id)}> {verb} *{agent}* running `{tool}`."
    return {
        "replace_original": True,
        "text": text,
        "blocks": [{"type": "section", "block_id": "stepwise_decided", "text": _text(text)}],
    }


def _button(decision: Decision, label: str, style: str, value: str) -> dict[str, Any]:
    return {
        "type": "button",
        "action_id": ACTION_ID_FOR[decision],
        "text": {"type": "plain_text", "text": label},
        "style": style,
        "value": value,
    }


def _text(mrkdwn: str) -> dict[str, str]:
    return {"type": "mrkdwn", "text": mrkdwn}


def _arguments_block(arguments: Mapping[str, Any]) -> str:
    # Escape first, then cut, so the cut counts the characters Slack counts and cannot split an entity.
    body = _mrkdwn(pretty_arguments(arguments))
    # A run of backticks inside the arguments would close the code block early.
    body = re.sub(r"`{3,}", lambda run: "\u200b".join(run.group()), body)
    whole = f"{_FENCE}\n{body}\n{_FENCE}"
    if slack_len(whole) <= BLOCK_TEXT_LIMIT:
        return whole
    room = BLOCK_TEXT_LIMIT - slack_len(f"{_FENCE}\n\n{_FENCE}{_TRUNCATED_NOTE}")
    cut = truncate(body, room - slack_len(TRUNCATION_MARK), mark="", measure=slack_len)
    cut = re.sub(r"&[a-z]*$", "", cut)  # the start of an entity, such as "&am", would show as text
    return f"{_FENCE}\n{cut}{TRUNCATION_MARK}\n{_FENCE}{_TRUNCATED_NOTE}"


def slack_len(text: str) -> int:
    """Length as Slack counts it (UTF-16 code units, as in JavaScript): an emoji counts twice."""
    return len(text.encode("utf-16-le")) // 2


def _mrkdwn(text: str) -> str:
    # The three characters Slack's mrkdwn requires escaped; everything else is literal.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# --- Sending --------------------------------------------------------------------------------------


def post_webhook(webhook_url: str, message: Mapping[str, Any], *, timeout: float = 5) -> None:
    """POST `message` to a Slack incoming webhook (or a click's response_url) through the SSRF guard.

    Raises ChannelError when it cannot be delivered. A webhook URL is a credential, so it is left out of
    the error; redirects are not followed (Slack does not redirect webhooks).
    """
    try:
        # Slack answers "ok" or a short error: anything much bigger is not Slack.
        with guarded_client(timeout=timeout, max_response_bytes=64 * 1024, follow_redirects=False) as client:
            response = client.post(webhook_url, json=dict(message))
    except OutboundRefused as exc:  # a blocked destination, an answer too large or in stacked encodings
        raise ChannelError(f"Slack webhook refused: {exc.message}") from None
    except httpx.HTTPError as exc:
        raise ChannelError(f"Slack webhook unreachable: {type(exc).__name__}") from None
    if not response.is_success:
        raise ChannelError(
            f"Slack webhook answered {response.status_code}: {response.text[:_ERROR_BODY_CHARS]}"
        )


def print_message(message: Mapping[str, Any], *, file: TextIO | None = None) -> None:
    """Print a message that has no webhook to go to (the local stack), readable, with its link spelled out."""
    out = file or sys.stdout
    print(f"---- Slack message (no webhook configured) {'-' * 30}", file=out)
    print(plain_text(message), file=out)
    print("-" * 73, file=out, flush=True)


def plain_text(message: Mapping[str, Any]) -> str:
    """A Block Kit message as plain text: section texts, buttons as `[Label]`, links as `label: url`."""
    lines: list[str] = []
    for block in message.get("blocks", []):
        if block.get("type") == "section":
            lines.append(block["text"]["text"])
        elif block.get("type") == "actions":
            lines.append(" ".join(f"[{element['text']['text']}]" for element in block["elements"]))
        elif block.get("type") == "context":
            lines.extend(element.get("text", "") for element in block["elements"])
    if not lines:
        lines.append(message.get("text", ""))
    text = _SLACK_LINK.sub(lambda link: f"{link.group(2)}: {link.group(1)}", "\n".join(lines))
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
