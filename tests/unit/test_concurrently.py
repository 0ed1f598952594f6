"""stepwise.core.concurrently: jobs in flight together, answers in order, the caller's context."""

from __future__ import annotations

import threading
from contextvars import ContextVar

import pytest

from stepwise.core import concurrently

WHERE: ContextVar[str] = ContextVar("where", default="nowhere")


def test_jobs_run_together_and_answer_in_order() -> None:
    barrier = threading.Barrier(3, timeout=5)  # passes only if all three run at once

    def job(n: int) -> int:
        barrier.wait()
        return n

    assert concurrently.together(lambda: job(1), lambda: job(2), lambda: job(3)) == [1, 2, 3]


def test_jobs_see_the_callers_context() -> None:
    token = WHERE.set("step")
    try:
        assert concurrently.both(WHERE.get, WHERE.get) == ("step", "step")
    finally:
        WHERE.reset(token)


def test_an_error_is_raised_once_every_job_ended() -> None:
    failing, ended = threading.Event(), threading.Event()

    def slow() -> None:  # can only end after the first job has failed
        failing.wait(5)
        ended.set()

    def fails() -> None:
        failing.set()
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        concurrently.together(fails, slow)
    assert ended.is_set()  # the other job was waited for, not left running behind the caller
