"""An in-memory stepwise.memory store port, with the DynamoDB adapter's semantics (the bound, a fresh
revision per change, newest-first pages) and a count of the full reads search makes."""

from __future__ import annotations

import itertools

from stepwise.memory.models import Memory, MemoryFull, MemoryNotFound, Owner


class FakeMemories:
    def __init__(self) -> None:
        self.held: dict[Owner, dict[str, Memory]] = {}
        self.revisions: dict[Owner, str] = {}
        self.full_reads = 0
        self._stamps = itertools.count(1)

    def _moved(self, owner: Owner) -> None:
        self.revisions[owner] = f"rev{next(self._stamps)}"

    def revision(self, owner: Owner) -> str:
        return self.revisions.get(owner, "")

    def all_of(self, owner: Owner) -> list[Memory]:
        self.full_reads += 1
        return sorted(self.held.get(owner, {}).values(), key=lambda m: m.memory_id)

    def add(self, owner: Owner, memory: Memory, limit: int) -> None:
        mine = self.held.setdefault(owner, {})
        if len(mine) >= limit:
            raise MemoryFull(owner.user_id)
        mine[memory.memory_id] = memory
        self._moved(owner)

    def remove(self, owner: Owner, memory_id: str) -> None:
        if self.held.get(owner, {}).pop(memory_id, None) is None:
            raise MemoryNotFound(memory_id)
        self._moved(owner)

    def page(self, owner: Owner, after: str | None, limit: int) -> tuple[list[Memory], str | None]:
        newest = sorted(self.held.get(owner, {}), reverse=True)
        start = newest.index(after) + 1 if after in newest else 0
        ids = newest[start : start + limit]
        more = start + limit < len(newest)
        return [self.held[owner][i] for i in ids], (ids[-1] if more else None)

    def forget(self, owner: Owner) -> int:
        self.revisions.pop(owner, None)
        return len(self.held.pop(owner, {}))

    def forget_agent(self, tenant_id: str, agent_id: str) -> int:
        mine = [o for o in self.held if (o.tenant_id, o.agent_id) == (tenant_id, agent_id)]
        return sum(self.forget(o) for o in mine)
