"""Knowledge bases in real runs on the local stack: knowledge_search with a search type and a filter
scoped by the tool config, numbered citations, kb_list_docs and kb_doc_read reading the whole document
behind a hit from the tenant's storage. Bedrock is the in-memory fake (tests/fakes/knowledge_bases):
moto has no Retrieve and no document listing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from stepwise_local.stack import LocalStack
from tests.fakes.knowledge_bases import FakeKnowledgeBases, chunk
from tests.integration.support import OTHER_KEY, wait_for_run

HANDBOOK = "HANDBOOK01"
THEIRS = "THEIRSKB02"


@pytest.fixture
def bedrock(stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeKnowledgeBases]:
    from stepwise.tools.builtin import kb_list_docs, knowledge_search

    fake = FakeKnowledgeBases()
    root = f"s3://{stack.resolver.physical['StorageBucket']}/tenants/local/kb/"
    fake.add(
        HANDBOOK,
        "local",
        chunks=[
            chunk("Vacation is 25 days a year.", 0.91, root + "leave.md", folder="hr", year=2026),
            chunk("Old rule: 20 days.", 0.95, root + "old.md", folder="hr", year=2019),
            chunk("Servers reboot on Sundays.", 0.99, root + "ops.md", folder="it", year=2026),
        ],
        documents={"DS1": [root + "leave.md", root + "old.md"], "DS2": [root + "ops.md"]},
    )
    fake.add(THEIRS, "a-third-tenant")
    owners = knowledge_search.BedrockOwners(lambda region: fake)
    monkeypatch.setattr(knowledge_search, "bedrock_client", lambda region: fake)
    monkeypatch.setattr(knowledge_search, "default_owners", lambda: owners)
    monkeypatch.setattr(kb_list_docs, "documents_client", lambda region: fake)
    yield fake


def run_script(
    stack: LocalStack, tools: list[dict[str, Any]], script: list[dict[str, Any]], key: str | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    kwargs = {"key": key} if key else {}
    status, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "kb", "tools": tools}, **kwargs)
    assert status == 201, agent
    _, _, accepted = stack.invoke_api(
        "POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "go", "script": script}, **kwargs
    )
    run = wait_for_run(stack, accepted["run_id"], key=key)
    _, _, page = stack.invoke_api("GET", f"/v1/runs/{run['run_id']}/events?after=0&wait=2", **kwargs)
    return run, [e["data"] for e in page["events"] if e["type"] == "tool_result"]


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


HR_ONLY = {"equals": {"key": "folder", "value": "hr"}}
BASES = {
    "knowledge_bases": [{"name": "handbook", "id": HANDBOOK, "filter": HR_ONLY, "search_type": "semantic"}]
}


def test_a_search_is_scoped_numbered_and_leads_to_the_whole_document(
    stack: LocalStack, bedrock: FakeKnowledgeBases
) -> None:
    s3 = boto3.client("s3")
    text = "# Leave\n" + "Vacation is 25 days a year. " * 1000
    s3.put_object(
        Bucket=stack.resolver.physical["StorageBucket"],
        Key="tenants/local/kb/leave.md",
        Body=text.encode(),
        ContentType="text/markdown",
    )
    tools = [
        {"name": "knowledge_search", "config": BASES},
        {"name": "kb_list_docs", "config": {"knowledge_bases": [{"name": "handbook", "id": HANDBOOK}]}},
        {"name": "kb_doc_read"},
    ]
    recent = {"in": {"key": "year", "value": [2025, 2026]}}
    script = [
        call("knowledge_search", query="vacation days", search_type="hybrid", filter=recent),
        call("kb_list_docs", prefix="kb/", limit=2),
        call(
            "kb_doc_read", source=f"s3://{stack.resolver.physical['StorageBucket']}/tenants/local/kb/leave.md"
        ),
        call("kb_doc_read", source="kb/leave.md", offset=20_000),
        {"text": "Vacation is 25 days [D1]."},
    ]

    run, (searched, listed, first, rest) = run_script(stack, tools, script)

    assert run["status"] == "succeeded", run
    # The config's scope (hr) and the model's filter (recent years) both reached Retrieve.
    (retrieve,) = [kwargs for name, kwargs in bedrock.calls if name == "retrieve"]
    assert retrieve["retrievalConfiguration"]["vectorSearchConfiguration"] == {
        "numberOfResults": 5,
        "overrideSearchType": "HYBRID",
        "filter": {"andAll": [HR_ONLY, recent]},
    }
    (hit,) = searched["output"]["results"]  # the IT chunk and the 2019 one are filtered out
    assert hit["id"] == "D1" and hit["score"] == 0.91 and hit["source"].endswith("/kb/leave.md")
    assert "[D1]" in searched["output"]["cite"]

    assert [d["path"] for d in listed["output"]["documents"]] == ["kb/leave.md", "kb/old.md"]
    assert listed["output"]["next_page_token"] is not None  # DS2 is still to come

    assert first["output"]["text"] == text[:20_000] and first["output"]["next_offset"] == 20_000
    assert first["output"]["total_chars"] == len(text)
    assert rest["output"]["text"] == text[20_000:] and rest["output"]["next_offset"] is None


def test_a_base_or_a_document_of_another_tenant_is_refused(
    stack: LocalStack, bedrock: FakeKnowledgeBases
) -> None:
    bucket = stack.resolver.physical["StorageBucket"]
    boto3.client("s3").put_object(Bucket=bucket, Key="tenants/local/kb/secret.md", Body=b"mine only")
    tools = [
        {"name": "knowledge_search", "config": {"knowledge_bases": [{"name": "theirs", "id": THEIRS}]}},
        {"name": "kb_list_docs", "config": {"knowledge_bases": [{"name": "handbook", "id": HANDBOOK}]}},
        {"name": "kb_doc_read"},
    ]
    script = [
        call("knowledge_search", query="anything"),
        call("kb_list_docs"),
        call("kb_doc_read", source=f"s3://{bucket}/tenants/local/kb/secret.md"),
        call("kb_doc_read", source="s3://some-other-bucket/secret.md"),
        {"text": "done"},
    ]

    _, (searched, listed, read, elsewhere) = run_script(stack, tools, script, key=OTHER_KEY)

    assert searched["error"]["code"] == "knowledge_base_not_allowed"
    assert listed["error"]["code"] == "knowledge_base_not_allowed"  # HANDBOOK is tagged for "local"
    assert read["error"]["code"] == "source_not_allowed"  # another tenant's prefix
    assert elsewhere["error"]["code"] == "source_not_allowed"
    assert not [name for name, _ in bedrock.calls if name in ("retrieve", "list_knowledge_base_documents")]
    assert "mine only" not in json.dumps([searched, listed, read, elsewhere])
