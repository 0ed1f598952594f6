"""What the model is shown of a run's files, built from the stored messages before each model call.

Stored messages never hold file bytes (a message is one DynamoDB item): a user message names its run's
attachments by id (their names and types are read from the run record, so erasing a run's files takes
them out of every later prompt too) and a tool message lists the images its tool returned, under the
`stepwise` key, which never reaches a provider. Here, for the current turn (from the last user message
on, where the model is still working on them), images become image parts when the model supports vision
(litellm knows), otherwise the words of the deployment's vision model (`vision`), or else a note; PDFs
become their text; CSV, JSON and text files are inline when small and described (columns, first rows,
row count) when large, with `attachment_read` to read further. In earlier turns every file is a one-line
note: the model saw it then and its answer about it stays, so a session never sends a photo again on
every call.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from stepwise.attachments import content
from stepwise.attachments import vision as _vision
from stepwise.attachments.models import Attachment
from stepwise.core import safejson
from stepwise.llm.models import TOOL_IMAGES_PREFIX

EXTENSION = "stepwise"  # the stored messages' own key, stripped before they are sent
INLINE_CHARS = 20_000  # a text attachment up to this is shown whole
PREVIEW_CHARS = 2_000  # of a larger one, shown with its description
PREVIEW_ROWS = 20
READ_TOOL = "attachment_read"
# Image bytes one model call carries (review finding 2): a run may hold 20 images of 50 MB, and each is
# read, then base64'd, into the step's memory. Past this, an image is a note; providers refuse far less
# per request anyway (Anthropic 5 MB an image, OpenAI 20 MB).
IMAGE_BYTES_PER_CALL = 20 * 1024 * 1024

Message = dict[str, Any]


def supports_vision(model: str) -> bool:
    from stepwise.llm import client

    if client.is_scripted(model):
        return True  # the local stand-in takes what a vision model takes, so the image path runs
    client.warm()  # imports litellm once, on its local cost map (where supports_vision reads)
    import litellm

    try:
        return bool(litellm.supports_vision(model=model))
    except Exception:  # noqa: BLE001 - a model litellm cannot place: treat it as blind
        return False


def has_files(messages: list[Message]) -> bool:
    """Whether any message carries attachments or tool images (then `attachment_read` is offered)."""
    return any(
        (m.get(EXTENSION) or {}).get("attachments") or (m.get(EXTENSION) or {}).get("attachment_ids")
        for m in messages
    )


Listed = Callable[[str], list[Attachment]]  # a run's id → the attachments its record lists


class _Listings:
    """The attachments of the runs a conversation names, read once per model call from each run's
    record: an erased run's list is gone, so neither its files nor their names reach the model."""

    def __init__(self, listed: Listed) -> None:
        self.listed = listed
        self.runs: dict[str, dict[str, Attachment]] = {}
        self.image_bytes_left = IMAGE_BYTES_PER_CALL

    def files(self, run_id: str, ids: list[str]) -> tuple[list[Attachment], list[str]]:
        """The listed attachments among `ids`, and the ids no longer listed."""
        if run_id not in self.runs:
            self.runs[run_id] = {a.attachment_id: a for a in self.listed(run_id)}
        known = self.runs[run_id]
        return [known[i] for i in ids if i in known], [i for i in ids if i not in known]


def expand(
    messages: list[Message],
    *,
    tenant_id: str,
    model: str,
    listed: Listed,
    strip_earlier: bool = True,
) -> list[Message]:
    """`messages` as the provider gets them. `listed` reads a run's attachments from its record (empty
    for a run erased or gone), once per run a call names. `strip_earlier=False` shows every turn's
    files in full (what the stripping saves: bench/attachments.py)."""
    if not any(EXTENSION in m for m in messages):
        return messages
    vision = supports_vision(model)
    listings = _Listings(listed)
    current = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=0)
    out: list[Message] = []
    images: list[Message] = []  # image parts of the tool results just added, for the carrier message
    for index, message in enumerate(messages):
        if images and message.get("role") != "tool":
            out.append(_carrier(images))
            images = []
        extension = message.get(EXTENSION)
        if not extension:
            out.append(message)
            continue
        own = index >= current  # the running run's turn: its files cannot be erased while it runs
        live = own or not strip_earlier
        sent = {k: v for k, v in message.items() if k != EXTENSION}
        run_id = str(extension.get("run_id"))
        if message.get("role") == "user" and extension.get("attachment_ids"):
            files, erased = listings.files(run_id, [str(i) for i in extension["attachment_ids"]])
            parts = _user_parts(
                str(message.get("content") or ""), files, tenant_id, run_id, live, vision, own, listings
            )
            sent["content"] = parts + [_text(f"[attachment {i}: deleted]") for i in erased]
        elif message.get("role") == "tool" and extension.get("attachments"):
            files = [Attachment.model_validate(a) for a in extension["attachments"]]
            shown = [
                _file_parts(tenant_id, run_id, f, vision, listings, cache=own) if live else [_note(f)]
                for f in files
            ]
            flat = [part for parts in shown for part in parts]
            images.extend(p for p in flat if p.get("type") == "image_url")
            notes = [p["text"] for p in flat if p.get("type") == "text"]
            sent["content"] = "\n".join([str(message.get("content") or ""), *notes]).strip()
        out.append(sent)
    if images:
        out.append(_carrier(images))
    return out


def _carrier(images: list[Message]) -> Message:
    return {"role": "user", "content": [{"type": "text", "text": TOOL_IMAGES_PREFIX}, *images]}


def _user_parts(
    text: str,
    files: list[Attachment],
    tenant_id: str,
    run_id: str,
    live: bool,
    vision: bool,
    own: bool,
    listings: _Listings,
) -> list[Message]:
    parts: list[Message] = [{"type": "text", "text": text}]
    for attachment in files:
        shown = (
            _file_parts(tenant_id, run_id, attachment, vision, listings, cache=own)
            if live
            else [_note(attachment)]
        )
        parts.extend(shown)
    return parts


def _label(attachment: Attachment) -> str:
    return (
        f"attachment {attachment.attachment_id}: {attachment.name} ({attachment.content_type}, "
        f"{_size(attachment.size)})"
    )


def _note(attachment: Attachment) -> Message:
    how = "" if content.is_image(attachment) else f"; {READ_TOOL} reads its content again"
    return {"type": "text", "text": f"[{_label(attachment)}: shown in an earlier turn, not sent again{how}]"}


def _file_parts(
    tenant_id: str,
    run_id: str,
    attachment: Attachment,
    vision: bool,
    listings: _Listings,
    *,
    cache: bool = True,
) -> list[Message]:
    label = _label(attachment)
    try:
        if content.is_image(attachment):
            if not vision:
                described = _vision.describe(tenant_id, run_id, attachment, cache=cache)
                if described is not None:
                    return [
                        _text(f"[{label}: an image, described for you since you cannot see it]\n{described}")
                    ]
                return [_text(f"[{label}: an image; this model cannot see images, so it is not shown]")]
            # Checked on the recorded size, before the bytes are read: what is not sent is never loaded.
            if attachment.size > listings.image_bytes_left:
                return [_text(f"[{label}: not shown, this call already carries its limit of images]")]
            listings.image_bytes_left -= attachment.size
            data = base64.b64encode(content.raw(tenant_id, run_id, attachment, cache=cache)).decode()
            url = f"data:{attachment.content_type};base64,{data}"
            return [_text(f"[{label}]"), {"type": "image_url", "image_url": {"url": url}}]
        body = content.text(tenant_id, run_id, attachment, cache=cache)
    except content.Missing:
        return [_text(f"[{label}: no longer stored (deleted or past retention)]")]
    if len(body) <= INLINE_CHARS:
        return [_text(f"[{label}]\n{body}")]
    return [_text(f"[{label}]\n{describe(attachment, body)}")]


def describe(attachment: Attachment, body: str) -> str:
    """What a large text attachment is, and how to read the rest."""
    more = f"Call {READ_TOOL} with attachment_id {attachment.attachment_id}"
    if attachment.content_type == "text/csv":
        columns, rows = content.csv_rows(body)
        head = "\n".join(",".join(r) for r in rows[:PREVIEW_ROWS])
        return (
            f"A CSV of {len(rows)} rows and {len(columns)} columns: {', '.join(columns)}.\n"
            f"First {min(PREVIEW_ROWS, len(rows))} rows:\n{head}\n"
            f"{more} (offset and limit count rows) to read more rows."
        )
    shape = ""
    if attachment.content_type == "application/json":
        try:
            # safejson: a file nested thousands deep is described, not a RecursionError that fails the run.
            parsed = safejson.loads(body)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            shape = f"A JSON object with keys: {', '.join(list(parsed)[:50])}. "
        elif isinstance(parsed, list):
            shape = f"A JSON array of {len(parsed)} items. "
    lines = body.count("\n") + 1
    return (
        f"{shape}{len(body)} characters, {lines} lines. The first {PREVIEW_CHARS}:\n{body[:PREVIEW_CHARS]}\n"
        f"…\n{more} (offset and limit count characters) to read more."
    )


def _text(text: str) -> Message:
    return {"type": "text", "text": text}


def _size(size: int) -> str:
    for unit, scale in (("MB", 1_000_000), ("KB", 1_000)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"
