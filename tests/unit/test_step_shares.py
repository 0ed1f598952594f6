"""A tenant's step shares around the Step's work (stepwise.runs.shares, through stepwise.loop.step's
entry): taken before anything else, kept while the run goes on, given back when it pauses or ends."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stepwise.core import config
from stepwise.core.errors import TenantStepsBusy
from stepwise.loop.step import handle
from stepwise.runs import ports
from stepwise.runs.state import RunState
from tests.fakes.stores import FakeShares, FakeStores
from tests.unit.test_loop_with_fakes import ASK, T, seed, state


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeStores]:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    monkeypatch.setenv("STEPWISE_STEP_SHARE", "1")
    config.reset()
    fakes = FakeStores(shares=FakeShares())
    with ports.using(fakes.stores()):
        yield fakes
    monkeypatch.undo()
    config.reset()


def held(fakes: FakeStores) -> dict[str, int]:
    assert fakes.shares is not None
    return fakes.shares.holders.get(T, {})


def test_a_step_past_the_tenants_share_is_refused_before_it_does_anything(fakes: FakeStores) -> None:
    busy = seed(fakes, [{"text": "never reached"}])
    other = seed(fakes, [{"text": "Blue."}])
    assert fakes.shares is not None and fakes.shares.take(T, busy.run_id, limit=1, until=1 << 40, now=0)

    with pytest.raises(TenantStepsBusy):
        handle(state(other).model_dump())

    assert fakes.runs.get(T, other.run_id).status == "queued"  # untouched: the retry starts afresh
    assert fakes.run_context.load(T, other.run_id).version == 0
    fakes.shares.give_back(T, busy.run_id)
    assert RunState.model_validate(handle(state(other).model_dump())).action == "done"
    assert held(fakes) == {}  # its ending gave it back


def test_the_share_is_kept_while_the_run_goes_on_and_given_back_when_it_pauses(fakes: FakeStores) -> None:
    run = seed(
        fakes,
        [
            {"tool_calls": [{"name": "no_such_tool", "arguments": {}}]},  # refused at once: it goes on
            {"tool_calls": [{"name": "ask_user", "arguments": {"q": "colour?"}}]},
        ],
        [ASK],
    )

    first = RunState.model_validate(handle(state(run).model_dump()))

    assert first.action == "continue" and first.share_until is not None
    assert held(fakes) == {run.run_id: first.share_until}
    second = RunState.model_validate(handle(first.model_dump()))  # the share it holds: no new take
    assert second.action == "wait" and second.share_until is None
    assert held(fakes) == {}
