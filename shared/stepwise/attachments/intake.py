"""Taking a run's files as it starts: each one copied under the run, hashed and its type sniffed
before the run record lists it. A start refused halfway leaves no copies behind."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence

from stepwise.attachments import blobs
from stepwise.attachments.models import (
    INLINE_LIMIT,
    UPLOAD_LIMIT,
    Attachment,
    AttachmentIn,
    InlineFile,
    UploadRef,
)
from stepwise.attachments.sniff import IMAGE_TYPES, Inspector
from stepwise.core.errors import Gone, PayloadTooLarge, Unprocessable
from stepwise.core.ids import new_id

UPLOAD_HINT = "upload larger files with POST /v1/uploads and pass {upload_id} instead"


def check_inline_size(items: Sequence[AttachmentIn]) -> None:
    """413 before anything is written when the inline files together are over INLINE_LIMIT."""
    total = sum(len(item.data) for item in items if isinstance(item, InlineFile))
    if total > INLINE_LIMIT:
        raise PayloadTooLarge(
            f"inline attachments are {total} bytes of base64, over {INLINE_LIMIT}; {UPLOAD_HINT}",
            code="attachments_too_large",
            details={"inline_bytes": total, "limit": INLINE_LIMIT, "upload": "POST /v1/uploads"},
        )


def take(tenant_id: str, run_id: str, items: Sequence[AttachmentIn]) -> list[Attachment]:
    """Copy, hash and type every file under the run, in order. Any refusal (a missing upload, a file
    whose bytes are not what it claims) undoes the copies already made."""
    check_inline_size(items)
    taken: list[Attachment] = []
    try:
        for item in items:
            if isinstance(item, UploadRef):
                taken.append(_from_upload(tenant_id, run_id, item))
            else:
                taken.append(_inline(tenant_id, run_id, item))
    except BaseException:
        erase(tenant_id, run_id)
        raise
    return taken


def release_uploads(tenant_id: str, items: Sequence[AttachmentIn]) -> None:
    """Delete the uploads a started run took (its copies are the files now): an upload is used once."""
    for item in items:
        if isinstance(item, UploadRef):
            blobs.delete(blobs.upload_key(tenant_id, item.upload_id))


def _from_upload(tenant_id: str, run_id: str, ref: UploadRef) -> Attachment:
    key = blobs.upload_key(tenant_id, ref.upload_id)
    found = blobs.head(key)  # another tenant's upload id names nothing under this tenant's prefix
    if found is None:
        raise Unprocessable(
            f"upload {ref.upload_id} was not found: it was never PUT, has expired, or is not yours",
            code="upload_not_found",
            details={"upload_id": ref.upload_id},
        )
    size, etag = int(found["ContentLength"]), str(found["ETag"])
    name = blobs.uploaded_name(found) or ref.upload_id
    if size > UPLOAD_LIMIT:  # S3 holds uploads to their signed length; this guards a local endpoint
        raise PayloadTooLarge(f"{name} is {size} bytes, over {UPLOAD_LIMIT}", code="upload_too_large")
    inspector = Inspector()
    for chunk in blobs.chunks(key, etag=etag):
        inspector.feed(chunk)
    content_type = inspector.content_type(str(found.get("ContentType") or ""), name)
    attachment = Attachment(
        attachment_id=new_id("att"), name=name, content_type=content_type, size=size, sha256=inspector.sha256
    )
    # At the ETag that was hashed: an upload replaced meanwhile fails the copy instead of slipping by.
    blobs.copy(
        key, blobs.attachment_key(tenant_id, run_id, attachment.attachment_id), content_type, etag=etag
    )
    return attachment


def _inline(tenant_id: str, run_id: str, item: InlineFile) -> Attachment:
    try:
        data = base64.b64decode(item.data, validate=True)
    except (binascii.Error, ValueError):
        raise Unprocessable(
            f"{item.name}: data is not valid base64", code="invalid_base64", details={"name": item.name}
        ) from None
    if not data:
        raise Unprocessable(f"{item.name} is empty", code="empty_attachment", details={"name": item.name})
    inspector = Inspector()
    inspector.feed(data)
    content_type = inspector.content_type(item.content_type, item.name)
    attachment = Attachment(
        attachment_id=new_id("att"),
        name=item.name,
        content_type=content_type,
        size=len(data),
        sha256=inspector.sha256,
    )
    blobs.put(blobs.attachment_key(tenant_id, run_id, attachment.attachment_id), data, content_type)
    return attachment


def carry(tenant_id: str, original_run_id: str, run_id: str, attachments: list[Attachment]) -> None:
    """A replay's copies of its original's files, under the same ids; 410 `input_gone` when one is no
    longer stored (erased, or past retention)."""
    try:
        for attachment in attachments:
            source = blobs.attachment_key(tenant_id, original_run_id, attachment.attachment_id)
            if blobs.head(source) is None:
                raise Gone(
                    f"attachment {attachment.attachment_id} of run {original_run_id} is no longer stored; "
                    "the run cannot be replayed",
                    code="input_gone",
                )
            target = blobs.attachment_key(tenant_id, run_id, attachment.attachment_id)
            blobs.copy(source, target, attachment.content_type)
    except BaseException:
        erase(tenant_id, run_id)
        raise


def erase(tenant_id: str, run_id: str) -> int:
    """Every file of the run (attachments, text derived from them, images tools returned)."""
    return blobs.erase(blobs.run_prefix(tenant_id, run_id))


TOOL_IMAGE_LIMIT = 10 * 1024 * 1024  # bytes of one image a tool returns; a bigger one is only described


def keep_tool_image(tenant_id: str, run_id: str, tool_name: str, mime: str, data: bytes) -> Attachment | None:
    """Store an image a tool returned under the run, so the model can be shown it like an attachment;
    None (described instead) when it is too big or its bytes are not an image we can show."""
    if not data or len(data) > TOOL_IMAGE_LIMIT:
        return None
    inspector = Inspector()
    inspector.feed(data)
    try:
        content_type = inspector.content_type(mime, f"{tool_name} image")
    except Unprocessable:
        return None
    if content_type not in IMAGE_TYPES:
        return None
    attachment = Attachment(
        attachment_id=new_id("att"),
        name=f"image from {tool_name}",
        content_type=content_type,
        size=len(data),
        sha256=inspector.sha256,
    )
    blobs.put(blobs.attachment_key(tenant_id, run_id, attachment.attachment_id), data, content_type)
    return attachment
