"""The HTML a human sees behind an approval link: the request, and the outcome of a decision.

Plain, accessible pages that read well on a phone: no JavaScript, no external assets (nothing to leak
the token in a Referer, nothing to load on a mail client's prefetch), every interpolated value escaped.
Serve them with PAGE_HEADERS.
"""

from __future__ import annotations

import base64
import hashlib
import html
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from stepwise.approvals import DECISIONS, Decision, is_decision
from stepwise.approvals.display import as_utc, deadline_text, pretty_arguments, reveal_hidden
from stepwise.core.errors import Malformed

ResultStatus = Literal["approved", "denied", "already_decided", "expired", "closed", "forged", "error"]
MAX_REASON_CHARS = 1000
_MAX_FORM_FIELDS = 10

_STYLE = """
:root{color-scheme:light dark;--fg:#1a1a1a;--bg:#fff;--muted:#4a4a4a;--box:#f2f3f5;--line:#767676;
--focus:#1d4ed8;--approve:#0b6b2f;--deny:#a4161a}
@media (prefers-color-scheme:dark){:root{--fg:#f2f2f2;--bg:#121212;--muted:#c8c8c8;--box:#1f2227;
--line:#9a9a9a;--focus:#8ab4f8}}
*{box-sizing:border-box}
body{margin:0;color:var(--fg);background:var(--bg);
font:1.0625rem/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:40rem;margin:0 auto;padding:1.25rem 1rem 2.5rem}
h1{font-size:1.5rem;line-height:1.25;margin:.5rem 0 1rem}
h2{font-size:1.125rem;margin:1.5rem 0 .5rem}
pre{background:var(--box);border:1px solid var(--line);border-radius:.5rem;padding:.75rem;margin:0;
white-space:pre-wrap;overflow-wrap:anywhere;font:.9375rem/1.45 ui-monospace,Menlo,Consolas,monospace}
code{font-family:ui-monospace,Menlo,Consolas,monospace}
label{display:block;font-weight:600;margin:1.5rem 0 .375rem}
textarea{width:100%;min-height:5.5rem;padding:.625rem;font:inherit;color:inherit;background:var(--bg);
border:1px solid var(--line);border-radius:.5rem}
.actions{display:flex;flex-wrap:wrap;gap:.75rem;margin-top:1.25rem}
button{flex:1 1 9rem;min-height:3.25rem;padding:.75rem 1rem;border:0;border-radius:.5rem;color:#fff;
font:inherit;font-weight:700;font-size:1.125rem;cursor:pointer}
button[value=approve]{background:var(--approve)}
button[value=deny]{background:var(--deny)}
button:focus-visible,textarea:focus-visible{outline:3px solid var(--focus);outline-offset:3px}
.chosen{box-shadow:0 0 0 3px var(--bg),0 0 0 6px var(--focus)}
.note{color:var(--muted)}
"""
_STYLE_HASH = base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()

# The page may not be framed (a framed Approve button can be clickjacked), runs no script and loads
# nothing but its own inline style, allowed by hash.
PAGE_HEADERS: dict[str, str] = {
    "Content-Type": "text/html; charset=utf-8",
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Robots-Tag": "noindex, nofollow",
}

_BUTTON_LABELS: dict[Decision, str] = {"approve": "Approve", "deny": "Deny"}


class InvalidForm(Malformed):
    """A decision form we cannot act on: no decision, an unknown one, or an oversized reason."""

    code = "invalid_form"


def approval_page(
    *,
    agent_name: str,
    tool_name: str,
    arguments: Mapping[str, Any],
    expires_at: datetime,
    action_url: str,
    preselected: Decision | None = None,
) -> str:
    """The request and a form that POSTs the decision to `action_url`.

    Rendering this page must never decide anything: mail scanners and link previewers fetch every URL
    in a message, so `GET /v1/approvals/{token}` only shows this form and only the POST it submits
    decides. `preselected` (from `?decision=` on a link in the email) only highlights and focuses that
    button.
    """
    buttons = "\n".join(_button(decision, decision == preselected) for decision in DECISIONS)
    chosen = ""
    if preselected is not None:
        label = _BUTTON_LABELS[preselected]
        chosen = f'<p class="note">You chose {label} in the message. Press {label} below to confirm.</p>'
    body = f"""<h1>Approval needed</h1>
<p id="summary">Agent <strong>{_e(agent_name)}</strong> wants to run the tool
<strong><code>{_e(tool_name)}</code></strong> with these arguments.</p>
<h2 id="arguments-heading">Arguments</h2>
<pre aria-labelledby="arguments-heading"><code>{html.escape(pretty_arguments(arguments))}</code></pre>
<p>Decide before <time datetime="{as_utc(expires_at).isoformat()}">{deadline_text(expires_at)}</time>.
After that the request expires and the agent is told it timed out.</p>
{chosen}
<form method="post" action="{html.escape(action_url)}">
<label for="reason">Reason (optional)</label>
<textarea id="reason" name="reason" rows="3" maxlength="{MAX_REASON_CHARS}"></textarea>
<div class="actions">
{buttons}
</div>
</form>
<p class="note">Opening this page decides nothing; only pressing a button does.</p>"""
    return _document("Approval needed", body)


def _button(decision: Decision, chosen: bool) -> str:
    extra = ' class="chosen" autofocus' if chosen else ""
    return (
        f'<button type="submit" name="decision" value="{decision}" aria-describedby="summary"{extra}>'
        f"{_BUTTON_LABELS[decision]}</button>"
    )


@dataclass(frozen=True)
class _Outcome:
    title: str
    message: str
    http_status: int


_OUTCOMES: dict[ResultStatus, _Outcome] = {
    "approved": _Outcome("Approved", "Thank you. The agent will go ahead with the tool call.", 200),
    "denied": _Outcome("Denied", "The tool will not run. The agent has been told you said no.", 200),
    "already_decided": _Outcome(
        "Already decided", "This request was answered earlier. Nothing was changed.", 409
    ),
    "expired": _Outcome(
        "Expired",
        "The deadline for this request passed before a decision. The agent was told it timed out; "
        "nothing was changed.",
        410,
    ),
    "closed": _Outcome(
        "No longer open",
        "The run this request belongs to has finished or was cancelled, so there is nothing left to decide.",
        410,
    ),
    "forged": _Outcome(
        "Link not valid",
        "This approval link is not valid. Open the complete link from the original email or Slack "
        "message; if it still fails, ask for a new request.",
        403,
    ),
    "error": _Outcome("Decision not recorded", "Your decision was not recorded. Please try again.", 400),
}
# The HTTP status each result page is served with; a server failure is the API's generic 500 instead.
RESULT_HTTP_STATUS: dict[ResultStatus, int] = {status: o.http_status for status, o in _OUTCOMES.items()}


def result_page(
    status: ResultStatus,
    detail: str | None = None,
    *,
    decided: Literal["approved", "denied"] | None = None,
) -> str:
    """The page after a POST (or for a link that cannot be shown); serve it with RESULT_HTTP_STATUS.

    `detail` is one more sentence for the human (e.g. which field was wrong). `decided` names the earlier
    outcome on an `already_decided` page: "Already decided: this request was approved earlier."
    """
    outcome = _OUTCOMES[status]
    message = outcome.message
    if status == "already_decided" and decided is not None:
        message = f"This request was {decided} earlier. Nothing was changed."
    body = f'<h1>{_e(outcome.title)}</h1>\n<p role="status">{_e(message)}</p>'
    if detail:
        body += f"\n<p>{_e(detail)}</p>"
    if status not in ("forged", "error"):
        body += '\n<p class="note">You can close this page.</p>'
    return _document(outcome.title, body)


def notice_page(title: str, message: str, detail: str | None = None) -> str:
    """A page that only tells the person what happened (e.g. after authorizing an MCP server)."""
    body = f'<h1>{_e(title)}</h1>\n<p role="status">{_e(message)}</p>'
    if detail:
        body += f"\n<p>{_e(detail)}</p>"
    return _document(title, body)


def parse_form(body: str) -> dict[str, str]:
    """`{"decision": "approve"|"deny", "reason": str}` from an `application/x-www-form-urlencoded` body.

    Raises InvalidForm (400) for a missing, repeated or unknown decision or an oversized reason. The
    reason is stripped, with browser line breaks (CRLF) normalised, and is `""` when none was given.
    Other fields are ignored. The query string is not read: `?decision=` on a link never decides.
    """
    try:
        fields = urllib.parse.parse_qs(
            body, keep_blank_values=True, max_num_fields=_MAX_FORM_FIELDS, errors="strict"
        )
    except ValueError as exc:  # also UnicodeDecodeError, for percent-escapes that are not UTF-8
        raise InvalidForm(f"the form could not be read: {exc}") from None
    decisions = set(fields.get("decision", []))
    if len(decisions) != 1:
        raise InvalidForm("choose exactly one of approve or deny", details={"field": "decision"})
    decision = decisions.pop()
    if not is_decision(decision):
        raise InvalidForm("decision must be approve or deny", details={"field": "decision"})
    reasons = fields.get("reason", [""])
    if len(reasons) != 1:
        raise InvalidForm("give at most one reason", details={"field": "reason"})
    reason = reasons[0].replace("\r\n", "\n").strip()
    if len(reason) > MAX_REASON_CHARS:
        raise InvalidForm(
            f"the reason is longer than {MAX_REASON_CHARS} characters", details={"field": "reason"}
        )
    return {"decision": decision, "reason": reason}


def _e(text: str) -> str:
    return html.escape(reveal_hidden(text))


def _document(title: str, body: str) -> str:
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<meta name="robots" content="noindex, nofollow">
<title>{_e(title)} · Stepwise</title>
<style>{_STYLE}</style>
</head>
<body>
<main>
{body}
</main>
</body>
</html>
"""
