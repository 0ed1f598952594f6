"""`eventually`, the tests' one wait: on a fake clock, so what it waits for is exact and nothing flakes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests import eventually as module
from tests.eventually import eventually


class Clock:
    """Stands in for the module's `time`: sleeping moves the clock on at once."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(module, "time", fake)
    return fake


def answers(*values: Any) -> Callable[[], Any]:
    """A probe that answers `values` in turn, raising those that are exceptions."""
    remaining: Iterator[Any] = iter(values)

    def probe() -> Any:
        value = next(remaining)
        if isinstance(value, BaseException):
            raise value
        return value

    return probe


def test_it_returns_the_first_truthy_value_and_asks_no_more(clock: Clock) -> None:
    # Given a probe that is not ready three times (falsy each way), then is
    probe = answers(None, 0, [], {"status": "done"}, "never asked")

    # When waiting on it
    found = eventually(probe, timeout=10, interval=0.5, what="the run")

    # Then the first truthy value comes back, after a sleep of the interval between each ask
    assert found == {"status": "done"}
    assert clock.slept == [0.5, 0.5, 0.5]


def test_a_probe_asserting_is_not_ready_yet(clock: Clock) -> None:
    probe = answers(AssertionError("still running"), AssertionError("still running"), 42)

    assert eventually(probe, timeout=10, what="the answer") == 42
    assert len(clock.slept) == 2


def test_at_the_timeout_it_names_what_it_waited_for_and_the_last_value(clock: Clock) -> None:
    # Given a probe that is never ready
    probe = answers(*[[] for _ in range(10)], ["late"])

    # When waiting a second for it, asking every quarter
    with pytest.raises(AssertionError) as timed_out:
        eventually(probe, timeout=1, interval=0.25, what="the queue to fill")

    # Then it asked at 0, 0.25, 0.5, 0.75 and 1 s, then gave up saying what it waited for and saw
    assert str(timed_out.value) == "waited 1 s for the queue to fill; last: []"
    assert clock.slept == [0.25] * 4


def test_at_the_timeout_it_reports_the_probes_last_assertion(clock: Clock) -> None:
    seen = [AssertionError(f"status still running after {n} polls") for n in range(1, 20)]

    with pytest.raises(AssertionError) as timed_out:
        eventually(answers(*seen), timeout=0.5, interval=0.125, what="the run to end")

    assert str(timed_out.value) == "waited 0.5 s for the run to end; last: status still running after 5 polls"
    assert timed_out.value.__cause__ is seen[4]


def test_any_other_exception_ends_the_wait_at_once(clock: Clock) -> None:
    with pytest.raises(KeyError, match="status"):
        eventually(answers(KeyError("status"), "never asked"), timeout=10, what="the run")

    assert clock.slept == []


def test_it_waits_on_the_real_clock_too() -> None:
    calls: list[int] = []

    def third_time_lucky() -> bool:
        calls.append(1)
        return len(calls) == 3

    assert eventually(third_time_lucky, timeout=30, interval=0.001, what="the third call") is True
    assert len(calls) == 3


def test_a_probe_failing_the_test_ends_the_wait_at_once(clock: Clock) -> None:
    def ended_instead() -> bool:
        pytest.fail("the run ended instead of waiting")

    with pytest.raises(pytest.fail.Exception, match="ended instead"):
        eventually(ended_instead, timeout=10, what="the run to wait")

    assert clock.slept == []
