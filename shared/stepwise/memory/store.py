"""Memories in DynamoDB (stepwise.memory's store port): one partition per agent, one sort-key range per
user, and a head item per user that counts them and moves a revision with every change.

A save and a delete are one transaction each with the user's head: the count's condition enforces
MAX_PER_USER without a race (two concurrent saves cannot both take the last place), and the revision
can never disagree with what is stored.
"""

from __future__ import annotations

from array import array
from typing import Any

from pynamodb.exceptions import DoesNotExist, TransactWriteError
from pynamodb.transactions import TransactWrite

from stepwise.core import quotas
from stepwise.core.ids import new_id
from stepwise.core.tables import MemoryHeadItem, MemoryItem, bind, connection, tenant_key
from stepwise.memory.models import Memory, MemoryFull, MemoryNotFound, Owner

HEAD = "head"
MEMORY_PREFIX = "mem_"


def _pk(owner: Owner) -> str:
    return tenant_key(owner.tenant_id, owner.agent_id)


def _sk(owner: Owner, rest: str) -> str:
    return f"{owner.user_id}#{rest}"


def _pack(vector: list[float] | None) -> bytes | None:
    return array("f", vector).tobytes() if vector else None


def _unpack(blob: bytes | None) -> list[float] | None:
    if not blob:
        return None
    values = array("f")
    values.frombytes(blob)
    return values.tolist()


def _to_model(item: MemoryItem) -> Memory:
    return Memory(
        memory_id=item.memory_id,
        content=item.content,
        tags=list(item.tags or []),
        created_at=item.created_at,
        source_run_id=item.source_run_id,
        origin="tool" if item.origin == "tool" else "user",
        embedding=_unpack(item.embedding),
    )


def revision(owner: Owner) -> str:
    """The user's revision ("": nothing saved, or forgotten): one strongly consistent read of a few
    dozen bytes."""
    bind()
    try:
        head = MemoryHeadItem.get(_pk(owner), _sk(owner, HEAD), consistent_read=True)
    except DoesNotExist:
        return ""
    return head.revision or ""


def all_of(owner: Owner) -> list[Memory]:
    """Every memory of the user, oldest first."""
    bind()
    query = MemoryItem.query(
        _pk(owner), MemoryItem.sk.startswith(_sk(owner, MEMORY_PREFIX)), consistent_read=True
    )
    return [_to_model(item) for item in query]


def add(owner: Owner, memory: Memory, limit: int) -> None:
    """Store `memory`, only while the user holds fewer than `limit` (else MemoryFull)."""
    bind()
    item = MemoryItem(
        _pk(owner),
        _sk(owner, memory.memory_id),
        memory_id=memory.memory_id,
        content=memory.content,
        tags=memory.tags or None,
        created_at=memory.created_at,
        source_run_id=memory.source_run_id,
        origin=memory.origin if memory.origin == "tool" else None,
        embedding=_pack(memory.embedding),
    )
    head = MemoryHeadItem(_pk(owner), _sk(owner, HEAD))
    try:
        with TransactWrite(connection=connection()) as tx:
            tx.save(item, condition=MemoryItem.sk.does_not_exist())
            tx.update(
                head,
                actions=[MemoryHeadItem.held.add(1), MemoryHeadItem.revision.set(new_id("rev"))],
                condition=MemoryHeadItem.held.does_not_exist() | (MemoryHeadItem.held < limit),
            )
    except TransactWriteError as exc:
        if quotas.refused_by(exc, 1):
            raise MemoryFull(f"this user already holds {limit} memories") from exc
        raise


def remove(owner: Owner, memory_id: str) -> None:
    """Delete one memory of the user (MemoryNotFound when the user has none by that id)."""
    bind()
    item = MemoryItem(_pk(owner), _sk(owner, memory_id))
    head = MemoryHeadItem(_pk(owner), _sk(owner, HEAD))
    try:
        with TransactWrite(connection=connection()) as tx:
            tx.delete(item, condition=MemoryItem.sk.exists())
            tx.update(head, actions=[MemoryHeadItem.held.add(-1), MemoryHeadItem.revision.set(new_id("rev"))])
    except TransactWriteError as exc:
        if quotas.refused_by(exc, 0):
            raise MemoryNotFound(memory_id) from exc
        raise


def page(owner: Owner, after: str | None, limit: int) -> tuple[list[Memory], str | None]:
    """Newest first (memory ids are ULIDs); `after` is the last memory id of the previous page."""
    bind()
    start: dict[str, Any] | None = None
    if after is not None:
        start = {"pk": {"S": _pk(owner)}, "sk": {"S": _sk(owner, after)}}
    result = MemoryItem.query(
        _pk(owner),
        MemoryItem.sk.startswith(_sk(owner, MEMORY_PREFIX)),
        scan_index_forward=False,
        limit=limit,
        last_evaluated_key=start,
        consistent_read=True,
    )
    memories = [_to_model(item) for item in result]
    more = result.last_evaluated_key is not None and len(memories) == limit
    return memories, (memories[-1].memory_id if more and memories else None)


def _delete_all(pk: str, prefix: str | None) -> int:
    condition = MemoryItem.sk.startswith(prefix) if prefix else None
    keys = MemoryItem.query(pk, condition, attributes_to_get=["pk", "sk"], consistent_read=True)
    deleted = 0
    with MemoryItem.batch_write() as batch:
        for item in keys:
            batch.delete(item)
            deleted += 1
    return deleted


def forget(owner: Owner) -> int:
    """Delete every memory of the user and their head; how many items went."""
    bind()
    return _delete_all(_pk(owner), f"{owner.user_id}#")


def forget_agent(tenant_id: str, agent_id: str) -> int:
    """Delete every memory of every user of the agent."""
    bind()
    return _delete_all(tenant_key(tenant_id, agent_id), None)
