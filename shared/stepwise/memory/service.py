"""Saving, searching, deleting and forgetting memories, over a store port (stepwise.memory.store in
DynamoDB; tests hand in a fake).

Search reads the user's head item on every call and the user's memories only when the head's revision
differs from the copy this function already holds: a warm function recalls for the price of one tiny
read, a cold one queries the user's range once (bench/memory_search.py has both figures).
"""

from __future__ import annotations

import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from aws_lambda_powertools import Logger

from stepwise.core import config
from stepwise.core.errors import Malformed
from stepwise.core.ids import MEMORY_ID, new_id
from stepwise.core.schema import utcnow
from stepwise.memory.bm25 import Index
from stepwise.memory.models import MAX_PER_USER, EmbeddingFailed, Hit, Memory, Origin, Owner

logger = Logger(service="stepwise")

EMBEDDING_MODEL_ENV = config.Models.variable("embedding_model")
CACHED_USERS = 256  # users whose memories one function keeps; a few MB at worst
RRF_K = 60  # reciprocal rank fusion's constant (Cormack et al.): rank 1 and rank 10 stay comparable

Embed = Callable[[str], list[float]]


class MemoryStore(Protocol):
    def revision(self, owner: Owner) -> str: ...
    def all_of(self, owner: Owner) -> list[Memory]: ...
    def add(self, owner: Owner, memory: Memory, limit: int) -> None: ...
    def remove(self, owner: Owner, memory_id: str) -> None: ...
    def page(self, owner: Owner, after: str | None, limit: int) -> tuple[list[Memory], str | None]: ...
    def forget(self, owner: Owner) -> int: ...
    def forget_agent(self, tenant_id: str, agent_id: str) -> int: ...


def default_store() -> MemoryStore:
    from stepwise.memory import store as memories

    return memories


def embedder() -> Embed | None:
    """litellm's embedding of STEPWISE_EMBEDDING_MODEL, or None (lexical search only). Only the Step
    function saves and searches, and it ships litellm; the API never calls this."""
    model = config.models().embedding_model
    if not model:
        return None

    def embed(text: str) -> list[float]:
        import litellm

        response = litellm.embedding(model=model, input=[text])
        return [float(x) for x in response.data[0]["embedding"]]

    return embed


@dataclass
class _Cached:
    revision: str
    memories: list[Memory]
    index: Index


class _Cache:
    """The memories of recently searched users, keyed by owner (tenant, agent and user: a hit can only
    ever be that user's own) and trusted only at the revision they were read at."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: OrderedDict[Owner, _Cached] = OrderedDict()
        self._lock = threading.Lock()  # parallel-safe calls search from a thread pool

    def get(self, owner: Owner, revision: str) -> _Cached | None:
        with self._lock:
            entry = self._entries.get(owner)
            if entry is None or entry.revision != revision:
                return None
            self._entries.move_to_end(owner)
            return entry

    def put(self, owner: Owner, entry: _Cached) -> None:
        with self._lock:
            self._entries[owner] = entry
            self._entries.move_to_end(owner)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


_cache = _Cache(CACHED_USERS)


def _indexed(owner: Owner, store: MemoryStore) -> _Cached:
    revision = store.revision(owner)
    cached = _cache.get(owner, revision)
    if cached is not None:
        return cached
    memories = store.all_of(owner)
    # Tags are words the model chose to file the memory under: searched like its content.
    entry = _Cached(revision, memories, Index([" ".join([m.content, *m.tags]) for m in memories]))
    if revision:  # "" is "nothing stored": nothing worth keeping
        _cache.put(owner, entry)
    return entry


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def _ranks(scores: list[float]) -> dict[int, int]:
    """Rank (1 = best) of every document that scored above zero."""
    order = sorted((i for i, s in enumerate(scores) if s > 0), key=lambda i: (-scores[i], i))
    return {doc: rank for rank, doc in enumerate(order, start=1)}


def search(
    owner: Owner,
    query: str,
    top_k: int,
    *,
    store: MemoryStore | None = None,
    embed: Embed | None = None,
) -> list[Hit]:
    """The user's `top_k` memories most relevant to `query`, best first (ties: saved first). Lexical
    scores are BM25's; with `embed`, BM25 and cosine similarity are fused by reciprocal rank, so a
    memory found by either way ranks, and one found by both ranks first."""
    entry = _indexed(owner, store or default_store())
    if not entry.memories:
        return []
    lexical = entry.index.scores(query)
    if embed is None:
        ranked = _ranks(lexical)
        scores = {doc: lexical[doc] for doc in ranked}
    else:
        try:
            wanted = embed(query)
        except Exception:  # any provider failure: the lexical ranking still answers
            logger.warning("query embedding failed; searching memories lexically", exc_info=True)
            return search(owner, query, top_k, store=store)
        # A memory saved before the model was set has no vector; one of another length was embedded by
        # another model, whose space is not this one's. Either is found by BM25 alone.
        semantic = [
            _cosine(wanted, m.embedding) if m.embedding and len(m.embedding) == len(wanted) else 0.0
            for m in entry.memories
        ]
        scores = {}
        for ranks in (_ranks(lexical), _ranks(semantic)):
            for doc, rank in ranks.items():
                scores[doc] = scores.get(doc, 0.0) + 1.0 / (RRF_K + rank)
    memories = entry.memories
    best = sorted(scores, key=lambda doc: (-scores[doc], memories[doc].created_at, doc))[:top_k]
    return [Hit(memory=entry.memories[doc], score=round(scores[doc], 6)) for doc in best]


def _embedded(embed: Embed | None, content: str) -> list[float] | None:
    if embed is None:
        return None
    try:
        return embed(content)
    except Exception as exc:  # whatever the provider raised, the save did not happen
        raise EmbeddingFailed(f"the embedding model failed ({type(exc).__name__})") from exc


def save(
    owner: Owner,
    content: str,
    tags: list[str],
    *,
    source_run_id: str | None,
    origin: Origin = "user",
    store: MemoryStore | None = None,
    embed: Embed | None = None,
) -> Memory:
    """Store a new memory for the user (MemoryFull at MAX_PER_USER)."""
    memory = Memory(
        memory_id=new_id("mem"),
        content=content,
        tags=tags,
        created_at=utcnow(),
        source_run_id=source_run_id,
        origin=origin,
        embedding=_embedded(embed, content),
    )
    (store or default_store()).add(owner, memory, MAX_PER_USER)
    return memory


def page(
    owner: Owner, next_token: str | None, limit: int, *, store: MemoryStore | None = None
) -> tuple[list[Memory], str | None]:
    """Newest first. The token is the last memory id of the previous page, checked here: it can only
    ever continue this owner's listing, whatever it says."""
    if next_token is not None and not re.fullmatch(MEMORY_ID, next_token):
        raise Malformed("next_token is not one this API issued", code="invalid_next_token")
    return (store or default_store()).page(owner, next_token, limit)


def delete(owner: Owner, memory_id: str, *, store: MemoryStore | None = None) -> None:
    """MemoryNotFound when the user has no memory by that id (another user's is not theirs)."""
    (store or default_store()).remove(owner, memory_id)


def forget(owner: Owner, *, store: MemoryStore | None = None) -> int:
    """Everything the agent remembers about the user, gone; how many items were deleted."""
    return (store or default_store()).forget(owner)
