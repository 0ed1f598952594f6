"""In-memory stores behind the loop's ports (stepwise.runs.ports), dict-backed, with the semantics the
DynamoDB modules give the loop: conditional writes, key order, exactly-once status changes.

Each fake also has the few functions tests seed it with (an agent's `create`), with the same
signatures as the DynamoDB module's, so tests/integration/test_store_ports.py runs one set of
assertions against both and the fakes cannot drift from the real stores. Where the adapter lets a
refused condition out as pynamodb's error (a session created twice, a started run deleted), the fake
raises the same.

    fakes = FakeStores()
    with ports.using(fakes.stores()):
        ...
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pynamodb.exceptions import TransactWriteError

from stepwise.agents.models import Agent, AgentCreate
from stepwise.core import config, quotas
from stepwise.core.errors import AgentGone, Conflict, NotFound
from stepwise.core.schema import utcnow
from stepwise.interactions.models import Interaction, NewInteraction
from stepwise.ledger import (
    CLAIMABLE,
    SETTLEABLE,
    Claim,
    EffectKey,
    Entry,
    Settlement,
)
from stepwise.llm.models import Usage
from stepwise.runs.listing import NO_FILTER, RunFilter
from stepwise.runs.models import (
    ACTIVE_STATUSES,
    TERMINAL_EVENTS,
    TERMINAL_STATUSES,
    Appended,
    EventType,
    Head,
    Run,
    RunError,
    RunEvent,
    RunExists,
    RunStatus,
)
from stepwise.runs.ports import SessionMessage, Stores
from stepwise.runs.state import TRANSIENT, ContextMovedOn, RunContext
from stepwise.sessions.models import Earlier, Session
from stepwise.store.described import INLINE_BYTES
from stepwise.store.runs import check_fits as run_fits
from stepwise.store.sessions import CHECKPOINT_LIMIT, MESSAGE_PREFIX, message_key
from stepwise.tools.results import OFFLOAD_CHARS, key_for

Message = dict[str, Any]
USAGE_FIELDS = ("input_tokens", "output_tokens", "cached_tokens", "cache_write_tokens", "cost_usd")


class FakeRunContexts:
    """The context item: `save` is conditional on the version it was read at and on the run not ended."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, str], dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.sessions: FakeSessions | None = None  # where messages saved with a context go

    def load(self, tenant_id: str, run_id: str) -> RunContext:
        item = self.items.get((tenant_id, run_id))
        if item is None:
            return RunContext()
        return self._model(item)

    def peek(self, tenant_id: str, run_id: str) -> RunContext | None:
        item = self.items.get((tenant_id, run_id))
        return None if item is None else self._model(item)

    @staticmethod
    def _model(item: dict[str, Any]) -> RunContext:
        context = RunContext.model_validate(item.get("context") or {})
        return context.model_copy(
            update={"version": item.get("version", 0), "ended": item.get("ended", False)}
        )

    def save(
        self, tenant_id: str, run_id: str, context: RunContext, messages: Sequence[SessionMessage] = ()
    ) -> RunContext:
        with self.lock:
            item = self.items.setdefault((tenant_id, run_id), {})
            if item.get("ended") or item.get("version", 0) != context.version:
                raise ContextMovedOn(
                    f"run {run_id} moved on without this step (ended, or another step wrote version "
                    f"{context.version + 1}); this step stops",
                    context,
                )
            # Stored as JSON, as the item is: a caller's later change to its copy never leaks in.
            item["context"] = context.model_dump(mode="json", exclude=set(TRANSIENT))
            item["version"] = context.version + 1
        for m in messages:  # landed with the context (a transaction in DynamoDB)
            assert self.sessions is not None, "FakeStores wires the sessions in"
            self.sessions.put_message(tenant_id, m.session_id, m.run_id, m.step, m.slot, m.message)
        return context.model_copy(
            update={"version": context.version + 1, "unbilled": [], "unsaved_usage": Usage()}
        )

    def mark_ended(self, tenant_id: str, run_id: str) -> RunContext:
        with self.lock:  # an update creates the item when there is none, as DynamoDB's does
            item = self.items.setdefault((tenant_id, run_id), {})
            item["ended"] = True
            return self._model(item)


class FakeRuns:
    """Run records; `transition` is conditional on the status, an active run's counters come from its
    context, as stepwise.store.runs.get reads them, and each tenant's active-run counter moves with the
    same writes as the adapter's quota item (create, delete, a terminal transition)."""

    def __init__(self, contexts: FakeRunContexts) -> None:
        self.contexts = contexts
        self.items: dict[tuple[str, str], Run] = {}
        self.active: dict[str, int] = {}  # tenant -> active-run slots taken
        self.late_lines: list[dict[str, Any]] = []  # usage lines of model calls paid after their run ended
        self.descendants_counted: dict[tuple[str, str], set[str]] = {}  # keys of descendants' additions
        self.lock = threading.Lock()

    def list_runs(
        self,
        tenant_id: str,
        *,
        agent_id: str | None = None,
        session_id: str | None = None,
        status: RunStatus | None = None,
        limit: int = 50,
        next_token: str | None = None,
        where: RunFilter = NO_FILTER,
    ) -> tuple[list[Run], str | None]:
        found = sorted(
            (
                r
                for (t, _), r in self.items.items()
                if t == tenant_id
                and (agent_id is None or r.agent_id == agent_id)
                and (session_id is None or r.session_id == session_id)
                and (status is None or r.status == status)
                and where.matches(r)
            ),
            key=lambda r: r.run_id,
            reverse=True,
        )
        start = int(next_token or 0)
        page = found[start : start + limit]
        more = start + limit < len(found)
        return [r.model_copy(deep=True) for r in page], str(start + limit) if more else None

    def check_fits(self, tenant_id: str, run: Run) -> None:
        run_fits(tenant_id, run)  # the item DynamoDB would be sent, measured as it measures it

    def create(self, tenant_id: str, run: Run) -> Run:
        self.check_fits(tenant_id, run)
        limit = config.quotas().max_active_runs
        with self.lock:
            if (tenant_id, run.run_id) in self.items:
                raise RunExists(f"run {run.run_id} exists already", code="run_exists")
            if self.active.get(tenant_id, 0) >= limit:
                raise quotas.exceeded(quotas.ACTIVE_RUNS, limit)
            self.items[(tenant_id, run.run_id)] = run.model_copy(
                update={"trigger_id": run.trigger_id or run.run_id}, deep=True
            )
            self.active[tenant_id] = self.active.get(tenant_id, 0) + 1
        return run

    def delete(self, tenant_id: str, run_id: str) -> None:
        with self.lock:
            run = self.items.get((tenant_id, run_id))
            if run is None or run.status != "queued":  # the transaction's condition, refused as DynamoDB does
                raise TransactWriteError("Failed to write transaction items")
            del self.items[(tenant_id, run_id)]
            self.active[tenant_id] -= 1

    def exists(self, tenant_id: str, run_id: str) -> bool:
        return (tenant_id, run_id) in self.items

    def erase_attachments(self, tenant_id: str, run_id: str) -> bool:
        with self.lock:
            run = self.items.get((tenant_id, run_id))
            if run is None or not run.done:
                return False
            self.items[(tenant_id, run_id)] = run.model_copy(
                update={"attachments": [], "attachments_erased_at": utcnow()}
            )
        return True

    def active_before(self, cutoff: datetime) -> Iterator[tuple[str, Run]]:
        # The records as stored (a Scan reads no context), in no promised order.
        for (tenant_id, _), run in list(self.items.items()):
            if run.status in ACTIVE_STATUSES and run.created_at < cutoff:
                yield tenant_id, run.model_copy(deep=True)

    def get(self, tenant_id: str, run_id: str) -> Run:
        run = self.items.get((tenant_id, run_id))
        if run is None:
            raise NotFound(f"run {run_id} not found", code="run_not_found")
        context = self.contexts.peek(tenant_id, run_id)
        if run.done or context is None:
            return run.model_copy(deep=True)
        return run.model_copy(
            update={
                "steps": context.steps,
                "usage": context.usage,
                "children": list(context.children),
                "descendants_usage": context.descendants_usage,
                "tools_executed": list(context.tools_executed),
                "compaction_failures": context.compaction_failures,
                "what_if_calls": dict(context.what_if_calls),
            },
            deep=True,
        )

    def transition(
        self, tenant_id: str, run_id: str, to: RunStatus, *, allowed_from: AbstractSet[str], **fields: Any
    ) -> bool:
        terminal = to in TERMINAL_STATUSES
        if terminal and not set(allowed_from) <= ACTIVE_STATUSES:
            raise ValueError("a terminal transition starts from active statuses only (it frees a quota slot)")
        with self.lock:
            run = self.items.get((tenant_id, run_id))
            if run is None or run.status not in allowed_from:
                return False
            update: dict[str, Any] = {"status": to}
            usage = run.usage.model_dump()
            for name, value in fields.items():
                if name in USAGE_FIELDS:  # the item keeps them as attributes, the model as `usage`
                    usage[name] = value if name == "cost_usd" else value or 0  # a null cost stays null
                elif name == "error":
                    update["error"] = RunError.model_validate(value) if value else None
                elif name == "descendants_usage":  # the item keeps it as JSON
                    update[name] = Usage.model_validate(value or {})
                elif name == "children":
                    update[name] = list(value or [])
                elif name not in Run.model_fields:
                    raise AttributeError(f"a run has no attribute {name!r}")  # as getattr(RunItem, name)
                else:
                    update[name] = copy.deepcopy(value)
            update["usage"] = Usage.model_validate(usage)
            if terminal:
                update["finished_at"] = utcnow()
                self.active[tenant_id] = self.active.get(tenant_id, 0) - 1  # its slot goes back, once
            self.items[(tenant_id, run_id)] = run.model_copy(update=update)
        return True

    def add_usage(self, tenant_id: str, run_id: str, usage: Usage, lines: list[dict[str, Any]]) -> bool:
        with self.lock:
            run = self.items.get((tenant_id, run_id))
            if run is None or not run.done:
                return False
            self.items[(tenant_id, run_id)] = run.model_copy(update={"usage": run.usage + usage})
            self.late_lines.extend(lines)  # counted in the adapter's transaction; kept here for tests
        return True

    def add_descendants_usage(self, tenant_id: str, run_id: str, usage: Usage, *, key: str) -> bool:
        with self.lock:
            run = self.items.get((tenant_id, run_id))
            if run is None or not run.done:
                return False
            if key in self.descendants_counted.setdefault((tenant_id, run_id), set()):
                return True
            self.descendants_counted[(tenant_id, run_id)].add(key)
            total = run.descendants_usage + usage
            self.items[(tenant_id, run_id)] = run.model_copy(update={"descendants_usage": total})
        return True


class FakeSessions:
    """A session's shell and messages; messages come back in sort-key order (run, step, slot), each with
    its retention's end, and checkpoints drop what has expired, as stepwise.store.sessions does."""

    def __init__(self) -> None:
        self.shells: dict[tuple[str, str], Session] = {}
        # (tenant, session) -> sort key -> (run, message, expiry in epoch seconds)
        self.messages: dict[tuple[str, str], dict[str, tuple[str, Message, int]]] = {}
        self.checkpoints: dict[tuple[str, str, str], Earlier] = {}
        self.lock = threading.Lock()

    def create(
        self,
        tenant_id: str,
        session_id: str,
        agent_id: str,
        active_run_id: str | None = None,
        user_id: str | None = None,
    ) -> Session:
        with self.lock:
            if (tenant_id, session_id) in self.shells:  # the put's condition, refused as the store does
                raise Conflict(f"session {session_id} exists already", code="session_exists")
            session = Session(
                session_id=session_id,
                agent_id=agent_id,
                user_id=user_id,
                created_at=utcnow(),
                active_run_id=active_run_id,
            )
            self.shells[(tenant_id, session_id)] = session
        return session.model_copy(deep=True)

    def get(self, tenant_id: str, session_id: str) -> Session:
        session = self.shells.get((tenant_id, session_id))
        if session is None:
            raise NotFound(f"session {session_id} not found", code="session_not_found")
        return session.model_copy(deep=True)

    def put_message(
        self, tenant_id: str, session_id: str, run_id: str, step: int, slot: str, message: Message
    ) -> None:
        expires = utcnow() + timedelta(days=config.runtime().message_retention_days)
        with self.lock:
            stored = self.messages.setdefault((tenant_id, session_id), {})
            stored[message_key(run_id, step, slot)] = (
                run_id,
                copy.deepcopy(message),
                int(expires.timestamp()),
            )

    def _ordered(
        self, tenant_id: str, session_id: str, prefix: str = MESSAGE_PREFIX
    ) -> list[tuple[str, Message, int]]:
        stored = self.messages.get((tenant_id, session_id), {})
        return [copy.deepcopy(stored[k]) for k in sorted(stored) if k.startswith(prefix)]

    def history(self, tenant_id: str, session_id: str, run_id: str) -> tuple[Earlier, list[Message]]:
        completed = set(self.get(tenant_id, session_id).completed_runs)
        earlier, current = Earlier(), []
        for owner, message, expiry in self._ordered(tenant_id, session_id):
            if owner == run_id:
                current.append(message)
            elif owner in completed:
                earlier.messages.append(message)
                earlier.expiries.append(expiry)
        return earlier, current

    def run_messages(self, tenant_id: str, session_id: str, run_id: str) -> list[Message]:
        return [m for _, m, _ in self._ordered(tenant_id, session_id, f"{MESSAGE_PREFIX}{run_id}#")]

    def earlier_history(self, tenant_id: str, session_id: str, run_id: str) -> Earlier:
        completed = self.get(tenant_id, session_id).completed_runs
        if not completed:
            return Earlier()
        last = completed[-1]
        before = self.checkpoints.get((tenant_id, session_id, last))
        if before is None:
            return self.history(tenant_id, session_id, run_id)[0]
        own = self._ordered(tenant_id, session_id, f"{MESSAGE_PREFIX}{last}#")
        folded = copy.deepcopy(before) + Earlier([m for _, m, _ in own], [x for _, _, x in own])
        return folded.live(int(utcnow().timestamp()))

    def put_checkpoint(self, tenant_id: str, session_id: str, run_id: str, earlier: Earlier) -> bool:
        if len(json.dumps(earlier.messages, ensure_ascii=False).encode()) > CHECKPOINT_LIMIT:
            return False
        self.checkpoints[(tenant_id, session_id, run_id)] = copy.deepcopy(earlier)
        return True

    def checkpoint(self, tenant_id: str, session_id: str, run_id: str) -> Earlier | None:
        found = self.checkpoints.get((tenant_id, session_id, run_id))
        return None if found is None else copy.deepcopy(found).live(int(utcnow().timestamp()))

    def complete_run(self, tenant_id: str, session_id: str, run_id: str) -> None:
        with self.lock:  # a missing shell fails the write's condition, which is ignored like a repeat
            session = self.shells.get((tenant_id, session_id))
            if session is not None and run_id not in session.completed_runs:
                session.completed_runs.append(run_id)

    def claim(self, tenant_id: str, session_id: str, run_id: str) -> bool:
        with self.lock:
            session = self.shells.get((tenant_id, session_id))
            if session is None or session.active_run_id not in (None, run_id):
                return False
            session.active_run_id = run_id
        return True

    def enqueue(self, tenant_id: str, session_id: str, run_id: str, *, first: bool = False) -> bool:
        with self.lock:
            session = self.shells.get((tenant_id, session_id))
            if session is None or session.active_run_id is None:
                return False
            session.queue = [run_id, *session.queue] if first else [*session.queue, run_id]
        return True

    def release(self, tenant_id: str, session_id: str, run_id: str) -> str | None:
        with self.lock:
            session = self.shells.get((tenant_id, session_id))
            if session is None:
                raise NotFound(f"session {session_id} not found", code="session_not_found")
            if session.active_run_id != run_id:
                session.queue = [r for r in session.queue if r != run_id]
                return None
            if session.queue:
                session.active_run_id, session.queue = session.queue[0], session.queue[1:]
                return session.active_run_id
            session.active_run_id = None
            return None


class FakeAgents:
    def __init__(self) -> None:
        self.items: dict[tuple[str, str], Agent] = {}

    def create(self, tenant_id: str, agent_id: str, spec: AgentCreate) -> Agent:
        if (tenant_id, agent_id) in self.items:
            raise Conflict(f"agent {agent_id} exists already")
        now = utcnow()
        agent = Agent(**spec.model_dump(), agent_id=agent_id, created_at=now, updated_at=now)
        self.items[(tenant_id, agent_id)] = agent
        return agent

    def get(self, tenant_id: str, agent_id: str) -> Agent:
        agent = self.items.get((tenant_id, agent_id))
        if agent is None:
            raise NotFound(f"agent {agent_id} not found", code="agent_not_found")
        return agent.model_copy(deep=True)

    def get_for_run(self, tenant_id: str, agent_id: str) -> Agent:
        try:
            return self.get(tenant_id, agent_id)
        except NotFound as exc:
            raise AgentGone(f"agent {agent_id} was deleted; the run cannot continue") from exc

    def count_skipped(self, tenant_id: str, agent_id: str) -> None:
        agent = self.get(tenant_id, agent_id)
        self.items[(tenant_id, agent_id)] = agent.model_copy(
            update={"skipped_while_paused": agent.skipped_while_paused + 1}
        )

    def delete(self, tenant_id: str, agent_id: str) -> None:
        if self.items.pop((tenant_id, agent_id), None) is None:
            raise NotFound(f"agent {agent_id} not found", code="agent_not_found")


class FakeInteractions:
    """Pauses: created once per id; pending → answered or pending → expired, each exactly once."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, str], Interaction] = {}
        self.tokens: dict[tuple[str, str], str] = {}
        self.lock = threading.Lock()

    def create(self, tenant_id: str, new: NewInteraction) -> Interaction:
        with self.lock:
            held = self.items.get((tenant_id, new.interaction_id))
            if held is not None:  # a retried Step finds the one it made before
                return held.model_copy(deep=True)
            now = utcnow()
            # no session listing here (listed_session_id): the loop never reads one
            kept = copy.deepcopy(new.model_dump(exclude={"listed_session_id"}))
            interaction = Interaction(
                **kept,
                status="pending",
                created_at=now,
                deadline=now + timedelta(seconds=new.timeout_seconds),
            )
            self.items[(tenant_id, new.interaction_id)] = interaction
        return interaction.model_copy(deep=True)

    def get(self, tenant_id: str, interaction_id: str) -> Interaction:
        found = self.items.get((tenant_id, interaction_id))
        if found is None:
            raise NotFound(f"interaction {interaction_id} not found", code="interaction_not_found")
        return found.model_copy(deep=True)

    def attach_token(self, tenant_id: str, interaction_id: str, token: str) -> Interaction:
        with self.lock:
            found = self.get(tenant_id, interaction_id)
            self.tokens[(tenant_id, interaction_id)] = token
            self.items[(tenant_id, interaction_id)] = found.model_copy(update={"has_token": True})
        return self.get(tenant_id, interaction_id)

    def task_token(self, tenant_id: str, interaction_id: str) -> str | None:
        self.get(tenant_id, interaction_id)  # NotFound as the adapter's read of the item
        return self.tokens.get((tenant_id, interaction_id))

    def mark_delivered(self, tenant_id: str, interaction_id: str) -> None:
        with self.lock:
            found = self.items.get((tenant_id, interaction_id))
            if found is not None:
                self.items[(tenant_id, interaction_id)] = found.model_copy(update={"delivered": True})

    def _from_pending(self, tenant_id: str, interaction_id: str, **update: Any) -> bool:
        with self.lock:
            found = self.items.get((tenant_id, interaction_id))
            if found is None or found.status != "pending":
                return False
            self.items[(tenant_id, interaction_id)] = found.model_copy(update=update)
        return True

    def answer(
        self, tenant_id: str, interaction_id: str, answer: dict[str, Any], *, key: str | None, by: str | None
    ) -> bool:
        return self._from_pending(
            tenant_id,
            interaction_id,
            status="answered",
            answer=copy.deepcopy(answer),
            answer_key=key,
            answered_by=by,
            answered_at=utcnow(),
        )

    def close(self, tenant_id: str, interaction_id: str, status: str = "expired") -> bool:
        return self._from_pending(tenant_id, interaction_id, status=status)

    def for_run(self, tenant_id: str, run_id: str, status: str | None = None) -> list[Interaction]:
        found = sorted(  # the by_run index orders by interaction id
            (i for (t, _), i in self.items.items() if t == tenant_id and i.run_id == run_id),
            key=lambda i: i.interaction_id,
        )
        return [i.model_copy(deep=True) for i in found if status is None or i.status == status]


class FakeEventLog:
    """The run's log: seqs from 1, reserved on a head per run that also counts its followers, as the
    adapter's head item does; every append is kept as the batch it was."""

    def __init__(self) -> None:
        self.batches: dict[tuple[str, str], list[list[RunEvent]]] = {}
        self.heads: dict[tuple[str, str], Head] = {}
        self.followers: dict[tuple[str, str], int] = {}
        self.push: dict[tuple[str, str], dict[str, Any]] = {}
        self.lock = threading.Lock()

    def append(self, tenant_id: str, run_id: str, events: list[tuple[EventType, dict[str, Any]]]) -> Appended:
        if not events:
            return Appended(events=[], followed=False)
        now = utcnow()
        key = (tenant_id, run_id)
        with self.lock:
            held = self.heads.get(key)
            if held is not None and held.done:  # a log that is done takes nothing more (store.events)
                return Appended(events=[], followed=False)
            first = (held.last_seq if held else 0) + 1
            self.heads[key] = Head(
                last_seq=first + len(events) - 1, done=events[-1][0] in TERMINAL_EVENTS, moved_at=now
            )
            written = [
                RunEvent(seq=first + i, type=etype, data=copy.deepcopy(data), at=now)
                for i, (etype, data) in enumerate(events)
            ]
            self.batches.setdefault(key, []).append(written)
            followed = self.followers.get(key, 0) > 0
            push = self.push.get(key) or None
        return Appended(events=written, followed=followed, push=push)

    def head(self, tenant_id: str, run_id: str) -> Head | None:
        return self.heads.get((tenant_id, run_id))

    def followed(self, tenant_id: str, run_id: str) -> Head:
        key = (tenant_id, run_id)
        with self.lock:
            self.followers[key] = self.followers.get(key, 0) + 1
            head = self.heads.setdefault(key, Head(last_seq=0, done=False, moved_at=None))
        return head

    def after(self, tenant_id: str, run_id: str, seq: int, limit: int) -> list[RunEvent]:
        return [e for e in self.events(tenant_id, run_id) if e.seq > seq][:limit]

    def push_configs(self, tenant_id: str, run_id: str) -> dict[str, Any]:
        return dict(self.push.get((tenant_id, run_id), {}))

    def change_push(
        self, tenant_id: str, run_id: str, change: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> dict[str, Any]:
        with self.lock:
            changed = change(dict(self.push.get((tenant_id, run_id), {})))
            self.push[(tenant_id, run_id)] = changed
        return changed

    def events(self, tenant_id: str, run_id: str) -> list[RunEvent]:
        return [e for batch in self.batches.get((tenant_id, run_id), []) for e in batch]

    def types(self, tenant_id: str, run_id: str) -> list[str]:
        return [e.type for e in self.events(tenant_id, run_id)]

    def done(self, tenant_id: str, run_id: str) -> bool:
        found = self.events(tenant_id, run_id)
        return bool(found) and found[-1].type in TERMINAL_EVENTS


class FakeResults:
    """Large results kept whole, under the key S3 would get."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    def offload(self, tenant_id: str, run_id: str, tool_call_id: str, text: str) -> dict[str, Any] | None:
        if len(text) <= OFFLOAD_CHARS:
            return None
        key = key_for(tenant_id, run_id, tool_call_id)
        self.texts[key] = text
        return {"key": key, "chars": len(text), "bytes": len(text.encode())}

    def read(self, tenant_id: str, run_id: str, tool_call_id: str) -> str | None:
        return self.texts.get(key_for(tenant_id, run_id, tool_call_id))


@dataclass(frozen=True)
class Described:
    run_id: str
    text: str | None  # None: the whole text is the run's offloaded result
    expires_at: datetime


class FakeDescribed:
    """Described results by session and call: inline up to the adapter's item limit, else only a note
    that the text is the offloaded result, read back from `results` as the adapter reads S3."""

    def __init__(self, results: FakeResults) -> None:
        self.results = results
        self.items: dict[tuple[str, str, str], Described] = {}

    def save(
        self, tenant_id: str, session_id: str, run_id: str, tool_call_id: str, text: str, *, in_s3: bool
    ) -> bool:
        if not in_s3 and len(text.encode()) > INLINE_BYTES:
            return False
        expires = utcnow() + timedelta(days=config.runtime().message_retention_days)
        kept = Described(run_id, None if in_s3 else text, expires)
        self.items[(tenant_id, session_id, tool_call_id)] = kept
        return True

    def load(self, tenant_id: str, session_id: str, tool_call_id: str) -> str | None:
        found = self.items.get((tenant_id, session_id, tool_call_id))
        if found is None or found.expires_at <= utcnow():
            return None
        if found.text is not None:
            return found.text
        return self.results.read(tenant_id, found.run_id, tool_call_id)


class FakeLedger:
    """The LedgerStore port in memory, with the adapter's transition rules."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], Entry] = {}
        self.lock = threading.Lock()

    def claim(
        self,
        tenant_id: str,
        key: EffectKey,
        tool_name: str,
        run_id: str,
        tool_call_id: str,
        arguments: dict[str, Any] | None = None,
    ) -> Claim:
        with self.lock:
            held = self.entries.get((tenant_id, key.id))
            if held is not None and held.status not in CLAIMABLE:
                return Claim(won=False, entry=held)
            entry = Entry(
                key=key.id,
                kind=key.kind,
                tool_name=tool_name,
                status="claimed",
                generation=(held.generation if held else 0) + 1,
                run_id=run_id,
                tool_call_id=tool_call_id,
                claimed_at=utcnow(),
                history=held.history if held else [],
                arguments=arguments,
            )
            self.entries[(tenant_id, key.id)] = entry
        return Claim(won=True, entry=entry)

    def settle(
        self,
        tenant_id: str,
        key: str,
        generation: int,
        to: Settlement,
        result: dict[str, Any] | None,
        truncated: bool,
    ) -> bool:
        with self.lock:
            entry = self.entries.get((tenant_id, key))
            if entry is None or entry.status != SETTLEABLE or entry.generation != generation:
                return False
            self.entries[(tenant_id, key)] = entry.model_copy(
                update={"status": to, "result": result, "result_truncated": truncated, "settled_at": utcnow()}
            )
        return True

    def get(self, tenant_id: str, key: str) -> Entry | None:
        return self.entries.get((tenant_id, key))

    def write_undone(self, tenant_id: str, key: str, undone: Entry, *, was: Entry) -> bool:
        with self.lock:
            entry = self.entries.get((tenant_id, key))
            if entry is None or (entry.status, entry.generation) != (was.status, was.generation):
                return False
            self.entries[(tenant_id, key)] = undone
        return True

    def write_done(self, tenant_id: str, key: str, done: Entry, *, was: Entry) -> bool:
        with self.lock:
            entry = self.entries.get((tenant_id, key))
            if entry is None or (entry.status, entry.generation) != (was.status, was.generation):
                return False
            self.entries[(tenant_id, key)] = done
        return True


class FakeFollowers:
    """Who would have been pushed what: the runs whose appends found a follower, in order."""

    def __init__(self) -> None:
        self.pushed: list[tuple[str, str]] = []

    def push(self, tenant_id: str, run_id: str) -> None:
        self.pushed.append((tenant_id, run_id))


class FakeShares:
    """A tenant's step shares: holders and their lease ends, as stepwise.store.shares keeps them."""

    def __init__(self) -> None:
        self.holders: dict[str, dict[str, int]] = {}  # tenant -> run -> lease end
        self.lock = threading.Lock()

    def take(self, tenant_id: str, run_id: str, *, limit: int, until: int, now: int) -> bool:
        with self.lock:
            held = self.holders.setdefault(tenant_id, {})
            if run_id not in held and len(held) >= limit:
                for ended in [run for run, lease in held.items() if lease <= now]:
                    del held[ended]
                if len(held) >= limit:
                    return False
            held[run_id] = until
        return True

    def give_back(self, tenant_id: str, run_id: str) -> None:
        with self.lock:
            self.holders.get(tenant_id, {}).pop(run_id, None)


class FakeStartKeys:
    """Which run each keyed start made, as stepwise.store.start_keys keeps them."""

    def __init__(self) -> None:
        self.held: dict[tuple[str, str], str] = {}
        self.lock = threading.Lock()

    def claim(self, tenant_id: str, key: str, run_id: str) -> str:
        with self.lock:
            return self.held.setdefault((tenant_id, key), run_id)

    def move(self, tenant_id: str, key: str, old: str, new: str) -> str:
        with self.lock:
            if self.held.get((tenant_id, key)) == old:
                self.held[(tenant_id, key)] = new
            return self.held[(tenant_id, key)]


@dataclass
class FakeStores:
    """One of each fake, wired as the real stores are (a run's counters read through its context)."""

    run_context: FakeRunContexts = field(default_factory=FakeRunContexts)
    sessions: FakeSessions = field(default_factory=FakeSessions)
    agents: FakeAgents = field(default_factory=FakeAgents)
    interactions: FakeInteractions = field(default_factory=FakeInteractions)
    effects: FakeLedger = field(default_factory=FakeLedger)
    events: FakeEventLog = field(default_factory=FakeEventLog)
    results: FakeResults = field(default_factory=FakeResults)
    followers: FakeFollowers = field(default_factory=FakeFollowers)
    start_keys: FakeStartKeys = field(default_factory=FakeStartKeys)
    shares: FakeShares | None = None  # none: steps are not bounded per tenant, as without the table
    runs: FakeRuns = field(init=False)
    described: FakeDescribed = field(init=False)

    def __post_init__(self) -> None:
        self.runs = FakeRuns(self.run_context)
        self.run_context.sessions = self.sessions
        self.described = FakeDescribed(self.results)

    def stores(self) -> Stores:
        return Stores(
            runs=self.runs,
            run_context=self.run_context,
            sessions=self.sessions,
            agents=self.agents,
            interactions=self.interactions,
            effects=self.effects,
            events=self.events,
            results=self.results,
            described=self.described,
            followers=self.followers,
            start_keys=self.start_keys,
            shares=self.shares,
        )
