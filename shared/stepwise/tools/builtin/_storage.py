"""What storage_read and storage_write share: the model's paths made safe under the tenant's prefix in
the bucket (stepwise.core.s3), and how S3's failures read.

Files live in the bucket named by the STORAGE_BUCKET environment variable, under `tenants/{tenant_id}/`.
The tenant comes from the injected scope, never from the model; the model's paths are relative to that
prefix. A path is refused (`invalid_path`) when it is absolute, has a `..` segment, a backslash, a NUL or
another control character, or would make a key longer than S3's 1,024 bytes; otherwise empty and `.`
segments are dropped (`a//./b` is `a/b`), so every key the tools build starts with the tenant's prefix
and nothing the model writes can step out of it.
"""

from __future__ import annotations

import mimetypes
import re

from botocore.exceptions import BotoCoreError, ClientError

from stepwise.core.s3 import BUCKET_ENV
from stepwise.tools.base import ToolResult

KEY_LIMIT = 1024  # bytes of an S3 key
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class InvalidPath(ValueError):
    pass


def bucket_missing(tool: str) -> ToolResult:
    return ToolResult.failure(
        "not_configured", f"{tool} has no storage: the {BUCKET_ENV} environment variable is not set"
    )


def normalize(path: str, *, prefix: bool = False) -> str:
    """The model's relative `path`, normalized; InvalidPath when it is unsafe. A file path must name a
    file (not empty, no trailing slash); a `prefix` may be empty and keeps its trailing slash."""
    if _CONTROL.search(path):
        raise InvalidPath("a path may not contain NUL or other control characters")
    if "\\" in path:
        raise InvalidPath("a path uses '/' between folders, not '\\'")
    if path.startswith("/"):
        raise InvalidPath("a path is relative to your storage: drop the leading '/'")
    segments = path.split("/")
    if ".." in segments:
        raise InvalidPath("a path may not contain '..'")
    kept = [segment for segment in segments if segment not in ("", ".")]
    normalized = "/".join(kept)
    if prefix:
        return normalized + "/" if normalized and path.endswith("/") else normalized
    if not normalized:
        raise InvalidPath("the path names no file")
    if path.endswith("/"):
        raise InvalidPath("the path names a folder, not a file")
    return normalized


def key_for(root: str, relative: str) -> str:
    key = root + relative
    if len(key.encode()) > KEY_LIMIT:
        raise InvalidPath(f"the path is too long (S3 keys are at most {KEY_LIMIT} bytes)")
    if not key.startswith(root) or "/../" in f"/{relative}/":  # what normalize guarantees, checked again
        raise InvalidPath("the path leaves your storage")
    return key


def s3_failure(exc: ClientError | BotoCoreError, path: str) -> ToolResult:
    """The model-readable failure for an S3 error."""
    if isinstance(exc, BotoCoreError):
        return ToolResult.failure("storage_error", f"storage is unavailable: {type(exc).__name__}")
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    if code in ("404", "NoSuchKey", "NotFound"):
        return ToolResult.failure("not_found", f"no file at {path!r}")
    if code == "NoSuchBucket":
        return ToolResult.failure("not_configured", "the storage bucket does not exist")
    if code in ("SlowDown", "503", "RequestLimitExceeded"):
        return ToolResult.failure("rate_limited", "storage is busy: try again shortly")
    return ToolResult.failure("storage_error", f"storage refused the request ({code or 'unknown error'})")


# --- Content types ------------------------------------------------------------------------------------

# Content types that say nothing about the bytes: S3's default when an uploader sets none.
_UNKNOWN_TYPES = frozenset({"", "binary/octet-stream", "application/octet-stream"})
_TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/javascript",
        "application/x-javascript",
        "application/ecmascript",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/sql",
        "application/csv",
        "application/x-ndjson",
        "application/x-sh",
        "application/graphql",
    }
)


def content_kind(content_type: str) -> str:
    """ "text", "binary", or "unknown" (then the bytes decide)."""
    base = content_type.split(";", 1)[0].strip().lower()
    if base in _UNKNOWN_TYPES:
        return "unknown"
    if base.startswith("text/") or base in _TEXT_TYPES or base.endswith(("+json", "+xml", "+yaml")):
        return "text"
    return "binary"


def text_content_type(path: str) -> str:
    """The content type storage_write stores: the file name's, when that is a text type, else plain text."""
    guessed, _ = mimetypes.guess_type(path, strict=False)
    base = guessed if guessed and content_kind(guessed) == "text" else "text/plain"
    return f"{base}; charset=utf-8"
