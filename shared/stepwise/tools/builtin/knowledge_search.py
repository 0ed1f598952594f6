"""knowledge_search: semantic search over the Amazon Bedrock knowledge bases linked to the agent.

Each selected knowledge base is asked with Bedrock Agent Runtime's `Retrieve`:

    retrieve(knowledgeBaseId=id, retrievalQuery={"text": query},
             retrievalConfiguration={"vectorSearchConfiguration": {
                 "numberOfResults": top_k,
                 "overrideSearchType"?: "SEMANTIC" | "HYBRID",
                 "filter"?: <RetrievalFilter>}})
    → {"retrievalResults": [{"content": {"text"}, "location": {"type", "s3Location": {"uri"}, ...},
                             "score", "metadata"}]}

`search_type` comes from the model's arguments, else the base's config, else Bedrock decides (hybrid
where the vector store supports it). The filter (`_kb`: equals, in, andAll) is the base's configured
`filter` (its scope: folders, tags) ANDed with the model's `filter`, so the model can narrow a scope but
never widen it.

The results of all of them are merged, sorted by score (best first), cut to `top_k` and numbered
`[D1]…[Dn]`, each `{id, knowledge_base, text, score, source}` where `source` is the chunk's location (an
S3 URI, a web URL...), and the answer carries `cite`, a one-line instruction to cite them by id. When
some knowledge bases fail and others answer, the answer carries `errors` beside the results; when all
fail, the call fails with `knowledge_base_error` (`rate_limited` when Bedrock throttles).

Knowledge bases belong to tenants. A knowledge base is searched only when it carries the tag
`stepwise:tenant` equal to the calling tenant, read with bedrock-agent's GetKnowledgeBase and
ListTagsForResource and cached for OWNER_TTL seconds; one that is not (or does not exist, which looks the
same) refuses the whole call with `knowledge_base_not_allowed` before anything is retrieved. An agent's
config naming a knowledge base id is not enough: config is tenant-written. The IAM grant matches, Retrieve
only on knowledge bases that carry the tag at all (template.yaml).

Knowledge-base excerpts are what the model needs whole, so the result is exempt from the 50,000-character
cut (`TRUNCATE = False`). The client comes from `client_factory` (by default a cached boto3
`bedrock-agent-runtime` client in the configured region, else the function's), the owners from `owners`
(by default BedrockOwners, cached per process), so tests pass fakes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import cache
from typing import Annotated, Any, Literal, Protocol

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from stepwise.core import aws
from stepwise.tools.base import ToolResult
from stepwise.tools.builtin import Settings, ToolScope, input_schema
from stepwise.tools.builtin._kb import FILTER_DESCRIPTION, check_filter, combined

NAME = "knowledge_search"
DEFAULT_TOP_K = 5
MAX_TOP_K = 20
DESCRIPTION = (
    "Search the knowledge bases linked to this agent with a natural-language query and get the most "
    "relevant passages, best first, as {results: [{id, knowledge_base, text, score, source}], cite}: "
    "cite a passage by its id ([D1], [D2]...) where you use it. With several knowledge bases, "
    "`knowledge_base_names` limits the search to some of them; `search_type` hybrid also matches exact "
    "words (names, codes), semantic only meaning; `filter` narrows by the documents' metadata."
)
CITE = (
    "Cite the passages you use by their id in square brackets, e.g. [D1], right after the statement they "
    "support; each id's source is its `source`. Do not cite passages you did not use."
)
SearchType = Literal["semantic", "hybrid"]


class Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=10_000, description="What to look for.")
    knowledge_base_names: list[Annotated[str, StringConstraints(min_length=1)]] | None = Field(
        None, min_length=1, description="Only these knowledge bases (default: all linked ones)."
    )
    top_k: int = Field(DEFAULT_TOP_K, ge=1, le=MAX_TOP_K)
    search_type: SearchType | None = Field(
        None, description="hybrid: meaning and exact words; semantic: meaning only (default: the base's)."
    )
    filter: dict[str, Any] | None = Field(None, description=FILTER_DESCRIPTION)

    @field_validator("filter")
    @classmethod
    def _filter(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else check_filter(value)


INPUT_SCHEMA: dict[str, Any] = input_schema(Arguments)
READ_ONLY = True
EFFECT: Literal["none"] = "none"
KEY_FIELDS: list[str] = []
TRUNCATE = False
TENANT_TAG = "stepwise:tenant"
OWNER_TTL = 300.0  # seconds an owner lookup is believed: a re-tag takes effect within this


class KnowledgeBase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100)
    id: str = Field(pattern=r"^[0-9a-zA-Z]{10}$", description="the Bedrock knowledge base id")
    description: str = ""
    search_type: SearchType | None = Field(default=None, description="the default when the model names none")
    filter: dict[str, Any] | None = Field(
        default=None, description="the base's scope: every search of it is limited to what this matches"
    )

    @field_validator("filter")
    @classmethod
    def _filter(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else check_filter(value)


class Config(BaseModel):
    """The knowledge bases the agent may search, by the names the model uses, and their AWS region
    (default: the function's own)."""

    model_config = ConfigDict(extra="forbid")

    knowledge_bases: list[KnowledgeBase] = Field(min_length=1)
    region: str | None = Field(default=None, pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")

    @field_validator("knowledge_bases")
    @classmethod
    def _unique_names(cls, bases: list[KnowledgeBase]) -> list[KnowledgeBase]:
        names = [base.name for base in bases]
        if len(set(names)) != len(names):
            raise ValueError("knowledge base names must be unique")
        return bases


class RetrieveClient(Protocol):
    """The one call of bedrock-agent-runtime this tool makes."""

    def retrieve(self, **kwargs: Any) -> dict[str, Any]: ...


ClientFactory = Callable[[str | None], RetrieveClient]


@cache
def bedrock_client(region: str | None) -> RetrieveClient:
    """A bedrock-agent-runtime client for `region` (None: the default region), built once per region."""
    client: RetrieveClient = aws.client("bedrock-agent-runtime", region_name=region)
    return client


class KnowledgeBaseOwners(Protocol):
    """Which tenant a knowledge base belongs to (None: no tenant, or no such knowledge base); raises
    botocore's errors when it cannot tell."""

    def owner(self, knowledge_base_id: str, region: str | None) -> str | None: ...


class TagsClient(Protocol):
    """The two calls of bedrock-agent the owner lookup makes."""

    def get_knowledge_base(self, **kwargs: Any) -> dict[str, Any]: ...

    def list_tags_for_resource(self, **kwargs: Any) -> dict[str, Any]: ...


@cache
def bedrock_agent_client(region: str | None) -> TagsClient:
    client: TagsClient = aws.client("bedrock-agent", region_name=region)
    return client


class BedrockOwners:
    """Owners from the knowledge bases' `stepwise:tenant` tags, each answer kept for `ttl` seconds."""

    def __init__(
        self,
        client_factory: Callable[[str | None], TagsClient] = bedrock_agent_client,
        *,
        ttl: float = OWNER_TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client_factory = client_factory
        self._ttl = ttl
        self._clock = clock
        self._cache: dict[tuple[str | None, str], tuple[float, str | None]] = {}
        self._lock = threading.Lock()

    def owner(self, knowledge_base_id: str, region: str | None) -> str | None:
        key = (region, knowledge_base_id)
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None and hit[0] > self._clock():
            return hit[1]
        owner = self._look_up(knowledge_base_id, region)
        with self._lock:
            self._cache[key] = (self._clock() + self._ttl, owner)
        return owner

    def _look_up(self, knowledge_base_id: str, region: str | None) -> str | None:
        client = self._client_factory(region)
        try:
            base = client.get_knowledge_base(knowledgeBaseId=knowledge_base_id)["knowledgeBase"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                return None
            raise
        tags = client.list_tags_for_resource(resourceArn=base["knowledgeBaseArn"]).get("tags") or {}
        owner = tags.get(TENANT_TAG)
        return owner if isinstance(owner, str) else None


@cache
def default_owners() -> KnowledgeBaseOwners:
    return BedrockOwners()


def run(
    arguments: Arguments,
    *,
    scope: ToolScope,
    settings: Settings,
    config: Config,
    client_factory: ClientFactory | None = None,
    owners: KnowledgeBaseOwners | None = None,
) -> ToolResult:
    refused, searchable, errors, throttled = allowed_bases(
        config, arguments.knowledge_base_names, scope=scope, owners=owners
    )
    if refused is not None:
        return refused
    by_name = {base.name: base for base in config.knowledge_bases}
    top_k = arguments.top_k
    client = (client_factory or bedrock_client)(config.region)
    results: list[tuple[float, int, int, dict[str, Any]]] = []  # sort key, then the result
    failed = 0
    for order, name in enumerate(searchable):
        base = by_name[name]
        try:
            answer = client.retrieve(
                knowledgeBaseId=base.id,
                retrievalQuery={"text": arguments.query},
                retrievalConfiguration={"vectorSearchConfiguration": _vector_search(arguments, base)},
            )
        except (ClientError, BotoCoreError) as exc:
            throttled = throttled or _throttled(exc)
            errors.append({"knowledge_base": name, "message": _describe(exc)})
            failed += 1
            continue
        for rank, item in enumerate(answer.get("retrievalResults", [])):
            result = _result(name, item)
            results.append((-(result["score"] or 0.0), order, rank, result))

    if failed == len(searchable):  # every base failed, one way or another
        summary = "; ".join(f"{e['knowledge_base']}: {e['message']}" for e in errors)
        return ToolResult.failure("rate_limited" if throttled else "knowledge_base_error", summary)
    results.sort(key=lambda entry: entry[:3])
    numbered = [{"id": f"D{i}", **entry[3]} for i, entry in enumerate(results[:top_k], start=1)]
    output: dict[str, Any] = {"results": numbered}
    if numbered:
        output["cite"] = CITE
    if errors:
        output["errors"] = errors
    return ToolResult(output=output)


def _vector_search(arguments: Arguments, base: KnowledgeBase) -> dict[str, Any]:
    search: dict[str, Any] = {"numberOfResults": arguments.top_k}
    search_type = arguments.search_type or base.search_type
    if search_type is not None:
        search["overrideSearchType"] = search_type.upper()
    where = combined(base.filter, arguments.filter)
    if where is not None:
        search["filter"] = where
    return search


def allowed_bases(
    config: Config,
    names: list[str] | None,
    *,
    scope: ToolScope,
    owners: KnowledgeBaseOwners | None = None,
) -> tuple[ToolResult | None, list[str], list[dict[str, str]], bool]:
    """Which of the named bases (default: all linked) may be read by this tenant: (the failure that refuses
    the whole call, or None; the bases to read; the bases whose owner could not be checked, as errors;
    whether Bedrock throttled). Shared by every knowledge-base builtin, so the tag binding is one rule."""
    by_name = {base.name: base for base in config.knowledge_bases}
    selected = list(dict.fromkeys(names or by_name))
    unknown = [name for name in selected if name not in by_name]
    if unknown:
        return (
            ToolResult.failure(
                "unknown_knowledge_base",
                f"no knowledge base named {', '.join(unknown)} (known: {', '.join(by_name)})",
            ),
            [],
            [],
            False,
        )

    errors: list[dict[str, str]] = []
    throttled = False
    searchable: list[str] = []
    foreign: list[str] = []
    for name in selected:
        try:
            owner = (owners or default_owners()).owner(by_name[name].id, config.region)
        except (ClientError, BotoCoreError) as exc:
            throttled = throttled or _throttled(exc)
            errors.append({"knowledge_base": name, "message": f"cannot check its owner: {_describe(exc)}"})
            continue
        (searchable if owner == scope.tenant_id else foreign).append(name)
    if foreign:
        refused = ToolResult.failure(
            "knowledge_base_not_allowed",
            f"knowledge base {', '.join(foreign)} is not bound to this tenant: a Bedrock knowledge base is "
            f"searched only when it is tagged {TENANT_TAG}={scope.tenant_id}",
        )
        return refused, [], errors, throttled
    if not searchable:
        summary = "; ".join(f"{e['knowledge_base']}: {e['message']}" for e in errors)
        return (
            ToolResult.failure("rate_limited" if throttled else "knowledge_base_error", summary),
            [],
            errors,
            throttled,
        )
    return None, searchable, errors, throttled


def _throttled(exc: Exception) -> bool:
    return isinstance(exc, ClientError) and exc.response.get("Error", {}).get("Code") == "ThrottlingException"


def _describe(exc: ClientError | BotoCoreError) -> str:
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return f"{error.get('Code')}: {error.get('Message')}"
    return f"Bedrock is unreachable: {type(exc).__name__}"


def _result(knowledge_base: str, item: dict[str, Any]) -> dict[str, Any]:
    content = item.get("content") or {}
    score = item.get("score")
    return {
        "knowledge_base": knowledge_base,
        "text": content.get("text") or "",
        "score": float(score) if isinstance(score, int | float) else None,
        "source": _source(item),
    }


def _source(item: dict[str, Any]) -> str | None:
    """The location's URI or URL, whatever the data source type (S3, web, Confluence, SharePoint, ...)."""
    location = item.get("location") or {}
    for value in location.values():
        if isinstance(value, dict):
            for field in ("uri", "url"):
                if isinstance(value.get(field), str):
                    return str(value[field])
    metadata = item.get("metadata") or {}
    uri = metadata.get("x-amz-bedrock-kb-source-uri")
    return uri if isinstance(uri, str) else None
