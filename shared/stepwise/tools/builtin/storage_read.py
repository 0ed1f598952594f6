"""storage_read: list and download the tenant's files in S3 (under `tenants/{tenant_id}/` of the
STORAGE_BUCKET bucket; paths are relative to that prefix, see `_storage`).

`list` walks the keys under `path` (a folder, default everything) whose remainder starts with `prefix`,
in S3's key order, and answers `{items: [{path, size, last_modified}], next_offset}` (`next_offset` null
on the last page). `download` answers a text file's content as UTF-8 text, cut with a visible marker to
fit the 50,000-character tool result; a binary file (a non-text content type, or bytes that are not
UTF-8 text) is answered `{path, size, content_type, url}` with a presigned GET URL valid for 15 minutes.
A URL signed with the Lambda role's temporary credentials stops working when they expire, which can be
sooner.
"""

from __future__ import annotations

import codecs
from typing import Any, Literal

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel, ConfigDict, Field

from stepwise.core.s3 import bucket, s3_client, tenant_root
from stepwise.tools.base import TOOL_RESULT_LIMIT, ToolResult
from stepwise.tools.builtin import Settings, ToolScope, input_schema
from stepwise.tools.builtin._storage import (
    KEY_LIMIT,
    InvalidPath,
    bucket_missing,
    content_kind,
    key_for,
    normalize,
    s3_failure,
)

NAME = "storage_read"
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
URL_EXPIRES_SECONDS = 15 * 60
# Bytes read for a text download: 50,000 characters of UTF-8 take at most 4 bytes each.
TEXT_READ_BYTES = 4 * TOOL_RESULT_LIMIT + 4

DESCRIPTION = (
    "Read the project's stored files. operation 'list': files under `path` (a folder; default all) whose "
    "name starts with `prefix`, as {items: [{path, size, last_modified}], next_offset}; page with `limit` "
    "(1-1000, default 100) and `offset`. operation 'download': the file at `path` as text (long files are "
    "cut with a marker), or for a binary file {path, size, content_type, url} with a link valid for 15 "
    "minutes. Paths are relative, like 'reports/2024/q1.csv'."
)


class Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    operation: Literal["list", "download"]
    path: str | None = Field(
        None,
        max_length=KEY_LIMIT,
        description="download: the file. list: the folder to list (default: all files).",
    )
    prefix: str | None = Field(
        None,
        max_length=KEY_LIMIT,
        description="list: only files whose path (within `path`) starts with this.",
    )
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)
    offset: int = Field(0, ge=0)


INPUT_SCHEMA: dict[str, Any] = input_schema(Arguments)
READ_ONLY = True
EFFECT: Literal["none"] = "none"
KEY_FIELDS: list[str] = []


class Config(BaseModel):
    """storage_read takes no configuration: the tenant's prefix is all it may read."""

    model_config = ConfigDict(extra="forbid")


def run(arguments: Arguments, *, scope: ToolScope, settings: Settings, config: Config) -> ToolResult:
    name = bucket()
    if name is None:
        return bucket_missing(NAME)
    root = tenant_root(scope.tenant_id)
    path = arguments.path or ""
    try:
        if arguments.operation == "list":
            return _list(
                name,
                root,
                folder=normalize(path, prefix=True),
                prefix=normalize(arguments.prefix or "", prefix=True),
                limit=arguments.limit,
                offset=arguments.offset,
            )
        if not path:
            return ToolResult.failure("invalid_arguments", "path: download needs the path of a file")
        return _download(name, root, normalize(path))
    except InvalidPath as exc:
        return ToolResult.failure("invalid_path", str(exc))
    except (ClientError, BotoCoreError) as exc:
        return s3_failure(exc, path)


def _list(bucket_name: str, root: str, *, folder: str, prefix: str, limit: int, offset: int) -> ToolResult:
    if folder and not folder.endswith("/"):
        folder += "/"
    key_prefix = key_for(root, folder + prefix)
    items: list[dict[str, Any]] = []
    skipped = 0
    more = False
    pages = s3_client().get_paginator("list_objects_v2").paginate(Bucket=bucket_name, Prefix=key_prefix)
    for page in pages:
        for entry in page.get("Contents", []):
            key: str = entry["Key"]
            if key.endswith("/"):
                continue  # a "folder" placeholder some consoles create, not a file
            if skipped < offset:
                skipped += 1
                continue
            if len(items) == limit:
                more = True
                break
            items.append(
                {
                    "path": key[len(root) :],
                    "size": entry["Size"],
                    "last_modified": entry["LastModified"].isoformat(),
                }
            )
        if more:
            break
    return ToolResult(output={"items": items, "next_offset": offset + limit if more else None})


def _download(bucket_name: str, root: str, path: str) -> ToolResult:
    key = key_for(root, path)
    client = s3_client()
    head = client.head_object(Bucket=bucket_name, Key=key)
    size: int = head["ContentLength"]
    content_type: str = head.get("ContentType", "")
    if content_kind(content_type) != "binary":
        data = b""
        if size > 0:
            read = min(size, TEXT_READ_BYTES)
            data = client.get_object(Bucket=bucket_name, Key=key, Range=f"bytes=0-{read - 1}")["Body"].read()
        text = _utf8_text(data, complete=len(data) >= size)
        if text is not None:
            return ToolResult(output=_capped(text, size, complete=len(data) >= size))
    url = client.generate_presigned_url(
        "get_object", Params={"Bucket": bucket_name, "Key": key}, ExpiresIn=URL_EXPIRES_SECONDS
    )
    return ToolResult(output={"path": path, "size": size, "content_type": content_type, "url": url})


def _utf8_text(data: bytes, *, complete: bool) -> str | None:
    """The bytes as text, or None when they are not UTF-8 text. A multi-byte character cut by the end of
    a partial read is dropped, not an error."""
    try:
        text: str = codecs.getincrementaldecoder("utf-8-sig")().decode(data, final=complete)
    except UnicodeDecodeError:
        return None
    return None if "\x00" in text else text  # valid UTF-8, but NULs mean a binary format


def _capped(text: str, size: int, *, complete: bool) -> str:
    """At most TOOL_RESULT_LIMIT characters, marker included, so nothing downstream cuts it again."""
    if complete and len(text) <= TOOL_RESULT_LIMIT:
        return text
    keep = TOOL_RESULT_LIMIT - len(_marker(TOOL_RESULT_LIMIT, size))
    return text[:keep] + _marker(keep, size)


def _marker(shown: int, size: int) -> str:
    return f"\n…[truncated: showing the first {shown:,} characters of a {size:,}-byte file]"
