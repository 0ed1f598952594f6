"""Bedrock knowledge bases in memory: the calls of bedrock-agent-runtime (Retrieve) and bedrock-agent
(GetKnowledgeBase, ListTagsForResource, ListDataSources, ListKnowledgeBaseDocuments) the knowledge-base
builtins make, with the request and answer shapes of boto3. moto has none of Retrieve, ListDataSources
or ListKnowledgeBaseDocuments.

Retrieve ranks a base's chunks by their given score, keeps those whose metadata matches the filter
(equals, in, andAll evaluated as Bedrock does) and records every request, so tests see the
overrideSearchType and filter that were sent."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError


@dataclass
class Base:
    tags: dict[str, str]
    chunks: list[dict[str, Any]] = field(default_factory=list)
    # data source id -> document URIs, in listing order
    documents: dict[str, list[str]] = field(default_factory=dict)


def chunk(text: str, score: float, uri: str, **metadata: Any) -> dict[str, Any]:
    return {
        "content": {"type": "TEXT", "text": text},
        "location": {"type": "S3", "s3Location": {"uri": uri}},
        "score": score,
        "metadata": {"x-amz-bedrock-kb-source-uri": uri, **metadata},
    }


class FakeKnowledgeBases:
    def __init__(self) -> None:
        self.bases: dict[str, Base] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def add(self, knowledge_base_id: str, tenant: str | None, **base: Any) -> Base:
        created = Base(tags={"stepwise:tenant": tenant} if tenant else {}, **base)
        self.bases[knowledge_base_id] = created
        return created

    # --- bedrock-agent-runtime ------------------------------------------------------------------------

    def retrieve(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("retrieve", kwargs))
        base = self._base(kwargs["knowledgeBaseId"])
        search = kwargs["retrievalConfiguration"]["vectorSearchConfiguration"]
        where = search.get("filter")
        kept = [c for c in base.chunks if where is None or matches(where, c.get("metadata") or {})]
        kept.sort(key=lambda c: -float(c["score"]))
        return {"retrievalResults": kept[: search["numberOfResults"]]}

    # --- bedrock-agent --------------------------------------------------------------------------------

    def get_knowledge_base(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("get_knowledge_base", kwargs))
        knowledge_base_id = kwargs["knowledgeBaseId"]
        self._base(knowledge_base_id)
        arn = f"arn:aws:bedrock:us-east-1:123456789012:knowledge-base/{knowledge_base_id}"
        return {"knowledgeBase": {"knowledgeBaseId": knowledge_base_id, "knowledgeBaseArn": arn}}

    def list_tags_for_resource(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("list_tags_for_resource", kwargs))
        return {"tags": self._base(kwargs["resourceArn"].rsplit("/", 1)[1]).tags}

    def list_data_sources(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("list_data_sources", kwargs))
        base = self._base(kwargs["knowledgeBaseId"])
        return {
            "dataSourceSummaries": [
                {"dataSourceId": source, "knowledgeBaseId": kwargs["knowledgeBaseId"], "status": "AVAILABLE"}
                for source in base.documents
            ]
        }

    def list_knowledge_base_documents(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("list_knowledge_base_documents", kwargs))
        base = self._base(kwargs["knowledgeBaseId"])
        uris = base.documents[kwargs["dataSourceId"]]
        start = int(base64.b64decode(kwargs["nextToken"])) if kwargs.get("nextToken") else 0
        end = start + kwargs.get("maxResults", 10)
        page: dict[str, Any] = {
            "documentDetails": [
                {
                    "knowledgeBaseId": kwargs["knowledgeBaseId"],
                    "dataSourceId": kwargs["dataSourceId"],
                    "status": "INDEXED",
                    "identifier": {"dataSourceType": "S3", "s3": {"uri": uri}},
                    "updatedAt": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
                }
                for uri in uris[start:end]
            ]
        }
        if end < len(uris):
            page["nextToken"] = base64.b64encode(str(end).encode()).decode()
        return page

    def _base(self, knowledge_base_id: str) -> Base:
        if knowledge_base_id not in self.bases:
            raise ClientError(
                {"Error": {"Code": "ResourceNotFoundException", "Message": "no such knowledge base"}},
                "GetKnowledgeBase",
            )
        return self.bases[knowledge_base_id]


def matches(where: dict[str, Any], metadata: dict[str, Any]) -> bool:
    ((operator, body),) = where.items()
    if operator == "andAll":
        return all(matches(member, metadata) for member in body)
    if operator == "equals":
        return bool(metadata.get(body["key"]) == body["value"])
    if operator == "in":
        return metadata.get(body["key"]) in body["value"]
    raise ClientError({"Error": {"Code": "ValidationException", "Message": operator}}, "Retrieve")
