"""The loop's modules against in-memory stores (tests/fakes/stores.py), no moto: the working
conversation's cache and rebuild, whole steps of a run with the scripted model, its waits, its ending
and its failures. tests/integration/test_store_ports.py holds the fakes to the DynamoDB stores."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from stepwise.agents.models import AgentCreate
from stepwise.core.errors import AgentGone, NotFound, RunStateError
from stepwise.core.schema import utcnow
from stepwise.interactions.models import NewInteraction
from stepwise.llm.models import ScriptTurn, Usage
from stepwise.loop import await_, working
from stepwise.loop.step import step, sync_answer
from stepwise.runs import delegation, ending, ports
from stepwise.runs.ending import end_run
from stepwise.runs.models import Run, RunError
from stepwise.runs.state import CallRef, RunContext, RunState, Wait
from stepwise.sessions.models import USER_SLOT, Earlier
from stepwise.tools.models import ClientTool
from tests.fakes.stores import FakeRunContexts, FakeStores

T = "t1"
ASK = ClientTool(
    type="client",
    name="ask_user",
    description="Ask the person at the keyboard",
    input_schema={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
)


@pytest.fixture(autouse=True)
def _no_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's ending records metrics, which need the namespace Lambda's environment gives them."""
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")


@pytest.fixture
def fakes() -> Iterator[FakeStores]:
    fakes = FakeStores()
    with ports.using(fakes.stores()):
        yield fakes


def seed(
    fakes: FakeStores, script: list[dict[str, Any]], tools: list[Any] | None = None, max_steps: int = 5
) -> Run:
    """An agent on the scripted model, its session and a queued run (fresh ids: the cache is global)."""
    suffix = uuid.uuid4().hex[:10]
    agent_id, session_id, run_id = f"agt_{suffix}", f"ses_{suffix}", f"run_{suffix}"
    fakes.agents.create(T, agent_id, AgentCreate(name="helper", model="scripted/x", tools=tools or []))
    fakes.sessions.create(T, session_id, agent_id, active_run_id=run_id)
    run = Run(
        run_id=run_id,
        agent_id=agent_id,
        session_id=session_id,
        status="queued",
        input="What is the colour of the sky?",
        max_steps=max_steps,
        script=[ScriptTurn.model_validate(turn) for turn in script],
        created_at=utcnow(),
    )
    return fakes.runs.create(T, run)


def state(run: Run) -> RunState:
    return RunState(tenant_id=T, run_id=run.run_id, max_steps=run.max_steps)


def types(fakes: FakeStores, run: Run) -> list[str]:
    return [t for t in fakes.events.types(T, run.run_id) if t != "chunk"]


def roles(fakes: FakeStores, run: Run) -> list[str]:
    return [m["role"] for m in fakes.sessions.run_messages(T, run.session_id, run.run_id)]


# --- The working conversation ----------------------------------------------------------------------


def conversation(fakes: FakeStores) -> Run:
    """A session with a completed run, one that never completed, and the run under test with its question."""
    run = seed(fakes, [{"text": "blue"}])
    put = fakes.sessions.put_message
    put(T, run.session_id, "run_a", 0, USER_SLOT, {"role": "user", "content": "earlier question"})
    put(T, run.session_id, "run_a", 1, "1", {"role": "assistant", "content": "earlier answer"})
    put(T, run.session_id, "run_b", 0, USER_SLOT, {"role": "user", "content": "abandoned"})
    fakes.sessions.complete_run(T, run.session_id, "run_a")
    put(T, run.session_id, run.run_id, 0, USER_SLOT, {"role": "user", "content": run.input})
    return run


def contents(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m["content"]) for m in messages]


def later() -> int:
    return int((utcnow() + timedelta(days=1)).timestamp())


def test_the_first_step_folds_the_last_completed_run_into_its_checkpoint(fakes: FakeStores) -> None:
    run = conversation(fakes)
    before = Earlier([{"role": "user", "content": "before run_a"}], [later()])
    fakes.sessions.put_checkpoint(T, run.session_id, "run_a", before)

    work = working.load(T, run.run_id, 0)

    assert contents(work.earlier.messages) == ["before run_a", "earlier question", "earlier answer"]
    assert work.current == []  # the first step writes the run's question itself
    assert work.run.run_id == run.run_id and work.version == 0


def test_the_first_step_reads_the_session_when_the_last_run_kept_no_checkpoint(fakes: FakeStores) -> None:
    run = conversation(fakes)

    work = working.load(T, run.run_id, 0)

    assert contents(work.earlier.messages) == ["earlier question", "earlier answer"]


def test_a_later_miss_rebuilds_from_the_checkpoint_and_the_runs_own_messages(fakes: FakeStores) -> None:
    run = conversation(fakes)
    found = Earlier([{"role": "user", "content": "as found"}], [later()])
    fakes.sessions.put_checkpoint(T, run.session_id, run.run_id, found)

    work = working.load(T, run.run_id, 3)

    # The checkpoint, not the session: run_a's messages are not read again.
    assert contents(work.earlier.messages) == ["as found"]
    assert contents(work.current) == [run.input]


def test_a_later_miss_without_a_checkpoint_reads_the_session(fakes: FakeStores) -> None:
    run = conversation(fakes)

    work = working.load(T, run.run_id, 3)

    assert contents(work.earlier.messages) == ["earlier question", "earlier answer"]
    assert contents(work.current) == [run.input]


def test_a_cache_hit_reads_no_store_and_another_version_misses(fakes: FakeStores) -> None:
    run = conversation(fakes)
    work = working.load(T, run.run_id, 0)
    working.keep(T, work, 4)
    del fakes.runs.items[(T, run.run_id)]  # any read of the store would now fail

    try:
        assert working.load(T, run.run_id, 4) is work
        with pytest.raises(NotFound):
            working.load(T, run.run_id, 5)  # another function wrote version 5: rebuilt from the store
    finally:
        working.forget(T, run.run_id)


def test_the_first_step_keeps_the_earlier_runs_as_the_checkpoint_a_miss_rebuilds_from(
    fakes: FakeStores,
) -> None:
    run = seed(fakes, [{"tool_calls": [{"name": "nope", "arguments": {}}]}, {"text": "done"}], [ASK])
    earlier = [{"role": "user", "content": "before"}, {"role": "assistant", "content": "then"}]
    for slot, message in zip((USER_SLOT, "1"), earlier, strict=True):
        fakes.sessions.put_message(T, run.session_id, "run_a", 0, slot, message)
    fakes.sessions.complete_run(T, run.session_id, "run_a")

    step(state(run))
    kept = working.load(T, run.run_id, 1)
    working.forget(T, run.run_id)  # the next step lands on another function
    rebuilt = working.load(T, run.run_id, 1)

    kept_checkpoint = fakes.sessions.checkpoint(T, run.session_id, run.run_id)
    assert kept_checkpoint is not None and kept_checkpoint.messages == earlier
    assert (rebuilt.earlier, rebuilt.current) == (kept.earlier, kept.current)
    assert [m["role"] for m in rebuilt.current] == ["user", "assistant", "tool"]


# --- Whole steps -----------------------------------------------------------------------------------


def test_an_unknown_tool_is_answered_at_the_gate_and_the_next_answer_ends_the_run(fakes: FakeStores) -> None:
    # The agent declares a tool (the scripted model answers in text without any), not the one called.
    nope = {"tool_calls": [{"name": "nope", "arguments": {"x": 1}}]}
    run = seed(fakes, [nope, {"text": "It is blue."}], [ASK])

    first = step(state(run))

    assert (first.action, first.step) == ("continue", 1)
    messages = fakes.sessions.run_messages(T, run.session_id, run.run_id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    (call,) = messages[1]["tool_calls"]
    assert call["function"]["name"] == "nope"
    assert messages[2]["tool_call_id"] == call["id"]
    assert "unknown_tool" in messages[2]["content"]
    context = fakes.run_context.load(T, run.run_id)
    assert (context.version, context.prepared, context.steps) == (1, True, 1)
    assert context.calls == [CallRef(id=call["id"], name="nope", index=0, parallel_safe=False)]
    assert (context.next_call, context.tools_executed, context.waits) == (1, [], [])
    assert fakes.runs.get(T, run.run_id).status == "running"
    assert types(fakes, run) == ["run_started", "step_started", "step_completed", "tool_call", "tool_result"]
    result = fakes.events.events(T, run.run_id)[-1]
    assert result.data["tool_call_id"] == call["id"] and result.data["error"]["code"] == "unknown_tool"

    second = step(state(run))

    assert (second.action, second.step) == ("done", 2)
    ended = fakes.runs.get(T, run.run_id)
    assert (ended.status, ended.output, ended.steps, ended.tools_executed) == (
        "succeeded",
        "It is blue.",
        2,
        [],
    )
    assert ended.usage.input_tokens > 0 and ended.finished_at is not None
    assert roles(fakes, run) == ["user", "assistant", "tool", "assistant"]
    assert types(fakes, run)[-3:] == ["step_started", "step_completed", "run_completed"]
    terminal = fakes.events.events(T, run.run_id)[-1]
    assert terminal.data["output"] == "It is blue." and terminal.data["steps"] == 2
    session = fakes.sessions.get(T, run.session_id)
    assert (session.completed_runs, session.active_run_id) == ([run.run_id], None)
    assert fakes.run_context.load(T, run.run_id).ended is True
    with pytest.raises(RunStateError, match="has ended"):
        step(state(run))


def test_a_client_tool_waits_then_its_answer_is_the_calls_result(fakes: FakeStores) -> None:
    run = seed(
        fakes,
        [{"tool_calls": [{"name": "ask_user", "arguments": {"q": "colour?"}}]}, {"text": "Blue."}],
        [ASK],
    )

    paused = step(state(run))

    assert paused.action == "wait" and paused.wait is not None
    wait = paused.wait
    assert (wait.kind, wait.timeout_seconds) == ("client_tool", 3600)
    assert wait.interaction_id == f"int_{run.run_id.removeprefix('run_')}_1_0"
    interaction = fakes.interactions.get(T, wait.interaction_id)
    assert (interaction.status, interaction.tool_name, interaction.arguments) == (
        "pending",
        "ask_user",
        {"q": "colour?"},
    )
    assert fakes.run_context.load(T, run.run_id).waits == [wait]
    assert roles(fakes, run) == ["user", "assistant"]  # no result until the app answers

    notified = await_.handle(
        {"tenant_id": T, "run_id": run.run_id, "step": 1, "wait": wait.model_dump(), "task_token": "tok-1"}
    )

    assert notified == {"interaction_id": wait.interaction_id, "status": "pending"}
    assert fakes.runs.get(T, run.run_id).status == "waiting"
    assert fakes.interactions.get(T, wait.interaction_id).has_token is True
    assert fakes.interactions.tokens[(T, wait.interaction_id)] == "tok-1"
    requested = fakes.events.events(T, run.run_id)[-1]
    assert requested.type == "client_tool_requested" and requested.data["arguments"] == {"q": "colour?"}

    answer = {"tool_call_id": wait.tool_call_id, "outcome": "completed", "output": "blue"}
    assert fakes.interactions.answer(T, wait.interaction_id, answer, key="k1", by=None)
    finished = step(state(run))

    assert finished.action == "done"
    messages = fakes.sessions.run_messages(T, run.session_id, run.run_id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[2]["tool_call_id"] == wait.tool_call_id and "blue" in messages[2]["content"]
    ended = fakes.runs.get(T, run.run_id)
    assert (ended.status, ended.output, ended.tools_executed) == ("succeeded", "Blue.", [])


def test_a_wait_with_no_answer_expires_into_a_timeout_result(fakes: FakeStores) -> None:
    run = seed(
        fakes,
        [{"tool_calls": [{"name": "ask_user", "arguments": {"q": "?"}}]}, {"text": "No answer."}],
        [ASK],
    )
    paused = step(state(run))
    assert paused.wait is not None

    step(state(run))  # Await's timeout sent the run back to Step

    assert fakes.interactions.get(T, paused.wait.interaction_id).status == "expired"
    tool = fakes.sessions.run_messages(T, run.session_id, run.run_id)[2]
    assert tool["role"] == "tool" and "timeout" in tool["content"]
    assert fakes.runs.get(T, run.run_id).status == "succeeded"


class RacingContexts(FakeRunContexts):
    """Another function writes the run's next version right after a step reads the context."""

    def __init__(self) -> None:
        super().__init__()
        self.race = False

    def load(self, tenant_id: str, run_id: str) -> RunContext:
        context = super().load(tenant_id, run_id)
        if self.race:
            self.race = False
            super().save(tenant_id, run_id, context)
        return context


def test_a_stale_context_version_stops_the_step_and_forgets_the_cache() -> None:
    contexts = RacingContexts()
    fakes = FakeStores(run_context=contexts)
    with ports.using(fakes.stores()):
        run = seed(fakes, [{"tool_calls": [{"name": "nope", "arguments": {}}]}, {"text": "late"}], [ASK])
        step(state(run))
        cached = working.load(T, run.run_id, 1)
        assert working.load(T, run.run_id, 1) is cached  # the step kept its conversation

        contexts.race = True
        with pytest.raises(RunStateError, match="moved on"):
            step(state(run))

        assert working.load(T, run.run_id, 1) is not cached  # rebuilt from the store, not the cache
        assert fakes.run_context.load(T, run.run_id).version == 2  # the other writer's
        assert fakes.runs.get(T, run.run_id).status == "running"
        assert "run_completed" not in types(fakes, run)
        working.forget(T, run.run_id)


def test_a_deleted_agent_fails_the_sync_run_with_its_code(fakes: FakeStores) -> None:
    run = seed(fakes, [{"text": "never said"}], max_steps=1)
    fakes.agents.delete(T, run.agent_id)

    with pytest.raises(AgentGone):
        sync_answer(T, run.run_id)

    failed = fakes.runs.get(T, run.run_id)
    assert failed.status == "failed" and failed.error is not None
    assert failed.error.code == "agent_not_found" and "was deleted" in failed.error.message
    assert types(fakes, run) == ["run_failed"]
    assert fakes.events.events(T, run.run_id)[-1].data["error"]["code"] == "agent_not_found"


def test_ending_a_waiting_run_closes_its_pauses_once(fakes: FakeStores) -> None:
    run = seed(fakes, [{"tool_calls": [{"name": "ask_user", "arguments": {"q": "?"}}]}], [ASK])
    paused = step(state(run))
    assert isinstance(paused.wait, Wait)
    reason = RunError(code="cancelled", message="stopped by the user")

    assert end_run(T, run.run_id, "cancelled", error=reason) is True
    assert end_run(T, run.run_id, "failed", error=reason) is False

    assert fakes.interactions.get(T, paused.wait.interaction_id).status == "expired"
    assert fakes.runs.get(T, run.run_id).status == "cancelled"
    assert types(fakes, run).count("run_cancelled") == 1 and "run_failed" not in types(fakes, run)
    assert fakes.events.events(T, run.run_id)[-1].data["reason"] == "stopped by the user"
    assert fakes.sessions.get(T, run.session_id).active_run_id is None
    assert fakes.sessions.get(T, run.session_id).completed_runs == []  # only a success joins the history


class Died(BaseException):
    """The Lambda process dying: nothing in the ending catches it."""


@pytest.mark.parametrize("dies_in", ["_stop_children", "_call_back"])
def test_an_ending_whose_writer_died_midway_is_finished_by_the_next_ending(
    fakes: FakeStores, monkeypatch: pytest.MonkeyPatch, dies_in: str
) -> None:
    """Issue 30's soak: a Step killed between the terminal transition and the terminal event left a run
    succeeded with no run_completed, and a delegated child's parent waiting for ever; the retried
    Step's Failed state lost the transition and only handed the session on. Killed before the event
    (`_stop_children`), the next ending does it all; killed after it (`_call_back`), it tells the
    waiters again (OnRunComplete then stays unfired: at most once)."""
    run = seed(fakes, [{"tool_calls": [{"name": "ask_user", "arguments": {"q": "?"}}]}], [ASK])
    paused = step(state(run))
    assert isinstance(paused.wait, Wait)
    fired: list[str] = []
    called_back: list[str] = []
    monkeypatch.setattr(ending, "_on_run_complete", lambda *args: fired.append(args[3]))
    monkeypatch.setattr(ending, "_call_back", lambda run, status, error: called_back.append(status))
    healthy = getattr(ending, dies_in)

    def dies(*args: Any) -> None:
        raise Died

    monkeypatch.setattr(ending, dies_in, dies)
    reason = RunError(code="cancelled", message="stopped by the user")
    with pytest.raises(Died):
        end_run(T, run.run_id, "cancelled", error=reason)
    assert fakes.runs.get(T, run.run_id).status == "cancelled"
    assert called_back == []

    monkeypatch.setattr(ending, dies_in, healthy)
    failure = RunError(code="RunStateError", message="the retried Step found the run ended")
    assert end_run(T, run.run_id, "failed", error=failure) is False  # the Failed state after the retry

    assert types(fakes, run).count("run_cancelled") == 1 and "run_failed" not in types(fakes, run)
    assert fakes.events.events(T, run.run_id)[-1].data["reason"] == "stopped by the user"
    assert fakes.interactions.get(T, paused.wait.interaction_id).status == "expired"
    assert fakes.sessions.get(T, run.session_id).active_run_id is None
    assert called_back == ["cancelled"]
    assert fired == (["cancelled"] if dies_in == "_stop_children" else [])

    assert end_run(T, run.run_id, "failed", error=failure) is False  # a third ending changes nothing new
    assert types(fakes, run).count("run_cancelled") == 1
    assert fired == (["cancelled"] if dies_in == "_stop_children" else [])


def test_a_childs_report_sent_again_counts_its_usage_on_an_ended_parent_once(fakes: FakeStores) -> None:
    """The follow-through of an ending may run twice (its writer died, then `settle`): a child whose
    parent ended first adds its spend to the parent's tree once, and never answers the closed wait."""
    parent = seed(fakes, [{"text": "done"}])
    wait = fakes.interactions.create(
        T,
        NewInteraction(
            interaction_id=f"int_{parent.run_id}",
            run_id=parent.run_id,
            session_id=parent.session_id,
            agent_id=parent.agent_id,
            kind="delegation",
            step=1,
            tool_call_id="call_1",
            tool_call_index=0,
            tool_name="ask_child",
            arguments={"message": "go"},
            digest="d",
            timeout_seconds=60,
        ),
    )
    assert fakes.runs.transition(T, parent.run_id, "cancelled", allowed_from={"queued"})
    fakes.interactions.close(T, wait.interaction_id, "expired")
    child = fakes.runs.create(
        T,
        parent.model_copy(
            update={
                "run_id": f"{parent.run_id}_c",
                "parent_run_id": parent.run_id,
                "root_run_id": parent.run_id,
                "parent_interaction_id": wait.interaction_id,
                "usage": Usage(input_tokens=300, output_tokens=30),
            }
        ),
    )
    assert fakes.runs.transition(T, child.run_id, "cancelled", allowed_from={"queued"})

    delegation.report(T, child)
    delegation.report(T, child)

    assert fakes.runs.get(T, parent.run_id).descendants_usage.input_tokens == 300
    assert fakes.interactions.get(T, wait.interaction_id).status == "expired"
