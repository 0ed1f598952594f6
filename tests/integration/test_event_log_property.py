"""The event log's seq reservation under concurrent appends, as a stateful property: batches appended
from several threads at once to a few runs, followers arriving in between. After every step each run's
seqs are exactly 1..N with no gap and no duplicate, each batch got a contiguous range, the head says N
(and `done` once a batch ended with a terminal event, after which the log takes nothing), reading the
log back gives each event at the seq its append was told, and an append after a follower arrived knows
it is followed.

The same machine runs against the in-memory fake (tests.fakes.stores.FakeEventLog) and the DynamoDB
adapter (stepwise.store.events) on moto, so the fake the rest of the suite leans on is held to the
adapter's behaviour."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from stepwise.core.ids import new_id
from stepwise.runs.models import TERMINAL_EVENTS, Appended, EventType, Head, RunEvent
from stepwise.store import events as dynamo_log
from stepwise_local.stack import LocalStack
from tests.fakes.stores import FakeEventLog

TENANT = "proptest"
TYPES: list[EventType] = ["chunk", "tool_call", "step_completed", "run_completed"]
RUNS = 2
STATEFUL = settings(max_examples=8, stateful_step_count=6)


class Log(Protocol):
    def append(
        self, tenant_id: str, run_id: str, events: list[tuple[EventType, dict[str, Any]]]
    ) -> Appended: ...
    def head(self, tenant_id: str, run_id: str) -> Head | None: ...
    def followed(self, tenant_id: str, run_id: str) -> Head: ...
    def after(self, tenant_id: str, run_id: str, seq: int, limit: int) -> list[RunEvent]: ...


class SeqReservation(RuleBasedStateMachine):
    log: Log

    def __init__(self) -> None:
        super().__init__()
        self.runs = [new_id("run") for _ in range(RUNS)]  # fresh runs: moto keeps state across examples
        self.sent: dict[str, dict[int, tuple[str, dict[str, Any]]]] = {r: {} for r in self.runs}
        self.last_type: dict[str, str] = {}
        self.followers: dict[str, int] = dict.fromkeys(self.runs, 0)

    @rule(
        run=st.integers(0, RUNS - 1),
        batches=st.lists(st.lists(st.sampled_from(TYPES), min_size=1, max_size=3), min_size=1, max_size=4),
    )
    def append_concurrently(self, run: int, batches: list[list[EventType]]) -> None:
        run_id = self.runs[run]
        tagged = [
            [(etype, {"batch": b, "i": i}) for i, etype in enumerate(batch)]
            for b, batch in enumerate(batches)
        ]
        was_followed = self.followers[run_id] > 0
        with ThreadPoolExecutor(max_workers=len(tagged)) as pool:
            answers = list(pool.map(lambda batch: self.log.append(TENANT, run_id, batch), tagged))
        ends: list[tuple[int, str]] = []
        for batch, appended in zip(tagged, answers, strict=True):
            if not appended.events:  # refused: only a log that is done takes nothing more
                assert self._done(run_id, answers)
                continue
            seqs = [e.seq for e in appended.events]
            assert seqs == list(range(seqs[0], seqs[0] + len(batch))), seqs  # one contiguous range
            assert appended.followed is was_followed
            for event, (etype, data) in zip(appended.events, batch, strict=True):
                assert event.seq not in self.sent[run_id], f"seq {event.seq} handed out twice"
                self.sent[run_id][event.seq] = (etype, data)
            ends.append((seqs[-1], batch[-1][0]))
        if ends:
            self.last_type[run_id] = max(ends)[1]

    def _done(self, run_id: str, answers: list[Appended]) -> bool:
        """The log was done already, or one of these batches ended it."""
        ended = self.last_type.get(run_id) in TERMINAL_EVENTS
        return ended or any(a.events and a.events[-1].type in TERMINAL_EVENTS for a in answers)

    @rule(run=st.integers(0, RUNS - 1))
    def follow(self, run: int) -> None:
        run_id = self.runs[run]
        head = self.log.followed(TENANT, run_id)
        self.followers[run_id] += 1
        assert head.last_seq == len(self.sent[run_id])

    @invariant()
    def seqs_are_one_to_n_and_read_back_as_appended(self) -> None:
        for run_id in self.runs:
            sent = self.sent[run_id]
            assert sorted(sent) == list(range(1, len(sent) + 1))
            head = self.log.head(TENANT, run_id)
            if not sent:
                assert head is None or head.last_seq == 0
                continue
            assert head is not None and head.last_seq == len(sent)
            assert head.done is (self.last_type[run_id] in TERMINAL_EVENTS)
            read = self.log.after(TENANT, run_id, 0, 1000)
            assert [(e.seq, e.type, e.data) for e in read] == [(s, *sent[s]) for s in sorted(sent)]


class FakeSeqReservation(SeqReservation):
    def __init__(self) -> None:
        self.log = FakeEventLog()
        super().__init__()


class DynamoSeqReservation(SeqReservation):
    log = dynamo_log  # type: ignore[assignment]  # the module's functions are the port


def test_the_fakes_seqs_hold_under_concurrent_appends() -> None:
    run_state_machine_as_test(FakeSeqReservation, settings=STATEFUL)


def test_dynamodbs_seqs_hold_under_concurrent_appends(stack: LocalStack) -> None:
    run_state_machine_as_test(DynamoSeqReservation, settings=STATEFUL)
