"""kb_doc_read: the text of a knowledge-base document by its S3 source, a page at a time.

A search hit (knowledge_search) or a listing (kb_list_docs) names a document by its `source`, an S3 URI.
The document is read under the storage builtins' rules (`_storage`): only a file of the calling tenant's
storage, `s3://{STORAGE_BUCKET}/tenants/{tenant_id}/...`, with the same path checks as storage_read
(no `..`, no control characters, the key rebuilt from the tenant's prefix), never an arbitrary bucket
the function's role might reach. So a tenant's knowledge base keeps its data source under the tenant's
storage prefix (`s3://{STORAGE_BUCKET}/tenants/{tenant_id}/kb/`), where storage_write can also add to it;
a document elsewhere is refused with `source_not_allowed`. A storage path (as kb_list_docs gives it) is
taken as well as a URI.

PDFs are read as their text (one `--- page N ---` line per page, as attachments are), text files as
UTF-8; anything else is `unsupported_document`. The answer is `{source, path, text, offset, total_chars,
next_offset}`, `offset` and `limit` counting characters; `next_offset` is null on the last page. A
document's text is kept per (key, ETag) in the warm function, so paging a PDF extracts it once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
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
    content_kind,
    key_for,
    normalize,
    s3_failure,
)

NAME = "kb_doc_read"
DEFAULT_LIMIT = 20_000
MAX_LIMIT = 40_000  # characters of a page: with its JSON envelope it stays under the tool result cut
DOCUMENT_BYTES = 20 * 1024 * 1024  # a bigger document is refused rather than read into memory
CACHE_DOCUMENTS = 8
PDF = "application/pdf"
DESCRIPTION = (
    "Read a knowledge-base document's text by its source (the s3:// URI a knowledge_search result or "
    "kb_list_docs gives, or its path), a page at a time: {text, offset, total_chars, next_offset}. Call "
    "again with offset = next_offset until it is null."
)


class Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str = Field(
        min_length=1, max_length=KEY_LIMIT + 100, description="The document's s3:// URI or path."
    )
    offset: int = Field(0, ge=0, description="Characters to skip.")
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="Characters to read.")


INPUT_SCHEMA: dict[str, Any] = input_schema(Arguments)
READ_ONLY = True
EFFECT: Literal["none"] = "none"
KEY_FIELDS: list[str] = []


class Config(BaseModel):
    """kb_doc_read takes no configuration: the tenant's storage is all it may read."""

    model_config = ConfigDict(extra="forbid")


_texts: OrderedDict[tuple[str, str], str] = OrderedDict()
_lock = threading.Lock()


def run(arguments: Arguments, *, scope: ToolScope, settings: Settings, config: Config) -> ToolResult:
    name = bucket()
    if name is None:
        return bucket_missing(NAME)
    root = tenant_root(scope.tenant_id)
    source = arguments.source
    if source.startswith("s3://"):
        storage = f"s3://{name}/{root}"
        if not source.startswith(storage):
            return ToolResult.failure(
                "source_not_allowed",
                f"{NAME} reads documents kept in this project's storage ({storage}...), not {source}",
            )
        relative = source[len(storage) :]
    else:
        relative = source
    path = relative
    try:
        path = normalize(relative)
        key = key_for(root, path)
        text = _text(name, key)
    except InvalidPath as exc:
        return ToolResult.failure("invalid_path", str(exc))
    except (ClientError, BotoCoreError) as exc:
        return s3_failure(exc, path)
    except _Unsupported as exc:
        return ToolResult.failure("unsupported_document", str(exc))
    end = min(arguments.offset + arguments.limit, len(text))
    return ToolResult(
        output={
            "source": f"s3://{name}/{key}",
            "path": path,
            "text": text[arguments.offset : end],
            "offset": arguments.offset,
            "total_chars": len(text),
            "next_offset": end if end < len(text) else None,
        }
    )


class _Unsupported(Exception):
    pass


def _text(bucket_name: str, key: str) -> str:
    client = s3_client()
    head = client.head_object(Bucket=bucket_name, Key=key)
    cache_key = (key, str(head.get("ETag", "")))
    with _lock:
        found = _texts.get(cache_key)
        if found is not None:
            _texts.move_to_end(cache_key)
            return found
    size: int = head["ContentLength"]
    if size > DOCUMENT_BYTES:
        raise _Unsupported(f"the document is {size:,} bytes, more than {DOCUMENT_BYTES:,} this tool reads")
    content_type = str(head.get("ContentType", "")).split(";", 1)[0].strip().lower()
    data: bytes = client.get_object(Bucket=bucket_name, Key=key)["Body"].read() if size else b""
    if content_type == PDF or data.startswith(b"%PDF-"):
        from stepwise.attachments.content import pdf_text  # pypdf loads only for a PDF

        text = pdf_text(data)
    elif content_kind(content_type) == "binary":
        raise _Unsupported(f"a {content_type} document has no text this tool can read (PDF and text only)")
    else:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise _Unsupported("the document is not UTF-8 text (PDF and text only)") from None
    with _lock:
        _texts[cache_key] = text
        while len(_texts) > CACHE_DOCUMENTS:
            _texts.popitem(last=False)
    return text
