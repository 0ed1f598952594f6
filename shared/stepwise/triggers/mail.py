"""An email as a trigger's event: a raw RFC 5322 message taken apart with the standard library's
`email` package, and the rules that keep mail loops impossible.

The event a trigger's templates read is `Email.event()`: `from` (the bare address), `from_name`, `to`,
`cc` (lists of addresses), `subject`, `message_id`, `thread_id`, `in_reply_to`, `references`, `date`,
`text` (the text part, else the HTML converted to text) and `attachments` (name, content type, size).
The attachments' bytes go to the run as run attachments (stepwise.attachments), so a message deleted
from the mailbox can still be replayed from its run.
"""

from __future__ import annotations

import email
import email.policy
import html
import re
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import getaddresses, parseaddr
from html.parser import HTMLParser
from typing import Any

MAX_TEXT = 50_000  # characters of the body kept in the event (a run's message is at most 100,000)
# Headers that mark a message no person wrote for this mailbox: answering them is how loops start.
LIST_HEADERS = ("list-id", "list-unsubscribe", "list-post")
BULK_PRECEDENCE = frozenset({"bulk", "list", "junk", "auto_reply"})


@dataclass(frozen=True)
class Part:
    """One attached file of the message."""

    name: str
    content_type: str
    data: bytes


@dataclass(frozen=True)
class Email:
    sender: str  # the bare address of From, lower case
    sender_name: str
    to: list[str]
    cc: list[str]
    subject: str
    message_id: str  # without the angle brackets
    in_reply_to: str | None
    references: list[str]
    date: str | None
    text: str
    headers: dict[str, str]  # lower-case names; the first of each
    attachments: list[Part] = field(default_factory=list)
    thread_id: str = ""  # the provider's thread id (Gmail's), else the first of References, else own id

    def event(self) -> dict[str, Any]:
        """What the trigger's templates read (`{{from}}`, `{{subject}}`, `{{text}}`, `{{thread_id}}`...)."""
        return {
            "from": self.sender,
            "from_name": self.sender_name,
            "to": self.to,
            "cc": self.cc,
            "subject": self.subject,
            "message_id": self.message_id,
            "thread_id": self.thread_id,
            "in_reply_to": self.in_reply_to,
            "references": self.references,
            "date": self.date,
            "text": self.text,
            "attachments": [
                {"name": p.name, "content_type": p.content_type, "size": len(p.data)}
                for p in self.attachments
            ],
        }


def _ids(value: str | None) -> list[str]:
    """Message ids of a References or In-Reply-To header, without their angle brackets."""
    return re.findall(r"<([^<>\s]+)>", value or "")


def _addresses(message: EmailMessage, name: str) -> list[str]:
    return [addr.lower() for _, addr in getaddresses([str(v) for v in message.get_all(name, [])]) if addr]


class _Text(HTMLParser):
    """HTML to readable text: blocks become lines, scripts and styles vanish, links keep their target."""

    BLOCKS = frozenset(
        {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "table", "blockquote"}
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self._skip = 0
        self._href: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style", "head"):
            self._skip += 1
        elif tag in self.BLOCKS:
            self.out.append("\n")
        elif tag == "a":
            self._href = dict(attrs).get("href")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "head"):
            self._skip = max(0, self._skip - 1)
        elif tag in self.BLOCKS:
            self.out.append("\n")
        elif tag == "a" and self._href:
            if self._href.startswith(("http://", "https://", "mailto:")):
                self.out.append(f" ({self._href})")
            self._href = None

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.out.append(data)


def html_to_text(markup: str) -> str:
    parser = _Text()
    parser.feed(markup)
    parser.close()
    text = html.unescape("".join(parser.out))
    lines = [re.sub(r"[ \t\xa0]+", " ", line).strip() for line in text.splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _body(message: EmailMessage) -> str:
    part = message.get_body(preferencelist=("plain", "html"))
    if part is None:
        return ""
    content = part.get_content()
    text = str(content) if part.get_content_type() == "text/plain" else html_to_text(str(content))
    return text.strip()[:MAX_TEXT]


def _attachments(message: EmailMessage) -> list[Part]:
    found = []
    for index, part in enumerate(message.iter_attachments(), start=1):
        data = part.get_payload(decode=True)
        if not isinstance(data, bytes) or not data:
            continue
        name = part.get_filename() or f"attachment-{index}"
        # No path and no control characters: the name as the run's attachment shows it.
        name = re.sub(r"[/\\\x00-\x1f\x7f]", "_", name)[:255] or f"attachment-{index}"
        found.append(Part(name=name, content_type=part.get_content_type(), data=data))
    return found


def parse(raw: bytes, *, thread_id: str | None = None) -> Email:
    """The message taken apart; `thread_id` is the provider's when it has one (Gmail's)."""
    message = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(message, EmailMessage)  # what policy.default builds
    name, sender = parseaddr(str(message.get("from", "")))
    references = _ids(message.get("references"))
    replying = _ids(message.get("in-reply-to"))
    own = (_ids(message.get("message-id")) or [""])[0]
    headers: dict[str, str] = {}
    for key, value in message.items():
        headers.setdefault(key.lower(), str(value))
    return Email(
        sender=sender.lower(),
        sender_name=name,
        to=_addresses(message, "to"),
        cc=_addresses(message, "cc"),
        subject=str(message.get("subject", "")),
        message_id=own,
        in_reply_to=replying[0] if replying else None,
        references=references,
        date=headers.get("date"),
        text=_body(message),
        headers=headers,
        attachments=_attachments(message),
        # A thread is its first message: every reply's References starts with it (RFC 5322 §3.6.4).
        thread_id=thread_id or (references[0] if references else (replying[0] if replying else own)),
    )


def skip_reason(message: Email, mailbox: str | None, *, allow_automated: bool = False) -> str | None:
    """Why this message must start nothing, or None. A message from the trigger's own mailbox never
    does (an agent's reply would trigger it again); nor, unless the trigger allows automated mail,
    one marked Auto-Submitted (RFC 3834), bulk or list mail, or one without a sender."""
    if not message.sender:
        return "no_sender: the message has no From address"
    if mailbox and message.sender == mailbox.lower():
        return "own_mailbox: the message is from the trigger's own mailbox"
    if allow_automated:
        return None
    auto = message.headers.get("auto-submitted", "no").strip().lower()
    if auto and auto != "no":
        return f"automated: Auto-Submitted: {auto}"
    precedence = message.headers.get("precedence", "").strip().lower()
    if precedence in BULK_PRECEDENCE:
        return f"automated: Precedence: {precedence}"
    for name in LIST_HEADERS:
        if name in message.headers:
            return f"automated: list mail ({name})"
    return None
