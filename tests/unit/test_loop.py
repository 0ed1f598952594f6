"""The loop's pure parts: how a step's calls are batched, the doom-loop check, the order results
join the conversation."""

from typing import Any

import pytest

from stepwise.core.errors import DoomLoop
from stepwise.core.schema import utcnow
from stepwise.llm.client import ModelTurn, ToolCallOut
from stepwise.llm.models import Usage
from stepwise.loop.model_call import DOOM_LOOP_REPEATS, check_doom_loop
from stepwise.loop.step import _add_results, _answered_ids, _batches
from stepwise.loop.working import Working
from stepwise.runs.models import Run
from stepwise.runs.state import CallRef, RunContext


def ref(index: int, safe: bool) -> CallRef:
    return CallRef(id=f"c{index}", name="read" if safe else "write", index=index, parallel_safe=safe)


def turn(*calls: tuple[str, dict[str, Any]]) -> ModelTurn:
    return ModelTurn(
        text=None,
        tool_calls=[ToolCallOut(id=f"id{i}", name=n, arguments=a) for i, (n, a) in enumerate(calls)],
        usage=Usage(),
        finish_reason="tool_calls",
    )


def working(current: list[dict[str, Any]]) -> Working:
    run = Run(run_id="run_1", agent_id="a", session_id="s", status="running", input="q", created_at=utcnow())
    return Working(run=run, version=1, current=current)


def test_consecutive_parallel_safe_calls_share_a_batch_and_others_stand_alone() -> None:
    pending = [ref(0, True), ref(1, True), ref(2, False), ref(3, True), ref(4, False), ref(5, False)]

    batches = _batches(pending)

    assert [[r.index for r in b] for b in batches] == [[0, 1], [2], [3], [4], [5]]


def test_the_same_call_three_times_in_a_row_across_steps_is_a_doom_loop() -> None:
    context = RunContext()
    for _ in range(DOOM_LOOP_REPEATS - 1):
        context = check_doom_loop(context, turn(("lookup", {"q": "x", "n": 1})))

    with pytest.raises(DoomLoop, match="lookup"):
        check_doom_loop(context, turn(("lookup", {"n": 1, "q": "x"})))  # key order does not matter


def test_three_identical_calls_in_one_step_are_a_loop_but_varied_ones_are_not() -> None:
    with pytest.raises(DoomLoop):
        check_doom_loop(RunContext(), turn(*[("lookup", {"q": "x"})] * 3))

    varied = check_doom_loop(RunContext(), turn(("lookup", {"q": "x"}), ("lookup", {"q": "y"})))
    varied = check_doom_loop(varied, turn(("lookup", {"q": "x"})))
    assert len(varied.recent_calls) == DOOM_LOOP_REPEATS  # only the latest are kept


def test_results_join_the_conversation_in_the_models_order_whenever_they_arrive() -> None:
    context = RunContext(calls=[ref(0, True), ref(1, True), ref(2, True)])
    assistant = {"role": "assistant", "content": None, "tool_calls": []}
    work = working([{"role": "user", "content": "q"}, assistant])

    _add_results(
        work, context, [{"role": "tool", "tool_call_id": "c2"}, {"role": "tool", "tool_call_id": "c0"}]
    )
    _add_results(work, context, [{"role": "tool", "tool_call_id": "c1"}])  # a waited call, answered later

    assert [m.get("tool_call_id") for m in work.current] == [None, None, "c0", "c1", "c2"]
    assert _answered_ids(work) == {"c0", "c1", "c2"}


def test_only_the_current_steps_results_count_as_answered() -> None:
    work = working(
        [
            {"role": "assistant", "tool_calls": [{"id": "old"}]},
            {"role": "tool", "tool_call_id": "old"},
            {"role": "assistant", "tool_calls": [{"id": "new"}]},
        ]
    )

    assert _answered_ids(work) == set()


def test_a_failed_step_leaves_no_conversation_in_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    from stepwise.loop import step as step_module
    from stepwise.loop import working as working_module
    from stepwise.runs.state import RunState

    work = working([{"role": "user", "content": "q"}])
    working_module.keep("t1", work, 3)

    def half_done(state: RunState) -> RunState:
        work.current.append({"role": "assistant", "content": "said before the crash"})
        raise RuntimeError("the store is unavailable")

    monkeypatch.setattr(step_module, "_step", half_done)
    with pytest.raises(RuntimeError):
        step_module.step(RunState(tenant_id="t1", run_id="run_1"))

    assert ("t1", "run_1") not in working_module._cache
