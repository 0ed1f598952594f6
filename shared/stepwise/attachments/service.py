"""The API's side of attachments: issuing uploads."""

from __future__ import annotations

from datetime import timedelta

from stepwise.attachments import blobs
from stepwise.attachments.models import UPLOAD_EXPIRES_SECONDS, UploadCreate, UploadTicket
from stepwise.core.ids import new_id
from stepwise.core.schema import utcnow


def create_upload(tenant_id: str, body: UploadCreate) -> UploadTicket:
    """A presigned PUT for one file under the tenant's uploads. Its type is checked when a run takes
    it (the bytes decide), not here: nothing has been sent yet."""
    upload_id = new_id("upl")
    url, headers = blobs.presign_put(
        blobs.upload_key(tenant_id, upload_id),
        content_type=body.content_type,
        size=body.size,
        name=body.name,
        expires=UPLOAD_EXPIRES_SECONDS,
    )
    expires_at = utcnow() + timedelta(seconds=UPLOAD_EXPIRES_SECONDS)
    return UploadTicket(upload_id=upload_id, url=url, headers=headers, expires_at=expires_at)
