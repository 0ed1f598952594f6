"""kb_list_docs: the documents of a knowledge base linked to the agent, paged, so the model can find the
whole document behind a search hit (and read it with kb_doc_read).

Bedrock keeps documents per data source, so the listing walks the base's data sources in Bedrock's
order (bedrock-agent's ListDataSources) and each one's documents (ListKnowledgeBaseDocuments):

    list_knowledge_base_documents(knowledgeBaseId, dataSourceId, maxResults, nextToken?)
    → {"documentDetails": [{"identifier": {"dataSourceType": "S3", "s3": {"uri"}} | {"custom": {"id"}},
                            "status", "updatedAt", ...}], "nextToken"?}

`prefix` keeps the documents whose path starts with it: the storage path for a document kept in the
tenant's storage (what kb_doc_read and storage_read take), else the S3 key or the custom id. The page
token is ours, opaque to the model: the data source reached and Bedrock's token within it. Each Bedrock
page is asked for no more than the documents still missing, so a page never ends in the middle of one of
Bedrock's pages; a call makes at most MAX_REQUESTS list calls and answers a token to go on from there.

The tenant binding is knowledge_search's (`allowed_bases`): a base is listed only when it carries the
`stepwise:tenant` tag of the calling tenant. The config is knowledge_search's too (bases by name, region).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from datetime import datetime
from functools import cache
from typing import Any, Literal, Protocol

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel, ConfigDict, Field

from stepwise.core import aws
from stepwise.core.s3 import bucket, tenant_root
from stepwise.tools.base import ToolResult
from stepwise.tools.builtin import Settings, ToolScope, input_schema
from stepwise.tools.builtin.knowledge_search import (
    Config as KnowledgeSearchConfig,
)
from stepwise.tools.builtin.knowledge_search import (
    KnowledgeBaseOwners,
    _describe,
    _throttled,
    allowed_bases,
)

NAME = "kb_list_docs"
DEFAULT_LIMIT = 50
MAX_LIMIT = 200
MAX_REQUESTS = 10  # Bedrock list calls one tool call makes at most
BEDROCK_PAGE = 100  # ListKnowledgeBaseDocuments' own cap... and ListDataSources'
DESCRIPTION = (
    "List the documents of a linked knowledge base as {documents: [{source, path, status, updated_at}], "
    "next_page_token}; `prefix` keeps the documents whose path starts with it. Read one whole with "
    "kb_doc_read (its `source`)."
)


class Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    knowledge_base_name: str | None = Field(
        None, min_length=1, description="Which knowledge base (needed when several are linked)."
    )
    prefix: str | None = Field(
        None, max_length=1024, description="Only documents whose path starts with this."
    )
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)
    page_token: str | None = Field(
        None, max_length=4096, description="next_page_token of the previous page, to go on."
    )


INPUT_SCHEMA: dict[str, Any] = input_schema(Arguments)
READ_ONLY = True
EFFECT: Literal["none"] = "none"
KEY_FIELDS: list[str] = []


class Config(KnowledgeSearchConfig):
    """The knowledge bases the agent may list, as knowledge_search names them (search_type and filter
    have no meaning here: a listing has no query)."""


class DocumentsClient(Protocol):
    """The two calls of bedrock-agent this tool makes."""

    def list_data_sources(self, **kwargs: Any) -> dict[str, Any]: ...

    def list_knowledge_base_documents(self, **kwargs: Any) -> dict[str, Any]: ...


@cache
def documents_client(region: str | None) -> DocumentsClient:
    client: DocumentsClient = aws.client("bedrock-agent", region_name=region)
    return client


def run(
    arguments: Arguments,
    *,
    scope: ToolScope,
    settings: Settings,
    config: Config,
    client_factory: Callable[[str | None], DocumentsClient] | None = None,
    owners: KnowledgeBaseOwners | None = None,
) -> ToolResult:
    names = [base.name for base in config.knowledge_bases]
    name = arguments.knowledge_base_name
    if name is None:
        if len(names) > 1:
            return ToolResult.failure(
                "invalid_arguments",
                f"knowledge_base_name: several are linked, name one of {', '.join(names)}",
            )
        name = names[0]
    refused, _, _, _ = allowed_bases(config, [name], scope=scope, owners=owners)
    if refused is not None:
        return refused
    try:
        source_index, token = _position(arguments.page_token)
    except ValueError:
        return ToolResult.failure("invalid_arguments", "page_token: not a token this tool gave")
    base = next(b for b in config.knowledge_bases if b.name == name)
    client = (client_factory or documents_client)(config.region)
    storage = _storage_prefix(scope.tenant_id)
    documents: list[dict[str, Any]] = []
    requests = 0
    try:
        sources = _data_sources(client, base.id)
        requests += 1
        while source_index < len(sources) and len(documents) < arguments.limit:
            if requests >= MAX_REQUESTS:
                break
            request: dict[str, Any] = {
                "knowledgeBaseId": base.id,
                "dataSourceId": sources[source_index],
                "maxResults": min(BEDROCK_PAGE, arguments.limit - len(documents)),
            }
            if token:
                request["nextToken"] = token
            page = client.list_knowledge_base_documents(**request)
            requests += 1
            for detail in page.get("documentDetails", []):
                document = _document(detail, storage)
                if arguments.prefix is None or document["path"].startswith(arguments.prefix):
                    documents.append(document)
            token = page.get("nextToken")
            if not token:
                source_index, token = source_index + 1, None
    except (ClientError, BotoCoreError) as exc:
        return ToolResult.failure(
            "rate_limited" if _throttled(exc) else "knowledge_base_error", _describe(exc)
        )
    more = source_index < len(sources)
    return ToolResult(
        output={"documents": documents, "next_page_token": _token(source_index, token) if more else None}
    )


def _data_sources(client: DocumentsClient, knowledge_base_id: str) -> list[str]:
    answer = client.list_data_sources(knowledgeBaseId=knowledge_base_id, maxResults=BEDROCK_PAGE)
    return [str(s["dataSourceId"]) for s in answer.get("dataSourceSummaries", [])]


def _storage_prefix(tenant_id: str) -> str | None:
    """`s3://bucket/tenants/{tenant}/`: documents under it are the tenant's files, shown by their path."""
    name = bucket()
    return f"s3://{name}/{tenant_root(tenant_id)}" if name else None


def _document(detail: dict[str, Any], storage: str | None) -> dict[str, Any]:
    identifier = detail.get("identifier") or {}
    uri = (identifier.get("s3") or {}).get("uri")
    custom = (identifier.get("custom") or {}).get("id")
    source = str(uri) if isinstance(uri, str) else (str(custom) if custom is not None else "")
    if storage is not None and source.startswith(storage):
        path = source[len(storage) :]
    elif source.startswith("s3://"):
        path = source[5:].partition("/")[2]  # the key, without the bucket
    else:
        path = source
    updated = detail.get("updatedAt")
    document: dict[str, Any] = {
        "source": source,
        "path": path,
        "status": detail.get("status"),
        "updated_at": updated.isoformat() if isinstance(updated, datetime) else updated,
    }
    if detail.get("statusReason"):
        document["status_reason"] = detail["statusReason"]
    return document


def _token(source_index: int, token: str | None) -> str:
    raw = json.dumps({"d": source_index, "t": token}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _position(page_token: str | None) -> tuple[int, str | None]:
    if page_token is None:
        return 0, None
    try:
        parsed = json.loads(base64.urlsafe_b64decode(page_token.encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise ValueError(page_token) from None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("d"), int) or parsed["d"] < 0:
        raise ValueError(page_token)
    token = parsed.get("t")
    if token is not None and not isinstance(token, str):
        raise ValueError(page_token)
    return parsed["d"], token
