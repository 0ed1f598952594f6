"""Memory search at the bound: one user holding MAX_PER_USER (2,000) memories, searched on the local stack
(moto), and what an auto_recall reads from DynamoDB.

- cold: the function holds no copy of the user's memories (a new Step environment, or the user's memories
  changed since it last searched): the head item, one Query over the user's range, the BM25 index built,
  scored. warm: the copy is current: the head item (a few dozen bytes), then scoring.
- BM25 alone: building the index over 2,000 memories, and scoring one query against it, in process.
- bytes read per auto_recall: the items the recall's requests touched, from their serialized sizes
  (tables.item_size, as DynamoDB counts them), and the read units bench/meter.py charged.

Latencies are this machine's against moto in process. moto's Query is pure Python over every item of the
table and costs seconds for a 650 KB range, where DynamoDB answers it in one 1 MB page in tens of ms:
the cold figure here is moto's, and the figures that are ours are the warm search, the index build and
the scoring.
"""

from __future__ import annotations

import random
import time
from typing import Any

from bench.harness import Section, local, median

USERS_MEMORIES = 2_000
QUERIES = 30
TOP_K = 5
WORDS = [
    "coffee",
    "tea",
    "breakfast",
    "allergy",
    "peanuts",
    "gluten",
    "vegan",
    "flight",
    "window",
    "aisle",
    "hotel",
    "Lisbon",
    "Berlin",
    "Tokyo",
    "invoice",
    "billing",
    "refund",
    "subscription",
    "plan",
    "annual",
    "monthly",
    "French",
    "Spanish",
    "German",
    "language",
    "timezone",
    "morning",
    "evening",
    "meeting",
    "Tuesday",
    "Friday",
    "daughter",
    "son",
    "partner",
    "dog",
    "cat",
    "birthday",
    "anniversary",
    "gift",
    "budget",
    "laptop",
    "phone",
    "Android",
    "iPhone",
    "Python",
    "Rust",
    "deadline",
    "project",
    "report",
    "quarterly",
    "manager",
    "team",
    "running",
    "cycling",
    "yoga",
    "swimming",
    "marathon",
    "piano",
    "guitar",
    "jazz",
    "opera",
    "novel",
    "podcast",
    "newsletter",
    "email",
]


def _fact(rng: random.Random, n: int) -> str:
    words = rng.sample(WORDS, 8)
    return (
        f"Fact {n}: the user mentioned {words[0]} and {words[1]} while talking about {' '.join(words[2:])}."
    )


def _populate(owner: Any, rng: random.Random) -> None:
    """The items memory_save would write, in batches: 2,000 one-by-one transactions take moto minutes
    and measure nothing this benchmark reports."""
    from stepwise.core import tables
    from stepwise.core.ids import new_id
    from stepwise.core.schema import utcnow
    from stepwise.core.tables import MemoryHeadItem, MemoryItem
    from stepwise.memory import store as memories

    tables.bind()
    pk = tables.tenant_key(owner.tenant_id, owner.agent_id)
    with MemoryItem.batch_write() as batch:
        for n in range(USERS_MEMORIES):
            memory_id = new_id("mem")
            batch.save(
                MemoryItem(
                    pk,
                    f"{owner.user_id}#{memory_id}",
                    memory_id=memory_id,
                    content=_fact(rng, n),
                    tags=rng.sample(WORDS, 2),
                    created_at=utcnow(),
                    source_run_id=new_id("run"),
                )
            )
    head = f"{owner.user_id}#{memories.HEAD}"
    MemoryHeadItem(pk, head, held=USERS_MEMORIES, revision=new_id("rev")).save()


def _ms(seconds: list[float]) -> tuple[float, float]:
    ordered = sorted(seconds)
    return median(ordered) * 1000, ordered[int(len(ordered) * 0.95) - 1] * 1000


def _range_bytes(owner: Any) -> tuple[int, int, int]:
    """Items and bytes of the user's memories, and the head's bytes (read unmetered)."""
    from stepwise.core import tables
    from stepwise.core.tables import MemoryHeadItem, MemoryItem
    from stepwise.memory import store as memories

    pk = tables.tenant_key(owner.tenant_id, owner.agent_id)
    items = list(MemoryItem.query(pk, MemoryItem.sk.startswith(f"{owner.user_id}#{memories.MEMORY_PREFIX}")))
    head = MemoryHeadItem.get(pk, f"{owner.user_id}#{memories.HEAD}")
    return len(items), sum(tables.item_size(i) for i in items), tables.item_size(head)


def run() -> Section:
    section = Section(f"Memory search at {USERS_MEMORIES:,} memories per user (BM25, local stack)")
    env = local()
    from bench.meter import Recorder
    from stepwise.agents.models import Agent
    from stepwise.core.schema import utcnow
    from stepwise.loop import recall
    from stepwise.memory import service
    from stepwise.memory.bm25 import Index
    from stepwise.memory.models import Owner
    from stepwise.runs.models import Run

    agent_id = env.create_agent({"name": "bench-memory", "memory": {"enabled": True}})
    tenant_id = env.stack.api_keys[next(iter(env.stack.api_keys))]
    owner = Owner(tenant_id=tenant_id, agent_id=agent_id, user_id="bench-user")
    rng = random.Random(14)
    started = time.perf_counter()
    _populate(owner, rng)
    section.details["populate_seconds"] = round(time.perf_counter() - started, 2)
    queries = [" ".join(rng.sample(WORDS, 4)) for _ in range(QUERIES)]

    cold, warm = [], []
    for query in queries:
        service._cache.clear()
        began = time.perf_counter()
        hits = service.search(owner, query, TOP_K)
        cold.append(time.perf_counter() - began)
        began = time.perf_counter()
        again = service.search(owner, query, TOP_K)
        warm.append(time.perf_counter() - began)
        assert len(hits) == TOP_K and [h.memory.memory_id for h in again] == [
            h.memory.memory_id for h in hits
        ]
    cold_median, cold_p95 = _ms(cold)
    warm_median, warm_p95 = _ms(warm)
    section.add("search, cold (Query + index + score): median", cold_median, "ms", f"p95 {cold_p95:.1f} ms")
    section.add("search, warm (head read + score): median", warm_median, "ms", f"p95 {warm_p95:.1f} ms")

    documents = [" ".join([m.content, *m.tags]) for m in service.default_store().all_of(owner)]
    began = time.perf_counter()
    index = Index(documents)
    built = time.perf_counter() - began
    scoring = []
    for query in queries:
        began = time.perf_counter()
        index.scores(query)
        scoring.append(time.perf_counter() - began)
    section.add("BM25 index build (2,000 memories)", built * 1000, "ms")
    section.add("BM25 scoring of one query", _ms(scoring)[0], "ms")

    now = utcnow()
    agent = Agent.model_validate(
        {
            "agent_id": agent_id,
            "name": "bench-memory",
            "created_at": now,
            "updated_at": now,
            "memory": {"enabled": True},
        }
    )
    probe = Run(
        run_id="run_bench",
        agent_id=agent_id,
        session_id="ses_bench",
        user_id=owner.user_id,
        status="queued",
        input=queries[0],
        created_at=now,
    )
    recorder = Recorder(env)
    with recorder.installed():
        service._cache.clear()
        with recorder.charging("recall cold"):
            recall.for_user_turn(tenant_id, agent, probe)
        with recorder.charging("recall warm"):
            recall.for_user_turn(tenant_id, agent, probe)
    count, range_bytes, head_bytes = _range_bytes(owner)
    for label, read_bytes in (("cold", head_bytes + range_bytes), ("warm", head_bytes)):
        requests = [r for r in recorder.requests if r.root == f"recall {label}"]
        rru = sum(r.rru for r in requests)
        section.add(
            f"bytes read from DynamoDB per auto_recall, {label}",
            read_bytes,
            "B",
            f"{len(requests)} requests, {rru:g} RRU (strongly consistent)",
            digits=0,
        )
    section.details.update(
        {"memories": count, "average_item_bytes": round(range_bytes / count), "head_bytes": head_bytes}
    )
    section.notes.append(
        f"{count} memories of {round(range_bytes / count)} B on average (content, tags, ids, timestamps); "
        "a cold recall pays the user's whole range, a warm one only the head item. Hybrid search adds each "
        "memory's embedding (4 B per dimension: ~4 KB at 1,024) to the cold read."
    )
    return section
