"""storage_write: store UTF-8 text as a file of the tenant's (under `tenants/{tenant_id}/` of the
STORAGE_BUCKET bucket; the path is relative to that prefix, see `_storage`). An existing file is replaced.

The content type comes from the file name when that names a text type (`.csv`, `.json`, `.md`, ...),
else `text/plain`, always with `charset=utf-8`; storage_read then answers the file as text. Its effect is
`undeclared`: a second write to the same path with other content is a different effect, and the content
is model-written text, which never goes into an effect key.
"""

from __future__ import annotations

from typing import Any, Literal

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel, ConfigDict, Field

from stepwise.core.s3 import bucket, s3_client, tenant_root
from stepwise.tools.base import ToolResult
from stepwise.tools.builtin import Settings, ToolScope, input_schema
from stepwise.tools.builtin._storage import (
    KEY_LIMIT,
    InvalidPath,
    bucket_missing,
    key_for,
    normalize,
    s3_failure,
    text_content_type,
)

NAME = "storage_write"
CONTENT_LIMIT = 10 * 1024 * 1024  # bytes of one file

DESCRIPTION = (
    "Save UTF-8 text as a file in the project's storage, replacing any file at that path, and get "
    "{path, size} (size in bytes). Paths are relative, like 'reports/2024/q1.csv'; the file name's "
    "extension sets its content type."
)


class Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, max_length=KEY_LIMIT, description="Where to save.")
    content: str = Field(description="The file's text.")


INPUT_SCHEMA: dict[str, Any] = input_schema(Arguments)
READ_ONLY = False
EFFECT: Literal["undeclared"] = "undeclared"
KEY_FIELDS: list[str] = []


class Config(BaseModel):
    """storage_write takes no configuration: the tenant's prefix is all it may write."""

    model_config = ConfigDict(extra="forbid")


def run(arguments: Arguments, *, scope: ToolScope, settings: Settings, config: Config) -> ToolResult:
    try:
        body = arguments.content.encode("utf-8")
    except UnicodeEncodeError:
        return ToolResult.failure("invalid_arguments", "content: not valid UTF-8 text (a lone surrogate?)")
    if len(body) > CONTENT_LIMIT:
        return ToolResult.failure(
            "content_too_large", f"content: {len(body)} bytes, more than the {CONTENT_LIMIT} a file may hold"
        )
    name = bucket()
    if name is None:
        return bucket_missing(NAME)
    try:
        path = normalize(arguments.path)
        key = key_for(tenant_root(scope.tenant_id), path)
        s3_client().put_object(Bucket=name, Key=key, Body=body, ContentType=text_content_type(path))
    except InvalidPath as exc:
        return ToolResult.failure("invalid_path", str(exc))
    except (ClientError, BotoCoreError) as exc:
        return s3_failure(exc, arguments.path)
    return ToolResult(output={"path": path, "size": len(body)})
