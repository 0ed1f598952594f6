"""The loop's ports, held to one contract: every assertion here runs against the in-memory fakes
(tests/fakes/stores.py) and against the DynamoDB modules on moto, so the fakes the unit tests trust
cannot drift from the stores the loop really uses."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from pynamodb.exceptions import TransactWriteError

from stepwise import ledger
from stepwise.agents import store as agents
from stepwise.agents.models import AgentCreate
from stepwise.attachments.models import Attachment
from stepwise.core import config, ids
from stepwise.core.errors import AgentGone, Conflict, NotFound, PayloadTooLarge, QuotaExceeded, RunStateError
from stepwise.core.schema import utcnow
from stepwise.interactions.models import NewInteraction, digest
from stepwise.ledger import store as effects
from stepwise.llm.models import Usage
from stepwise.runs import ports
from stepwise.runs.listing import RunFilter
from stepwise.runs.models import ACTIVE_STATUSES, Head, Run, RunExists, RunStatus
from stepwise.runs.ports import SessionMessage
from stepwise.runs.state import ContextMovedOn, RunContext
from stepwise.sessions.models import ASSISTANT_SLOT, USER_SLOT, Earlier, tool_slot
from stepwise.store import described, events, interactions, run_context, runs, sessions, start_keys
from stepwise.store.described import INLINE_BYTES
from stepwise.store.sessions import CHECKPOINT_LIMIT
from stepwise.tools import results
from stepwise_local.stack import DEFAULT_TENANT, LocalStack
from tests.fakes.stores import FakeStores
from tests.integration.support import answer_lost_once


@dataclass
class Backend:
    """The stores under test, with what the tests seed them through (the same calls on both)."""

    runs: Any
    run_context: Any
    sessions: Any
    agents: Any
    interactions: Any
    effects: Any
    events: Any
    results: Any
    described: Any


@pytest.fixture(params=["fake", "dynamodb"])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "fake":
        fakes = FakeStores()
        return Backend(
            fakes.runs,
            fakes.run_context,
            fakes.sessions,
            fakes.agents,
            fakes.interactions,
            fakes.effects,
            fakes.events,
            fakes.results,
            fakes.described,
        )
    request.getfixturevalue("stack")  # moto, with the template's tables and bucket
    return Backend(runs, run_context, sessions, agents, interactions, effects, events, results, described)


@pytest.fixture
def tenant() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


def a_run(run_id: str = "run_1", session_id: str = "ses_1", **fields: Any) -> Run:
    return Run.model_validate(
        {
            "run_id": run_id,
            "agent_id": "agt_1",
            "session_id": session_id,
            "status": "queued",
            "input": "hi",
            "created_at": utcnow(),
            **fields,
        }
    )


def new_run(tenant_id: str, store: Backend, run_id: str = "run_1", session_id: str = "ses_1") -> Run:
    created: Run = store.runs.create(tenant_id, a_run(run_id, session_id))
    return created


def end(store: Backend, tenant_id: str, run_id: str, to: RunStatus = "failed") -> None:
    assert store.runs.transition(tenant_id, run_id, to, allowed_from=ACTIVE_STATUSES) is True


def test_the_installed_stores_are_the_dynamodb_modules() -> None:
    default = ports.stores()  # installed by the suite's conftest, as each handler module installs them

    assert default is ports.stores()  # built once
    assert (default.runs, default.sessions, default.run_context, default.events, default.described) == (
        runs,
        sessions,
        run_context,
        events,
        described,
    )
    replacement = FakeStores().stores()
    with ports.using(replacement):
        assert ports.stores() is replacement
    assert ports.stores() is default


def test_without_installed_stores_a_port_names_the_missing_entry_point(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ports, "_installed", None)

    with pytest.raises(ports.NotInstalled, match=r"stepwise\.store\.wiring\.install\(\)"):
        ports.stores()
    with ports.using(FakeStores().stores()) as fakes:  # a block's own stores need no installing
        assert ports.stores() is fakes


# --- The run's context ---------------------------------------------------------------------------


def test_a_context_is_saved_over_the_version_it_was_read_at(backend: Backend, tenant: str) -> None:
    fresh = backend.run_context.load(tenant, "run_1")
    assert (fresh.version, fresh.ended, fresh.steps) == (0, False, 0)

    saved = backend.run_context.save(tenant, "run_1", fresh.model_copy(update={"steps": 1, "prepared": True}))
    assert saved.version == 1
    loaded = backend.run_context.load(tenant, "run_1")
    assert (loaded.version, loaded.steps, loaded.prepared) == (1, 1, True)

    with pytest.raises(RunStateError):  # a stale step wrote its copy of version 0
        backend.run_context.save(tenant, "run_1", fresh.model_copy(update={"steps": 9}))
    assert backend.run_context.load(tenant, "run_1").steps == 1

    again = backend.run_context.save(tenant, "run_1", loaded.model_copy(update={"steps": 2}))
    assert again.version == 2


def test_an_ended_run_refuses_every_later_context_write(backend: Backend, tenant: str) -> None:
    saved = backend.run_context.save(tenant, "run_1", RunContext(steps=1))

    backend.run_context.mark_ended(tenant, "run_1")

    loaded = backend.run_context.load(tenant, "run_1")
    assert (loaded.ended, loaded.version) == (True, 1)  # ending leaves the version alone
    with pytest.raises(RunStateError):
        backend.run_context.save(tenant, "run_1", saved)
    backend.run_context.mark_ended(tenant, "run_2")  # ended before its first step
    with pytest.raises(RunStateError):
        backend.run_context.save(tenant, "run_2", RunContext())


def test_a_refused_write_with_messages_carries_what_it_spent(backend: Backend, tenant: str) -> None:
    """The model's turn rides in the context's transaction (puts go before updates): the refusal is
    still the context's, and it hands back the context with the spend it could not write."""
    saved = backend.run_context.save(tenant, "run_1", RunContext(steps=1))
    marked = backend.run_context.mark_ended(tenant, "run_1")
    assert (marked.ended, marked.version, marked.steps) == (True, 1, 1)
    spent = saved.model_copy(update={"unsaved_usage": Usage(input_tokens=100, output_tokens=7)})
    turn = SessionMessage("ses_1", "run_1", 1, ASSISTANT_SLOT, {"role": "assistant", "content": "late"})

    with pytest.raises(ContextMovedOn) as refused:
        backend.run_context.save(tenant, "run_1", spent, [turn])

    assert refused.value.spent and refused.value.context.unsaved_usage.input_tokens == 100


# --- Runs ----------------------------------------------------------------------------------------


def test_a_run_moves_only_from_the_statuses_allowed(backend: Backend, tenant: str) -> None:
    new_run(tenant, backend)

    assert backend.runs.transition(tenant, "run_1", "running", allowed_from={"queued"}) is True
    assert backend.runs.transition(tenant, "run_1", "running", allowed_from={"queued"}) is False
    assert backend.runs.transition(tenant, "missing", "running", allowed_from={"queued"}) is False
    ended = backend.runs.transition(
        tenant,
        "run_1",
        "failed",
        allowed_from=ACTIVE_STATUSES,
        steps=2,
        input_tokens=10,
        output_tokens=3,
        cached_tokens=0,
        tools_executed=["lookup"],
        error={"code": "boom", "message": "it broke"},
    )
    assert ended is True
    assert backend.runs.transition(tenant, "run_1", "succeeded", allowed_from=ACTIVE_STATUSES) is False

    run = backend.runs.get(tenant, "run_1")
    assert (run.status, run.steps, run.tools_executed) == ("failed", 2, ["lookup"])
    assert (run.usage.input_tokens, run.usage.output_tokens) == (10, 3)
    assert run.error is not None and run.error.code == "boom"
    assert run.finished_at is not None


def test_an_active_runs_counters_come_from_its_context(backend: Backend, tenant: str) -> None:
    new_run(tenant, backend)
    backend.runs.transition(tenant, "run_1", "running", allowed_from={"queued"})

    backend.run_context.save(tenant, "run_1", RunContext(steps=3, tools_executed=["a", "b"]))

    run = backend.runs.get(tenant, "run_1")
    assert (run.steps, run.tools_executed) == (3, ["a", "b"])


def test_an_unknown_run_is_not_found(backend: Backend, tenant: str) -> None:
    with pytest.raises(NotFound) as caught:
        backend.runs.get(tenant, "run_missing")
    assert caught.value.code == "run_not_found"


def test_a_run_is_recorded_once(backend: Backend, tenant: str) -> None:
    assert backend.runs.exists(tenant, "run_1") is False

    new_run(tenant, backend)

    assert backend.runs.exists(tenant, "run_1") is True
    assert backend.runs.get(tenant, "run_1").trigger_id == "run_1"  # its own id when nothing else started it
    with pytest.raises(RunExists) as caught:  # a duplicate delivery of what started it
        backend.runs.create(tenant, a_run(input="again"))
    assert (caught.value.code, isinstance(caught.value, Conflict)) == ("run_exists", True)
    assert backend.runs.get(tenant, "run_1").input == "hi"
    assert backend.runs.exists(f"{tenant}_other", "run_1") is False


def test_a_run_too_large_for_an_item_is_refused_before_anything_is_written(
    backend: Backend, tenant: str
) -> None:
    huge = a_run(metadata={"blob": "x" * 410_000})

    with pytest.raises(PayloadTooLarge) as caught:
        backend.runs.check_fits(tenant, huge)
    assert caught.value.code == "item_too_large"
    with pytest.raises(PayloadTooLarge):
        backend.runs.create(tenant, huge)

    assert backend.runs.exists(tenant, "run_1") is False
    backend.runs.check_fits(tenant, a_run())  # a run of ordinary size fits


@pytest.fixture
def two_active_runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("STEPWISE_MAX_ACTIVE_RUNS", "2")
    config.reset()
    yield
    monkeypatch.undo()
    config.reset()


@pytest.mark.usefixtures("two_active_runs")
def test_an_active_run_holds_a_slot_until_it_ends_or_is_deleted(backend: Backend, tenant: str) -> None:
    new_run(tenant, backend, "run_1")
    new_run(tenant, backend, "run_2")

    with pytest.raises(QuotaExceeded):
        new_run(tenant, backend, "run_3")
    assert backend.runs.exists(tenant, "run_3") is False
    new_run(f"{tenant}_other", backend, "run_3")  # each tenant counts its own

    end(backend, tenant, "run_1")
    assert backend.runs.transition(tenant, "run_1", "cancelled", allowed_from=ACTIVE_STATUSES) is False
    new_run(tenant, backend, "run_3")  # the ending gave its slot back, once
    with pytest.raises(QuotaExceeded):
        new_run(tenant, backend, "run_4")
    backend.runs.delete(tenant, "run_3")
    new_run(tenant, backend, "run_4")  # so did the deletion


def test_only_a_queued_run_is_deleted(backend: Backend, tenant: str) -> None:
    new_run(tenant, backend, "run_1")
    new_run(tenant, backend, "run_2")
    backend.runs.transition(tenant, "run_2", "running", allowed_from={"queued"})

    backend.runs.delete(tenant, "run_1")

    assert backend.runs.exists(tenant, "run_1") is False
    with pytest.raises(NotFound):
        backend.runs.get(tenant, "run_1")
    with pytest.raises(TransactWriteError):  # it began: other records name it now
        backend.runs.delete(tenant, "run_2")
    assert backend.runs.get(tenant, "run_2").status == "running"
    with pytest.raises(TransactWriteError):
        backend.runs.delete(tenant, "run_missing")


def test_a_finished_runs_attachments_are_erased_and_an_active_ones_are_kept(
    backend: Backend, tenant: str
) -> None:
    listed = Attachment(attachment_id="att_1", name="a.csv", content_type="text/csv", size=3, sha256="ab")
    backend.runs.create(tenant, a_run(attachments=[listed]))

    assert backend.runs.erase_attachments(tenant, "run_1") is False  # it would read them in its next step
    assert backend.runs.get(tenant, "run_1").attachments == [listed]

    end(backend, tenant, "run_1")
    assert backend.runs.erase_attachments(tenant, "run_1") is True

    erased = backend.runs.get(tenant, "run_1")
    assert erased.attachments == []
    assert erased.attachments_erased_at is not None
    assert backend.runs.erase_attachments(tenant, "run_missing") is False


def test_the_sweep_finds_every_tenants_active_runs_created_before_the_cutoff(
    backend: Backend, tenant: str
) -> None:
    other, cutoff = f"{tenant}_other", utcnow()
    hour = timedelta(hours=1)
    for tenant_id, run_id, at, status in [
        (tenant, "run_queued", cutoff - hour, None),
        (tenant, "run_running", cutoff - hour, "running"),
        (tenant, "run_waiting", cutoff - hour, "waiting"),
        (tenant, "run_ended", cutoff - hour, "succeeded"),
        (tenant, "run_new", cutoff + hour, None),
        (other, "run_queued", cutoff - hour, None),
    ]:
        backend.runs.create(tenant_id, a_run(run_id, created_at=at))
        if status is not None:
            backend.runs.transition(tenant_id, run_id, "running", allowed_from={"queued"})
        if status in ("waiting", "succeeded"):
            backend.runs.transition(tenant_id, run_id, status, allowed_from={"running"})

    found = {
        (tenant_id, run.run_id, run.status)
        for tenant_id, run in backend.runs.active_before(cutoff)
        if tenant_id in (tenant, other)  # the table holds other tests' runs too
    }

    assert found == {
        (tenant, "run_queued", "queued"),
        (tenant, "run_running", "running"),
        (tenant, "run_waiting", "waiting"),
        (other, "run_queued", "queued"),
    }


def test_runs_are_listed_by_user_trigger_and_creation_window(backend: Backend, tenant: str) -> None:
    # Given runs whose ids carry their creation times (as new_id makes them), of two users, started in
    # three ways
    now = utcnow().replace(microsecond=0)
    made = []
    for hours_ago, user, trigger_id in [
        (30, "ada", None),
        (20, "ada", "schedule:sch_1@2026-01-01T00:00:00Z"),
        (10, "bob", "event:evt_1"),
        (1, "ada", "delegation:run_parent"),
    ]:
        at = now - timedelta(hours=hours_ago)
        run_id = f"run_{ids.ulid(int(at.timestamp() * 1000))}"
        fields: dict[str, Any] = {"created_at": at, "user_id": user, "trigger_id": trigger_id}
        backend.runs.create(tenant, a_run(run_id, f"ses_{hours_ago}", **fields))
        made.append(run_id)
    oldest, scheduled, evented, delegated = made

    def listed(**where: Any) -> list[str]:
        page, _ = backend.runs.list_runs(tenant, where=RunFilter(**where))
        return [r.run_id for r in page]

    # Then each filter keeps exactly its runs, newest first, and they combine
    assert listed() == [delegated, evented, scheduled, oldest]
    assert listed(user_id="ada") == [delegated, scheduled, oldest]
    assert listed(trigger="schedule") == [scheduled]
    assert listed(trigger="api") == [oldest]  # no trigger id: started by an API call
    assert listed(trigger="delegation", user_id="bob") == []
    hour = timedelta(hours=1)
    assert listed(created_after=now - 20 * hour) == [delegated, evented, scheduled]  # inclusive
    assert listed(created_before=now - 20 * hour) == [oldest]  # exclusive
    assert listed(created_after=now - 25 * hour, created_before=now - 5 * hour) == [evented, scheduled]
    assert listed(created_after=now, created_before=now - hour) == []  # an empty window reads nothing
    # a window pages like any listing: the token goes on within it
    page, token = backend.runs.list_runs(tenant, limit=1, where=RunFilter(created_before=now - 5 * hour))
    rest, _ = backend.runs.list_runs(
        tenant, limit=5, next_token=token, where=RunFilter(created_before=now - 5 * hour)
    )
    assert [r.run_id for r in page + rest] == [evented, scheduled, oldest]


# --- Sessions ------------------------------------------------------------------------------------


def test_a_session_is_created_once_held_by_its_first_run(backend: Backend, tenant: str) -> None:
    created = backend.sessions.create(tenant, "ses_1", "agt_1", active_run_id="run_1", user_id="usr_1")

    found = backend.sessions.get(tenant, "ses_1")
    assert found == created
    assert (found.agent_id, found.user_id, found.active_run_id) == ("agt_1", "usr_1", "run_1")
    with pytest.raises(Conflict) as taken:  # never over an existing session
        backend.sessions.create(tenant, "ses_1", "agt_2")
    assert taken.value.code == "session_exists"
    assert backend.sessions.get(tenant, "ses_1").agent_id == "agt_1"
    with pytest.raises(NotFound) as caught:
        backend.sessions.get(f"{tenant}_other", "ses_1")
    assert caught.value.code == "session_not_found"


def test_one_run_at_a_time_claims_a_session(backend: Backend, tenant: str) -> None:
    backend.sessions.create(tenant, "ses_1", "agt_1")

    assert backend.sessions.claim(tenant, "ses_1", "run_1") is True
    assert backend.sessions.claim(tenant, "ses_1", "run_1") is True  # a retry of the winner
    assert backend.sessions.claim(tenant, "ses_1", "run_2") is False
    assert backend.sessions.get(tenant, "ses_1").active_run_id == "run_1"
    assert backend.sessions.claim(tenant, "ses_missing", "run_1") is False

    backend.sessions.release(tenant, "ses_1", "run_1")
    assert backend.sessions.claim(tenant, "ses_1", "run_2") is True


def test_a_run_is_queued_only_behind_an_active_run(backend: Backend, tenant: str) -> None:
    backend.sessions.create(tenant, "ses_1", "agt_1")

    assert backend.sessions.enqueue(tenant, "ses_1", "run_2") is False  # nobody to wait for: claim instead
    backend.sessions.claim(tenant, "ses_1", "run_1")
    assert backend.sessions.enqueue(tenant, "ses_1", "run_2") is True
    assert backend.sessions.enqueue(tenant, "ses_1", "run_3", first=True) is True  # an interrupt goes first

    assert backend.sessions.get(tenant, "ses_1").queue == ["run_3", "run_2"]
    assert backend.sessions.enqueue(tenant, "ses_missing", "run_2") is False


def message(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def test_messages_come_back_in_key_order_and_a_rewrite_replaces(backend: Backend, tenant: str) -> None:
    backend.sessions.create(tenant, "ses_1", "agt_1", active_run_id="run_1")
    put = backend.sessions.put_message
    put(tenant, "ses_1", "run_1", 2, ASSISTANT_SLOT, message("step 2"))
    put(tenant, "ses_1", "run_1", 1, tool_slot(1), message("second result"))
    put(tenant, "ses_1", "run_1", 1, ASSISTANT_SLOT, message("step 1"))
    put(tenant, "ses_1", "run_1", 1, tool_slot(0), message("first result"))
    put(tenant, "ses_1", "run_1", 0, USER_SLOT, message("draft"))
    put(tenant, "ses_1", "run_1", 0, USER_SLOT, message("question"))  # a retry rewrites its own key
    put(tenant, "ses_1", "run_12", 0, USER_SLOT, message("another run"))  # shares run_1's prefix

    texts = [m["content"] for m in backend.sessions.run_messages(tenant, "ses_1", "run_1")]

    assert texts == ["question", "step 1", "first result", "second result", "step 2"]


def test_history_holds_completed_runs_only_and_a_run_completes_once(backend: Backend, tenant: str) -> None:
    backend.sessions.create(tenant, "ses_1", "agt_1")
    backend.sessions.put_message(tenant, "ses_1", "run_a", 0, USER_SLOT, message("a"))
    backend.sessions.put_message(tenant, "ses_1", "run_b", 0, USER_SLOT, message("b (never completed)"))
    backend.sessions.put_message(tenant, "ses_1", "run_c", 0, USER_SLOT, message("c"))
    backend.sessions.complete_run(tenant, "ses_1", "run_a")
    backend.sessions.complete_run(tenant, "ses_1", "run_a")

    earlier, current = backend.sessions.history(tenant, "ses_1", "run_c")

    assert [m["content"] for m in earlier.messages] == ["a"]
    assert [m["content"] for m in current] == ["c"]
    assert backend.sessions.get(tenant, "ses_1").completed_runs == ["run_a"]
    backend.sessions.complete_run(tenant, "ses_gone", "run_a")  # no shell: nothing to record, no error
    with pytest.raises(NotFound):
        backend.sessions.history(tenant, "ses_gone", "run_a")


def later(days: int = 1) -> int:
    return int((utcnow() + timedelta(days=days)).timestamp())


def test_a_checkpoint_is_none_until_kept_and_never_kept_past_an_item(backend: Backend, tenant: str) -> None:
    assert backend.sessions.checkpoint(tenant, "ses_1", "run_1") is None

    old = Earlier([message("old")], [later()])
    assert backend.sessions.put_checkpoint(tenant, "ses_1", "run_1", old) is True
    huge = Earlier([message("x" * (CHECKPOINT_LIMIT + 1))], [later()])
    assert backend.sessions.put_checkpoint(tenant, "ses_1", "run_2", huge) is False

    assert backend.sessions.checkpoint(tenant, "ses_1", "run_1") == old
    assert backend.sessions.checkpoint(tenant, "ses_1", "run_2") is None
    assert backend.sessions.put_checkpoint(tenant, "ses_1", "run_3", Earlier()) is True
    assert backend.sessions.checkpoint(tenant, "ses_1", "run_3") == Earlier()  # empty, not absent


def test_a_checkpoint_drops_the_messages_whose_retention_ended(backend: Backend, tenant: str) -> None:
    past = int((utcnow() - timedelta(seconds=5)).timestamp())
    mixed = Earlier([message("gone"), message("kept")], [past, later()])

    backend.sessions.put_checkpoint(tenant, "ses_1", "run_1", mixed)

    found = backend.sessions.checkpoint(tenant, "ses_1", "run_1")
    assert [m["content"] for m in found.messages] == ["kept"]


def test_a_run_begins_with_the_last_completed_runs_checkpoint_and_messages(
    backend: Backend, tenant: str
) -> None:
    backend.sessions.create(tenant, "ses_1", "agt_1")
    assert backend.sessions.earlier_history(tenant, "ses_1", "run_b") == Earlier()  # no completed run
    backend.sessions.put_message(
        tenant, "ses_1", "run_0", 0, USER_SLOT, message("zero (not in a checkpoint)")
    )
    backend.sessions.complete_run(tenant, "ses_1", "run_0")
    backend.sessions.put_checkpoint(tenant, "ses_1", "run_a", Earlier([message("before a")], [later()]))
    backend.sessions.put_message(tenant, "ses_1", "run_a", 1, ASSISTANT_SLOT, message("a answers"))
    backend.sessions.put_message(tenant, "ses_1", "run_a", 0, USER_SLOT, message("a asks"))
    backend.sessions.complete_run(tenant, "ses_1", "run_a")

    folded = backend.sessions.earlier_history(tenant, "ses_1", "run_b")

    assert [m["content"] for m in folded.messages] == ["before a", "a asks", "a answers"]
    assert len(folded.expiries) == 3 and min(folded.expiries) > int(utcnow().timestamp())
    backend.sessions.put_message(tenant, "ses_1", "run_c", 0, USER_SLOT, message("c asks"))
    backend.sessions.complete_run(tenant, "ses_1", "run_c")  # completed without a checkpoint
    whole = backend.sessions.earlier_history(tenant, "ses_1", "run_d")
    assert [m["content"] for m in whole.messages] == [
        "zero (not in a checkpoint)",
        "a asks",
        "a answers",
        "c asks",
    ]


def test_releasing_a_session_hands_it_to_the_first_queued_run(backend: Backend, tenant: str) -> None:
    backend.sessions.create(tenant, "ses_1", "agt_1", active_run_id="run_1")
    assert backend.sessions.enqueue(tenant, "ses_1", "run_2") is True
    assert backend.sessions.enqueue(tenant, "ses_1", "run_3") is True

    assert backend.sessions.release(tenant, "ses_1", "run_3") is None  # only queued: taken out
    assert backend.sessions.release(tenant, "ses_1", "run_1") == "run_2"
    assert backend.sessions.release(tenant, "ses_1", "run_1") is None  # a repeat: no longer active
    assert backend.sessions.release(tenant, "ses_1", "run_2") is None

    session = backend.sessions.get(tenant, "ses_1")
    assert (session.active_run_id, session.queue) == (None, [])
    with pytest.raises(NotFound):
        backend.sessions.release(tenant, "ses_gone", "run_1")


# --- Agents --------------------------------------------------------------------------------------


def test_a_missing_agent_is_not_found_and_for_a_run_gone(backend: Backend, tenant: str) -> None:
    created = backend.agents.create(tenant, "agt_1", AgentCreate(name="helper", model="scripted/x"))

    assert backend.agents.get(tenant, "agt_1") == created
    assert backend.agents.get_for_run(tenant, "agt_1").name == "helper"
    with pytest.raises(NotFound) as caught:
        backend.agents.get(tenant, "agt_missing")
    assert caught.value.code == "agent_not_found"
    with pytest.raises(AgentGone):
        backend.agents.get_for_run(tenant, "agt_missing")


# --- Interactions --------------------------------------------------------------------------------


def pause(store: Backend, tenant_id: str, interaction_id: str, run_id: str = "run_1") -> Any:
    new = NewInteraction(
        interaction_id=interaction_id,
        run_id=run_id,
        session_id="ses_1",
        agent_id="agt_1",
        kind="client_tool",
        step=1,
        tool_call_id="call_1",
        tool_call_index=0,
        tool_name="ask",
        arguments={"q": "?"},
        digest=digest(tenant_id, "ask", {"q": "?"}),
        timeout_seconds=60,
    )
    return store.interactions.create(tenant_id, new)


def test_an_interaction_is_answered_or_closed_exactly_once(backend: Backend, tenant: str) -> None:
    first = pause(backend, tenant, "int_a")
    assert (first.status, first.has_token) == ("pending", False)
    assert first.digest == digest(tenant, "ask", {"q": "?"})

    assert backend.interactions.answer(tenant, "int_a", {"outcome": "completed"}, key="k", by=None) is True
    assert backend.interactions.answer(tenant, "int_a", {"outcome": "error"}, key="k2", by=None) is False
    assert backend.interactions.close(tenant, "int_a", "expired") is False
    answered = backend.interactions.get(tenant, "int_a")
    assert (answered.status, answered.answer) == ("answered", {"outcome": "completed"})
    assert pause(backend, tenant, "int_a").status == "answered"  # a retried create finds it as it is

    pause(backend, tenant, "int_b")
    assert backend.interactions.close(tenant, "int_b", "expired") is True
    assert backend.interactions.close(tenant, "int_b", "expired") is False
    assert backend.interactions.answer(tenant, "int_b", {"outcome": "completed"}, key="k", by=None) is False
    assert backend.interactions.get(tenant, "int_b").status == "expired"
    with pytest.raises(NotFound):
        backend.interactions.get(tenant, "int_missing")


def test_an_answer_records_its_key_and_author_and_its_delivery(backend: Backend, tenant: str) -> None:
    pause(backend, tenant, "int_a")
    assert backend.interactions.task_token(tenant, "int_a") is None  # the wait has not stored it yet
    backend.interactions.attach_token(tenant, "int_a", "token-1")

    assert backend.interactions.answer(tenant, "int_a", {"approved": True}, key="k", by="usr_1") is True

    answered = backend.interactions.get(tenant, "int_a")
    assert (answered.answer_key, answered.answered_by, answered.delivered) == ("k", "usr_1", False)
    assert answered.answered_at is not None
    assert backend.interactions.task_token(tenant, "int_a") == "token-1"
    backend.interactions.mark_delivered(tenant, "int_a")
    assert backend.interactions.get(tenant, "int_a").delivered is True
    with pytest.raises(NotFound):
        backend.interactions.task_token(tenant, "int_missing")


def test_a_runs_interactions_are_listed_by_status_and_take_a_token(backend: Backend, tenant: str) -> None:
    pause(backend, tenant, "int_b")
    pause(backend, tenant, "int_a")
    pause(backend, tenant, "int_c", run_id="run_other")
    backend.interactions.close(tenant, "int_b")

    assert [i.interaction_id for i in backend.interactions.for_run(tenant, "run_1")] == ["int_a", "int_b"]
    assert [i.interaction_id for i in backend.interactions.for_run(tenant, "run_1", "pending")] == ["int_a"]
    assert backend.interactions.attach_token(tenant, "int_a", "token-1").has_token is True
    assert backend.interactions.get(tenant, "int_a").has_token is True


# --- The event log -------------------------------------------------------------------------------


def test_appended_events_take_consecutive_seqs_across_batches(backend: Backend, tenant: str) -> None:
    assert backend.events.append(tenant, "run_1", []).events == []

    first = backend.events.append(tenant, "run_1", [("run_started", {"a": 1}), ("step_started", {"step": 1})])
    second = backend.events.append(tenant, "run_1", [("run_completed", {})])

    assert [e.seq for e in first.events] == [1, 2]
    assert [e.seq for e in second.events] == [3]
    assert first.followed is False
    logged = backend.events.after(tenant, "run_1", 0, 10)
    assert [(e.seq, e.type, e.data) for e in logged] == [
        (1, "run_started", {"a": 1}),
        (2, "step_started", {"step": 1}),
        (3, "run_completed", {}),
    ]
    assert [e.seq for e in backend.events.after(tenant, "run_1", 1, 1)] == [2]
    assert backend.events.append(tenant, "run_2", [("run_started", {})]).events[0].seq == 1


def test_the_head_holds_the_last_seq_handed_out_and_whether_it_is_terminal(
    backend: Backend, tenant: str
) -> None:
    assert backend.events.head(tenant, "run_1") is None  # before the run's first event

    backend.events.append(tenant, "run_1", [("run_started", {}), ("step_started", {"step": 1})])
    running = backend.events.head(tenant, "run_1")
    backend.events.append(tenant, "run_1", [("step_completed", {}), ("run_completed", {})])
    ended = backend.events.head(tenant, "run_1")

    assert (running.last_seq, running.done) == (2, False)
    assert running.moved_at is not None
    assert (ended.last_seq, ended.done) == (4, True)
    logged = backend.events.after(tenant, "run_1", 0, 10)
    assert [e.seq for e in logged] == list(range(1, ended.last_seq + 1))  # every seq up to the head
    assert backend.events.after(tenant, "run_1", ended.last_seq, 10) == []
    assert backend.events.head(f"{tenant}_other", "run_1") is None


def test_a_log_that_is_done_takes_no_more_events(backend: Backend, tenant: str) -> None:
    """Issue 30's soak: a step in flight when its run was cancelled appended its tool_result after
    run_cancelled and set `done` back to false, so followers of the ended run waited for ever."""
    backend.events.append(tenant, "run_1", [("run_started", {}), ("run_cancelled", {})])

    late = backend.events.append(tenant, "run_1", [("tool_result", {"tool_call_id": "c1"})])
    again = backend.events.append(tenant, "run_1", [("run_completed", {})])

    assert late.events == [] and again.events == []
    head = backend.events.head(tenant, "run_1")
    assert head is not None and (head.last_seq, head.done) == (2, True)
    logged = backend.events.after(tenant, "run_1", 0, 10)
    assert [e.type for e in logged] == ["run_started", "run_cancelled"]


def test_an_append_after_a_follower_is_counted_says_it_is_followed(backend: Backend, tenant: str) -> None:
    assert backend.events.followed(tenant, "run_1") == Head(last_seq=0, done=False, moved_at=None)
    assert backend.events.head(tenant, "run_1") == Head(last_seq=0, done=False, moved_at=None)

    first = backend.events.append(tenant, "run_1", [("run_started", {})])
    unfollowed = backend.events.append(tenant, "run_2", [("run_started", {})])
    again = backend.events.followed(tenant, "run_1")

    assert (first.followed, unfollowed.followed) == (True, False)
    assert [e.seq for e in first.events] == [1]  # counting a follower reserved no seq
    assert (again.last_seq, again.done) == (1, False)


# --- Described results ---------------------------------------------------------------------------


def test_a_described_result_is_read_back_in_its_own_session_only(backend: Backend, tenant: str) -> None:
    saved = backend.described.save(tenant, "ses_1", "run_1", "call_1", "a,b\n1,2", in_s3=False)

    assert saved is True
    assert backend.described.load(tenant, "ses_1", "call_1") == "a,b\n1,2"
    assert backend.described.load(tenant, "ses_2", "call_1") is None
    assert backend.described.load(f"{tenant}_other", "ses_1", "call_1") is None
    assert backend.described.load(tenant, "ses_1", "call_missing") is None


def test_a_result_too_large_for_an_item_is_kept_only_as_its_offloaded_text(
    backend: Backend, tenant: str
) -> None:
    text = "x" * (INLINE_BYTES + 1)

    assert backend.described.save(tenant, "ses_1", "run_1", "call_1", text, in_s3=False) is False
    assert backend.described.load(tenant, "ses_1", "call_1") is None

    assert backend.results.offload(tenant, "run_1", "call_2", text) is not None
    assert backend.described.save(tenant, "ses_1", "run_1", "call_2", text, in_s3=True) is True
    assert backend.described.load(tenant, "ses_1", "call_2") == text


# --- The effects ledger --------------------------------------------------------------------------


def test_a_ledger_entry_is_claimed_once_settled_by_its_generation_and_undone(
    backend: Backend, tenant: str
) -> None:
    scope = ledger.CallScope(
        tenant_id=tenant, agent_id="agt_1", run_id="run_1", trigger_id="run_1", step=1, tool_call_id="call_1"
    )
    key = ledger.call_key(scope, "send")

    won = backend.effects.claim(tenant, key, "send", "run_1", "call_1")
    lost = backend.effects.claim(tenant, key, "send", "run_1", "call_1")
    assert (won.won, won.entry.generation, won.entry.status) == (True, 1, "claimed")
    assert (lost.won, lost.entry.status) == (False, "claimed")

    assert backend.effects.settle(tenant, key.id, 2, "done", {"output": 1}, False) is False
    assert backend.effects.settle(tenant, key.id, 1, "done", {"output": 1}, False) is True
    assert backend.effects.settle(tenant, key.id, 1, "done", {"output": 2}, False) is False
    entry = backend.effects.get(tenant, key.id)
    assert (entry.status, entry.result) == ("done", {"output": 1})

    undone = ledger.mark_undone(tenant, key.id, "ops", store=backend.effects)
    assert (undone.status, undone.undone_by, len(undone.history)) == ("undone", "ops", 1)
    again = backend.effects.claim(tenant, key, "send", "run_1", "call_1")
    assert (again.won, again.entry.generation) == (True, 2)
    assert backend.effects.get(tenant, "call#missing") is None


def test_a_session_put_retried_after_its_answer_was_lost_is_the_same_new_session(stack: LocalStack) -> None:
    """Issue 30's soak: the retried put found the session it had made itself and POST /runs answered
    409 session_exists; another start's session with the same id is still a conflict."""
    session_id = ids.new_id("ses")
    with answer_lost_once("PutItem", "SessionsTable") as lost:
        made = sessions.create(DEFAULT_TENANT, session_id, "agt_a", active_run_id="run_a")

    assert lost, "the fault was not injected"
    assert sessions.get(DEFAULT_TENANT, session_id).created_at == made.created_at
    with pytest.raises(Conflict):
        sessions.create(DEFAULT_TENANT, session_id, "agt_a", active_run_id="run_b")


@pytest.fixture(params=["fake", "dynamodb"])
def keys(request: pytest.FixtureRequest) -> Any:
    if request.param == "fake":
        return FakeStores().start_keys
    request.getfixturevalue("stack")
    return start_keys


def test_a_start_key_holds_the_first_run_until_it_is_moved_from_it(keys: Any) -> None:
    tenant, other = f"t_{uuid.uuid4().hex[:12]}", f"t_{uuid.uuid4().hex[:12]}"

    assert keys.claim(tenant, "k", "run_a") == "run_a"
    assert keys.claim(tenant, "k", "run_b") == "run_a"  # a retry finds the first attempt's run
    assert keys.claim(other, "k", "run_c") == "run_c"  # another tenant's key is another key
    assert keys.claim(tenant, "k2", "run_d") == "run_d"

    assert keys.move(tenant, "k", "run_a", "run_e") == "run_e"
    assert keys.move(tenant, "k", "run_a", "run_f") == "run_e"  # a concurrent retry moved it first
    assert keys.claim(tenant, "k", "run_g") == "run_e"


@pytest.mark.parametrize("operation", ["PutItem", "UpdateItem"])
def test_a_start_key_write_retried_after_its_answer_was_lost_is_its_own(
    stack: LocalStack, operation: str
) -> None:
    """botocore retries the write, whose condition its own first attempt now fails: the id read back is
    the one it wrote."""
    tenant = f"t_{uuid.uuid4().hex[:12]}"
    if operation == "UpdateItem":
        start_keys.claim(tenant, "k", "run_a")
    with answer_lost_once(operation, "IdempotencyTable") as lost:
        held = (
            start_keys.claim(tenant, "k", "run_a")
            if operation == "PutItem"
            else start_keys.move(tenant, "k", "run_a", "run_b")
        )

    assert lost, "the fault was not injected"
    assert held == ("run_a" if operation == "PutItem" else "run_b")


def test_an_answer_retried_after_its_answer_was_lost_still_wins(stack: LocalStack) -> None:
    """Issue 30's soak: the retried update failed the `pending` condition its own first attempt had met,
    so the winning answer was told it lost (the approver a 409, a child's parent never resumed)."""
    tenant = f"t_{uuid.uuid4().hex[:12]}"
    store = Backend(runs, run_context, sessions, agents, interactions, effects, events, results, described)
    pause(store, tenant, "int_a")
    with answer_lost_once("UpdateItem", "InteractionsTable") as lost:
        won = interactions.answer(tenant, "int_a", {"outcome": "completed"}, key="k", by="run_child")

    assert lost, "the fault was not injected"
    assert won is True
    assert interactions.answer(tenant, "int_a", {"outcome": "error"}, key="k2", by="run_other") is False
    assert interactions.get(tenant, "int_a").answered_by == "run_child"


def test_descendants_usage_is_added_once_per_key(backend: Backend, tenant: str) -> None:
    new_run(tenant, backend)
    end(backend, tenant, "run_1", "cancelled")
    spent = Usage(input_tokens=100, output_tokens=10)

    assert backend.runs.add_descendants_usage(tenant, "run_1", spent, key="report:run_c") is True
    assert backend.runs.add_descendants_usage(tenant, "run_1", spent, key="report:run_c") is True  # again
    assert backend.runs.add_descendants_usage(tenant, "run_1", spent, key="report:run_d") is True

    assert backend.runs.get(tenant, "run_1").descendants_usage.input_tokens == 200


@pytest.mark.parametrize(("operation", "add"), [("UpdateItem", "descendants"), ("TransactWriteItems", "own")])
def test_an_ended_runs_usage_retried_after_its_answer_was_lost_counts_once(
    stack: LocalStack, operation: str, add: str
) -> None:
    """Issue 30's soak: a late addition whose answer was lost was applied again by botocore's retry
    (a plain ADD, or a read-then-write loop that read its own first write), so a tree counted twice."""
    tenant = f"t_{uuid.uuid4().hex[:12]}"
    runs.create(tenant, a_run())
    assert runs.transition(tenant, "run_1", "cancelled", allowed_from=ACTIVE_STATUSES)
    spent = Usage(input_tokens=100, output_tokens=10)
    with answer_lost_once(operation, "RunsTable") as lost:
        if add == "own":
            assert runs.add_usage(tenant, "run_1", spent, []) is True
        else:
            assert runs.add_descendants_usage(tenant, "run_1", spent, key="late:run_c:1") is True

    assert lost, "the fault was not injected"
    ended = runs.get(tenant, "run_1")
    counted = ended.usage if add == "own" else ended.descendants_usage
    assert (counted.input_tokens, counted.output_tokens) == (100, 10)


def test_a_context_write_retried_after_its_answer_was_lost_is_its_own(stack: LocalStack) -> None:
    """Issue 30's soak: botocore's retry of an applied context write failed its version condition, and
    the Step stopped with ContextMovedOn as if another step had moved the run on (the run then failed);
    a stale copy of the same version is still refused."""
    tenant = f"t_{uuid.uuid4().hex[:12]}"
    first = run_context.save(tenant, "run_1", RunContext(steps=1, prepared=True))
    with answer_lost_once("UpdateItem", "RunEventsTable") as lost:
        second = run_context.save(tenant, "run_1", first.model_copy(update={"steps": 2}))

    assert lost, "the fault was not injected"
    assert second.version == 2 and run_context.load(tenant, "run_1").steps == 2
    with pytest.raises(RunStateError):
        run_context.save(tenant, "run_1", first.model_copy(update={"steps": 9}))


def test_an_oauth_start_link_and_callback_retried_after_their_answers_were_lost_are_their_own(
    stack: LocalStack,
) -> None:
    """The flow's binding and spending are conditional writes; botocore's retry of one that was applied
    (its answer lost) failed its own condition, so the person's first open answered 410 and their
    callback 403. Another browser's callback is still refused."""
    from stepwise.mcp.authorization import StateRejected, open_flow, state_hash, take
    from stepwise.mcp.grants import DynamoGrantStore
    from tests.fakes.grant_store import pending

    store = DynamoGrantStore()
    state = f"s_{uuid.uuid4().hex}"
    store.put_pending(state_hash(state), pending(timedelta(minutes=10)))
    with answer_lost_once("UpdateItem", "McpAuthTable") as lost_open:
        nonce = open_flow(store, state).cookie.value
    with pytest.raises(StateRejected):
        take(store, state, "another-browser")
    with answer_lost_once("UpdateItem", "McpAuthTable") as lost_take:
        taken = take(store, state, nonce)

    assert lost_open and lost_take, "the faults were not injected"
    assert taken.tenant_id == "t1"
    with pytest.raises(StateRejected) as again:
        take(store, state, nonce)
    assert again.value.problem == "used"
