"""The API's side of attachments: issuing uploads and erasing a run's files."""

from __future__ import annotations

from datetime import timedelta

from stepwise.attachments import blobs, intake
from stepwise.attachments.models import UPLOAD_EXPIRES_SECONDS, UploadCreate, UploadTicket
from stepwise.core.errors import Conflict
from stepwise.core.ids import new_id
from stepwise.core.schema import utcnow
from stepwise.store import runs


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


def erase_run(tenant_id: str, run_id: str) -> None:
    """A user's right to deletion: the run's files and their list go, for good (every S3 version);
    a replay of the run is refused from then on (410 input_gone). A run still active would read them
    in its next step: 409 until it ends."""
    run = runs.get(tenant_id, run_id)  # 404 for another tenant's run, like a missing one
    if not runs.erase_attachments(tenant_id, run_id):
        raise Conflict(
            f"run {run.run_id} is still {run.status}; cancel it or wait for it to end, then delete its "
            "attachments",
            code="run_active",
        )
    intake.erase(tenant_id, run_id)  # after the record: a retried DELETE finishes what a failed one began
