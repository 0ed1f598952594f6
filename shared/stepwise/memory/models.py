"""Memories as the tools, the API and the store share them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from stepwise.core.schema import Timestamp

MAX_PER_USER = 2_000  # memories one user of one agent may hold; memory_save past it is `memory_full`
CONTENT_LIMIT = 2_000  # characters of one memory: a fact or a preference, not a document
TAG_LIMIT = 10  # tags per memory
TAG_LENGTH = 64


@dataclass(frozen=True)
class Owner:
    """Whose memories: injected from the run (or the API's key and query), never from the model."""

    tenant_id: str
    agent_id: str
    user_id: str


Origin = Literal["user", "tool"]


class Memory(BaseModel):
    memory_id: str
    content: str
    tags: list[str] = Field(default_factory=list)
    created_at: Timestamp
    source_run_id: str | None = None  # the run whose memory_save wrote it
    # Where its content may have come from: "tool" when the saving run had read a tool's result (text
    # anyone could have written), "user" otherwise. Recall marks it; not part of the API's answer.
    origin: Origin = Field(default="user", exclude=True)
    # For hybrid search (STEPWISE_EMBEDDING_MODEL): the content's embedding, computed once at save.
    embedding: list[float] | None = Field(default=None, exclude=True)


class MemoryList(BaseModel):
    """`GET /v1/agents/{agent_id}/memories`: newest first."""

    memories: list[Memory]
    next_token: str | None


class Hit(BaseModel):
    memory: Memory
    score: float


class MemoryFull(Exception):
    """The user already holds MAX_PER_USER memories."""


class MemoryNotFound(Exception):
    """No such memory for this owner (another user's looks the same)."""


class EmbeddingFailed(Exception):
    """STEPWISE_EMBEDDING_MODEL could not embed a memory's content: nothing was saved."""


MEMORY_TOP_K_LIMIT = 20
