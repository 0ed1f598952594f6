"""stepwise.runs.progress: where a run stands for the protocol doors, over the in-memory fakes."""

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from stepwise.core.errors import NotFound
from stepwise.core.schema import utcnow
from stepwise.interactions.models import NewInteraction
from stepwise.runs import ports, progress
from stepwise.runs.models import Run
from tests.fakes.stores import FakeStores

T = "tenant-progress"


@pytest.fixture
def fakes() -> Iterator[FakeStores]:
    fakes = FakeStores()
    with ports.using(fakes.stores()):
        yield fakes


def a_run(fakes: FakeStores, status: str = "running", **fields: object) -> Run:
    run_id = f"run_{uuid.uuid4().hex[:10]}"
    run = Run(
        run_id=run_id,
        agent_id="agt_1",
        session_id="ses_1",
        status=status,
        input="hi",
        created_at=utcnow(),
        **fields,
    )
    return fakes.runs.create(T, run)


def wait_on(fakes: FakeStores, run: Run, kind: str, tool_call_id: str = "call_1") -> str:
    interaction_id = f"int_{uuid.uuid4().hex[:10]}"
    fakes.interactions.create(
        T,
        NewInteraction(
            interaction_id=interaction_id,
            run_id=run.run_id,
            session_id=run.session_id,
            agent_id=run.agent_id,
            kind=kind,
            step=1,
            tool_call_id=tool_call_id,
            tool_call_index=0,
            tool_name="send",
            arguments={"to": "a@example.com"},
            digest="d",
            timeout_seconds=300,
        ),
    )
    return interaction_id


def test_pending_lists_the_trees_human_waits_but_not_a_delegations_own(fakes: FakeStores) -> None:
    child = a_run(fakes, "waiting")
    parent = a_run(fakes, "waiting", children=[child.run_id])
    wait_on(fakes, parent, "delegation", "call_child")
    own = wait_on(fakes, parent, "client_tool", "call_own")
    childs = wait_on(fakes, child, "approval", "call_send")
    found = progress.pending(T, fakes.runs.get(T, parent.run_id))
    assert sorted(i.interaction_id for i in found) == sorted([own, childs])
    assert {i.kind for i in found} == {"client_tool", "approval"}


def test_an_answered_wait_and_an_ended_run_have_nothing_pending(fakes: FakeStores) -> None:
    run = a_run(fakes, "waiting")
    answered = wait_on(fakes, run, "approval")
    fakes.interactions.answer(T, answered, {"approved": True}, key=None, by="api")
    assert progress.pending(T, fakes.runs.get(T, run.run_id)) == []
    ended = a_run(fakes, "succeeded")
    wait_on(fakes, ended, "approval")
    assert progress.pending(T, ended) == []


def test_now_is_not_found_for_another_tenants_run(fakes: FakeStores) -> None:
    run = a_run(fakes)
    with pytest.raises(NotFound):
        progress.now("someone-else", run.run_id)


def test_settle_returns_at_once_for_a_waiting_run_and_reports_the_log_position(fakes: FakeStores) -> None:
    run = a_run(fakes, "waiting")
    fakes.events.append(T, run.run_id, [("run_started", {}), ("step_started", {})])
    interaction_id = wait_on(fakes, run, "approval")
    started = time.monotonic()
    found = progress.settle(T, run.run_id, wait=5)
    assert time.monotonic() - started < 1
    assert found.settled and [i.interaction_id for i in found.pending] == [interaction_id]
    assert found.next == 2


def test_settle_wakes_on_the_terminal_event_and_reads_the_ended_run(fakes: FakeStores) -> None:
    run = a_run(fakes)
    fakes.events.append(T, run.run_id, [("run_started", {})])

    def finish() -> None:
        time.sleep(0.3)
        fakes.runs.transition(T, run.run_id, "succeeded", allowed_from={"running"}, output="42")
        fakes.events.append(T, run.run_id, [("run_completed", {"output": "42"})])

    threading.Thread(target=finish).start()
    found = progress.settle(T, run.run_id, wait=5)
    assert found.run.status == "succeeded" and found.run.output == "42"
    assert found.next == 2 and found.pending == []


def test_settle_wakes_when_the_run_asks_someone(fakes: FakeStores) -> None:
    run = a_run(fakes)
    fakes.events.append(T, run.run_id, [("run_started", {})])
    asked: list[str] = []

    def ask() -> None:  # in the loop's order: the Step's interaction, Await's event, then `waiting`
        time.sleep(0.3)
        asked.append(wait_on(fakes, run, "client_tool"))
        fakes.events.append(T, run.run_id, [("client_tool_requested", {"interaction_id": asked[0]})])
        time.sleep(0.5)  # no event marks the move to waiting
        fakes.runs.transition(T, run.run_id, "waiting", allowed_from={"running"})

    threading.Thread(target=ask).start()
    started = time.monotonic()
    found = progress.settle(T, run.run_id, wait=10)
    assert time.monotonic() - started < 3  # seen by looking at the run again, not at the wait's end
    assert [i.interaction_id for i in found.pending] == asked
    assert found.run.status == "waiting" and found.settled and found.next == 2


def test_a_wait_not_yet_announced_is_not_pending(fakes: FakeStores) -> None:
    run = a_run(fakes)  # the Step made the interaction; Await has not announced it yet
    wait_on(fakes, run, "approval")
    assert progress.pending(T, run) == []
    assert not progress.now(T, run.run_id).settled


def test_settle_gives_up_after_the_wait_with_the_run_as_it_stands(fakes: FakeStores) -> None:
    run = a_run(fakes)
    fakes.events.append(T, run.run_id, [("run_started", {}), ("step_started", {})])
    started = time.monotonic()
    found = progress.settle(T, run.run_id, wait=0.5)
    assert 0.4 < time.monotonic() - started < 3
    assert not found.settled and found.run.status == "running" and found.next == 2


def test_settle_until_ended_waits_through_a_human_wait(fakes: FakeStores) -> None:
    run = a_run(fakes, "waiting")
    fakes.events.append(T, run.run_id, [("run_started", {})])
    wait_on(fakes, run, "approval")

    def answered_and_finished() -> None:
        time.sleep(0.3)
        fakes.runs.transition(T, run.run_id, "succeeded", allowed_from={"waiting"}, output="done")
        fakes.events.append(T, run.run_id, [("approval_decided", {}), ("run_completed", {"output": "done"})])

    threading.Thread(target=answered_and_finished).start()
    found = progress.settle(T, run.run_id, wait=5, ended=True)
    assert found.run.status == "succeeded" and found.run.output == "done" and found.next == 3


def test_settle_hands_each_page_of_events_it_reads_to_seen(fakes: FakeStores) -> None:
    run = a_run(fakes)
    fakes.events.append(T, run.run_id, [("run_started", {})])

    def work() -> None:
        time.sleep(0.2)
        fakes.events.append(T, run.run_id, [("step_started", {"step": 1})])
        time.sleep(0.3)
        fakes.runs.transition(T, run.run_id, "succeeded", allowed_from={"running"}, output="ok")
        fakes.events.append(T, run.run_id, [("run_completed", {"output": "ok"})])

    threading.Thread(target=work).start()
    pages: list[list[str]] = []
    found = progress.settle(T, run.run_id, wait=5, seen=lambda events: pages.append([e.type for e in events]))
    assert found.run.done
    assert [t for page in pages for t in page] == ["step_started", "run_completed"]


def test_a_queued_run_has_nothing_pending_without_asking_the_interactions(fakes: FakeStores) -> None:
    run = a_run(fakes, "queued")
    asked: list[str] = []
    fakes.interactions.for_run = lambda *args: asked.append("asked") or []  # type: ignore[method-assign]

    assert progress.pending(T, run) == [] and asked == []


def test_settle_reads_the_run_once_while_its_log_is_still_empty(fakes: FakeStores) -> None:
    run = a_run(fakes, "queued")
    reads: list[str] = []
    real = fakes.runs.get

    def counted(tenant_id: str, run_id: str) -> Run:
        reads.append(run_id)
        return real(tenant_id, run_id)

    fakes.runs.get = counted  # type: ignore[method-assign]
    found = progress.settle(T, run.run_id, wait=0.3)

    assert not found.settled and reads == [run.run_id]  # now()'s read proves the tenant for the polls


def test_each_pending_wait_names_the_api_call_that_answers_it(fakes: FakeStores) -> None:
    run = a_run(fakes, "waiting")
    approval = wait_on(fakes, run, "approval", "call_send")
    tool = wait_on(fakes, run, "client_tool", "call_pick")
    by_id = {i.interaction_id: i for i in progress.pending(T, fakes.runs.get(T, run.run_id))}

    asked = progress.respond_call(by_id[approval])
    handed = progress.respond_call(by_id[tool])

    assert asked.startswith(f"POST /v1/sessions/interactions/{approval}/respond ")
    assert '"approved": true|false' in asked and "Idempotency-Key" in asked
    assert handed.startswith(f"POST /v1/sessions/interactions/{tool}/respond ")
    assert '"tool_call_id": "call_pick"' in handed and '"outcome": "completed"|"error"' in handed
