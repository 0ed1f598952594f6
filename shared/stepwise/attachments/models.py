"""Uploads and attachments as the API takes and shows them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, StringConstraints

from stepwise.core.schema import Strict, Timestamp

UPLOAD_LIMIT = 50 * 1024 * 1024  # bytes of one uploaded file
# Inline files travel base64 inside the run's JSON body, which the API function receives whole: Lambda
# takes at most 6 MB per request, so 5 MiB of base64 text (about 3.75 MiB of file) in total leaves room
# for the message and the envelope. Anything bigger is uploaded.
INLINE_LIMIT = 5 * 1024 * 1024
MAX_ATTACHMENTS = 20  # per run
UPLOAD_EXPIRES_SECONDS = 15 * 60  # how long a presigned PUT may be used

UPLOAD_ID = r"^upl_[0-9A-HJKMNP-TV-Z]{26}$"
ATTACHMENT_ID = r"^att_[0-9A-HJKMNP-TV-Z]{26}$"

# A file name as the model and the API show it: no path, no control characters.
FileName = Annotated[str, StringConstraints(min_length=1, max_length=255, pattern=r"^[^/\\\x00-\x1f\x7f]+$")]
ContentType = Annotated[
    str, StringConstraints(min_length=3, max_length=127, pattern=r"^[A-Za-z0-9.+-]+/[A-Za-z0-9.+-]+$")
]


class UploadCreate(Strict):
    name: FileName
    content_type: ContentType = Field(description="What the file claims to be; checked against its bytes")
    size: int = Field(ge=1, le=UPLOAD_LIMIT, description=f"Bytes, at most {UPLOAD_LIMIT}")


class UploadTicket(BaseModel):
    upload_id: str
    url: str
    method: Literal["PUT"] = "PUT"
    headers: dict[str, str] = Field(description="Send exactly these headers with the PUT: they are signed")
    expires_at: Timestamp


class UploadRef(Strict):
    upload_id: str = Field(pattern=UPLOAD_ID)


class InlineFile(Strict):
    name: FileName
    content_type: ContentType
    data: str = Field(min_length=1, description="The file, base64")


AttachmentIn = UploadRef | InlineFile


class Attachment(BaseModel):
    """A run's file as stored under the run: what the run record lists."""

    attachment_id: str
    name: str
    content_type: str  # sniffed from the bytes, never the declared one when they disagree
    size: int
    sha256: str  # hex
