"""The run aggregate's stores as small ports: only what the packages above the store call (the loop,
the run's lifecycle, the tools and followers that read a run).

Each DynamoDB (or S3) module satisfies its port structurally (mypy checks it where
stepwise.store.wiring builds them). Every package reaches them here, `stores().runs.get(...)`, and
none imports the store, so unit tests hand them in-memory fakes (tests/fakes/stores.py) instead of
starting moto:

    with ports.using(fakes.stores()):
        step(state)

Nothing here imports an adapter: a composition root (each handler module, the local stack, the test
suite) installs the process's stores once, and the packages that use them stay below the store.

The current stores live in a ContextVar: the loop's worker threads run in a copy of the step's
context (stepwise.loop.calls), so they see the same stores, and tests running side by side in threads
cannot see each other's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # annotations only: every handler module imports this one, and must stay light
    from stepwise.agents.models import Agent
    from stepwise.interactions.models import Interaction, NewInteraction
    from stepwise.ledger import LedgerStore
    from stepwise.llm.models import Usage
    from stepwise.runs.listing import RunFilter
    from stepwise.runs.models import Appended, EventType, Head, Run, RunEvent, RunStatus
    from stepwise.runs.state import RunContext
    from stepwise.sessions.models import Earlier, Session

Message = dict[str, Any]


class RunStore(Protocol):
    """Run records (stepwise.store.runs)."""

    def check_fits(self, tenant_id: str, run: Run) -> None:
        """413 `item_too_large` for a run too large to store: asked before anything else is written
        for it (its session)."""
        ...

    def create(self, tenant_id: str, run: Run) -> Run:
        """Record a new run, taking one of the tenant's active-run slots in the same write: RunExists
        for an id recorded before, QuotaExceeded when no slot is left."""
        ...

    def delete(self, tenant_id: str, run_id: str) -> None:
        """Only for a queued run whose start was refused before it began; its slot is given back."""
        ...

    def exists(self, tenant_id: str, run_id: str) -> bool: ...

    def get(self, tenant_id: str, run_id: str) -> Run:
        """The run, with an active run's counters from its context; NotFound when there is none."""
        ...

    def erase_attachments(self, tenant_id: str, run_id: str) -> bool:
        """Forget a finished run's files (their list goes, the time of the erasure stays); False when
        the run is still active."""
        ...

    def active_before(self, cutoff: datetime) -> Iterator[tuple[str, Run]]:
        """(tenant_id, run) for every tenant's run still active that was created before `cutoff`: a
        Scan of the whole table, for the reconciler's sweep only."""
        ...

    def transition(
        self, tenant_id: str, run_id: str, to: RunStatus, *, allowed_from: AbstractSet[str], **fields: Any
    ) -> bool:
        """Move the run to `to` only from one of `allowed_from` (False otherwise), with `fields`."""
        ...

    def add_usage(self, tenant_id: str, run_id: str, usage: Usage, lines: list[dict[str, Any]]) -> bool:
        """Add a late model call's spend to an ended run's counters, its usage lines counted in the same
        write; False when the run is gone or not ended."""
        ...

    def add_descendants_usage(self, tenant_id: str, run_id: str, usage: Usage, *, key: str) -> bool:
        """Add to an ended run's `descendants_usage`, once per `key`; False when the run is gone or
        still active."""
        ...

    def list_runs(
        self,
        tenant_id: str,
        *,
        agent_id: str | None = None,
        session_id: str | None = None,
        status: RunStatus | None = None,
        limit: int = ...,
        next_token: str | None = None,
        where: RunFilter = ...,
    ) -> tuple[list[Run], str | None]:
        """Newest first, a page at a time (the token is the next page's; None after the last), of the
        runs `where` lets through (user, trigger, creation window)."""
        ...


@dataclass(frozen=True)
class SessionMessage:
    """A message of the run's conversation written in the same request as its context (where the
    context must never point at calls whose message is not stored)."""

    session_id: str
    run_id: str
    step: int
    slot: str
    message: Message


class RunContextStore(Protocol):
    """The per-run context item (stepwise.store.run_context)."""

    def load(self, tenant_id: str, run_id: str) -> RunContext:
        """The context, a fresh one (version 0) before the first Step."""
        ...

    def save(
        self, tenant_id: str, run_id: str, context: RunContext, messages: Sequence[SessionMessage] = ()
    ) -> RunContext:
        """Write over `context.version`; RunStateError when the stored version differs or the run ended.
        `messages` land with it or not at all (one transaction)."""
        ...

    def mark_ended(self, tenant_id: str, run_id: str) -> RunContext:
        """Fence every later write out; the context as it stood when marked."""
        ...


class SessionStore(Protocol):
    """A session's messages, checkpoints and shell (stepwise.store.sessions)."""

    def create(
        self,
        tenant_id: str,
        session_id: str,
        agent_id: str,
        active_run_id: str | None = None,
        user_id: str | None = None,
    ) -> Session:
        """A new session (a conditional write: never over an existing one), already held by its first
        run when one is given."""
        ...

    def get(self, tenant_id: str, session_id: str) -> Session:
        """The session's shell; NotFound when there is none."""
        ...

    def claim(self, tenant_id: str, session_id: str, run_id: str) -> bool:
        """Make `run_id` the session's active run if none is (or it is already): two concurrent starts
        cannot both win."""
        ...

    def enqueue(self, tenant_id: str, session_id: str, run_id: str, *, first: bool = False) -> bool:
        """Queue `run_id` behind the active run (at the front for `first`); False when no run is active
        any more: the caller claims instead."""
        ...

    def put_message(
        self, tenant_id: str, session_id: str, run_id: str, step: int, slot: str, message: Message
    ) -> None:
        """Write at the message's fixed key (run, step, slot): a retry overwrites itself."""
        ...

    def history(self, tenant_id: str, session_id: str, run_id: str) -> tuple[Earlier, list[Message]]:
        """(the session's completed runs' messages with their expiries, this run's), each in key order."""
        ...

    def earlier_history(self, tenant_id: str, session_id: str, run_id: str) -> Earlier:
        """The history `run_id` begins with: the last completed run's checkpoint plus its messages (the
        whole session only when that checkpoint is missing), less what has expired."""
        ...

    def run_messages(self, tenant_id: str, session_id: str, run_id: str) -> list[Message]: ...

    def put_checkpoint(self, tenant_id: str, session_id: str, run_id: str, earlier: Earlier) -> bool:
        """False (nothing kept) when it is too large for one item."""
        ...

    def checkpoint(self, tenant_id: str, session_id: str, run_id: str) -> Earlier | None:
        """The checkpoint less what has expired since; None when the run kept none."""
        ...

    def complete_run(self, tenant_id: str, session_id: str, run_id: str) -> None:
        """The run's messages join the session's history, once."""
        ...

    def release(self, tenant_id: str, session_id: str, run_id: str) -> str | None:
        """`run_id` ended: the session passes to its first queued run (returned), or is freed."""
        ...


class AgentStore(Protocol):
    """Agents (stepwise.agents.store)."""

    def get(self, tenant_id: str, agent_id: str) -> Agent: ...

    def get_for_run(self, tenant_id: str, agent_id: str) -> Agent:
        """As `get`, but a missing agent is AgentGone, the step error the state machine catches."""
        ...

    def count_skipped(self, tenant_id: str, agent_id: str) -> None:
        """One more delivery skipped because the agent is paused (its `skipped_while_paused`)."""
        ...


class InteractionStore(Protocol):
    """A run's pauses (stepwise.store.interactions); every status change is conditional on pending."""

    def create(self, tenant_id: str, new: NewInteraction) -> Interaction:
        """Create it once: a retried Step gets the one it made before. Listed under
        `new.listed_session_id` (a delegated run's root session) when given."""
        ...

    def get(self, tenant_id: str, interaction_id: str) -> Interaction: ...

    def attach_token(self, tenant_id: str, interaction_id: str, token: str) -> Interaction: ...

    def task_token(self, tenant_id: str, interaction_id: str) -> str | None:
        """The token that resumes the run, None until the wait stored it; NotFound for no interaction."""
        ...

    def answer(
        self, tenant_id: str, interaction_id: str, answer: dict[str, Any], *, key: str | None, by: str | None
    ) -> bool:
        """pending → answered; True for the one answer that wins, False when it was no longer pending."""
        ...

    def mark_delivered(self, tenant_id: str, interaction_id: str) -> None:
        """The answer reached the waiting execution."""
        ...

    def close(self, tenant_id: str, interaction_id: str, status: str = "expired") -> bool:
        """pending → `status`; False when it was no longer pending (exactly one closer wins)."""
        ...

    def for_run(self, tenant_id: str, run_id: str, status: str | None = None) -> list[Interaction]: ...


class EventLog(Protocol):
    """The run's append-only event log (stepwise.store.events); stepwise.runs.events writes through it."""

    def append(self, tenant_id: str, run_id: str, events: list[tuple[EventType, dict[str, Any]]]) -> Appended:
        """The events with their seqs, next after the run's last; nothing for an empty batch."""
        ...

    def head(self, tenant_id: str, run_id: str) -> Head | None:
        """The log's head (the last seq handed out, whether it is terminal), None before the run's
        first event. Strongly consistent: a reader that saw an event is never told the log ends before
        it (stepwise.runs.eventlog)."""
        ...

    def after(self, tenant_id: str, run_id: str, seq: int, limit: int) -> list[RunEvent]:
        """Up to `limit` events written with a seq above `seq`, in order (a seq reserved but not yet
        written is missing: stepwise.runs.eventlog waits for it)."""
        ...

    def followed(self, tenant_id: str, run_id: str) -> Head:
        """Count a new follower on the head (creating it if the run has no event yet); the head after.
        Every append reserved after this sees the follower (`Appended.followed`)."""
        ...

    def push_configs(self, tenant_id: str, run_id: str) -> dict[str, Any]:
        """The run's A2A push notification configs by id (stepwise.protocols.a2a)."""
        ...

    def change_push(
        self, tenant_id: str, run_id: str, change: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> dict[str, Any]:
        """Apply `change` to the configs and store the result, never over a concurrent change; every
        append reserved after this sees them (`Appended.push`)."""
        ...


class ResultStore(Protocol):
    """Where a result too large for a message is kept whole (stepwise.tools.results, S3)."""

    def offload(self, tenant_id: str, run_id: str, tool_call_id: str, text: str) -> dict[str, Any] | None:
        """The stored text's reference, or None when it is small enough to travel whole."""
        ...


class DescribedStore(Protocol):
    """The whole of each tool result the model read as a description, kept in its session for
    result_read (stepwise.store.described)."""

    def save(
        self, tenant_id: str, session_id: str, run_id: str, tool_call_id: str, text: str, *, in_s3: bool
    ) -> bool:
        """Keep `text` (or note that it is in S3, `in_s3`); False when it can be kept nowhere (too
        large for an item and not in S3), and then the model must not be told it can read it."""
        ...

    def load(self, tenant_id: str, session_id: str, tool_call_id: str) -> str | None:
        """The whole text of a described result of this session; None when there is none, or it
        expired."""
        ...


class PushNotifier(Protocol):
    """Who hears of the events appended to a run that is an A2A task with push notification configs
    (stepwise.protocols.a2a queues its new state to each config)."""

    def notify(self, tenant_id: str, run_id: str, events: list[RunEvent], configs: dict[str, Any]) -> None:
        """Never raises: a subscriber's trouble must not fail the run's own progress."""
        ...


class Followers(Protocol):
    """The run's live followers (stepwise.follow.delivery posts to their WebSocket connections)."""

    def push(self, tenant_id: str, run_id: str) -> None:
        """Send what was just appended to every follower of the run; never raises for a delivery that
        failed (the events are in the log, where a follower that missed them reads them)."""
        ...


class SpendStore(Protocol):
    """The run's agent and where it stands against its budgets, in one read (stepwise.usage.standing);
    none in tests that keep no spend."""

    def load(self, tenant_id: str, run: Run) -> tuple[Agent, Any]: ...


class ShareStore(Protocol):
    """A tenant's step shares (stepwise.store.shares): which runs hold one, each until its lease ends."""

    def take(self, tenant_id: str, run_id: str, *, limit: int, until: int, now: int) -> bool:
        """Hold a share for `run_id` until epoch second `until` (again, when it holds one already);
        False when `limit` runs hold one, counting no lease that ended before `now`."""
        ...

    def give_back(self, tenant_id: str, run_id: str) -> None:
        """Let go of the run's share, if it holds one."""
        ...


class StartKeyStore(Protocol):
    """Which run a keyed start made (stepwise.store.start_keys), kept as long as the start's
    idempotency record: what lets a start retried after a failure find its run."""

    def claim(self, tenant_id: str, key: str, run_id: str) -> str:
        """Hold `run_id` under `key` unless one is held already: the run id held afterwards."""
        ...

    def move(self, tenant_id: str, key: str, old: str, new: str) -> str:
        """Hold `new` under `key` in place of `old` (a run that could not start): the run id held
        afterwards, another's when a concurrent retry moved it first."""
        ...


@dataclass(frozen=True)
class Stores:
    runs: RunStore
    run_context: RunContextStore
    sessions: SessionStore
    agents: AgentStore
    interactions: InteractionStore
    effects: LedgerStore
    events: EventLog
    results: ResultStore
    described: DescribedStore
    followers: Followers
    start_keys: StartKeyStore
    pushes: PushNotifier | None = None  # none in tests that do not exercise A2A push notifications
    spend: SpendStore | None = None  # none: no budgets are checked and the agent is read alone
    shares: ShareStore | None = None  # none: a tenant's concurrent steps are not bounded


_current: ContextVar[Stores | None] = ContextVar("stepwise_stores", default=None)


_installed: Callable[[], Stores] | None = None


class NotInstalled(RuntimeError):
    """No composition root installed the process's stores (a bug of the entry point, not of input)."""


def install(build: Callable[[], Stores]) -> None:
    """The process's stores outside any `using` block: built by `build` on first use, then kept."""
    global _installed
    _installed = cache(build)


def stores() -> Stores:
    """The stores the loop uses now: those of the innermost `using` block, else the installed ones."""
    current = _current.get()
    if current is not None:
        return current
    if _installed is None:
        raise NotInstalled(
            "no stores are installed: the entry point must call stepwise.store.wiring.install()"
        )
    return _installed()


@contextmanager
def using(replacement: Stores) -> Iterator[Stores]:
    """Run the block against `replacement` (tests hand in fakes); the previous stores come back after."""
    token = _current.set(replacement)
    try:
        yield replacement
    finally:
        _current.reset(token)
