"""Independent DynamoDB requests of one Step, in flight together.

A Step's requests each cost a round trip to DynamoDB (a few milliseconds in AWS); those that do not
need each other's answers go out at once on this small pool instead of one after another. Each job
runs in a copy of the caller's context, so it sees the same stores (stepwise.runs.ports), the same
event outbox and the same meter. Whatever a job raises is raised where its result is taken.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
U = TypeVar("U")

WORKERS = 8  # a Step has at most a few requests in flight at once; tool calls have their own pool

_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="step-io")
        return _pool


def submit(job: Callable[..., T], *args: Any) -> Future[T]:
    """Start `job(*args)` on the pool, in a copy of the current context."""
    context = contextvars.copy_context()
    return _executor().submit(context.run, job, *args)


def together(*jobs: Callable[[], Any]) -> list[Any]:
    """Each job at once (the first here, the others on the pool); their answers in order, or the
    first error once all have ended."""
    pending = [submit(job) for job in jobs[1:]]
    try:
        answers = [jobs[0]()] if jobs else []
    except BaseException:
        for p in pending:
            p.exception()
        raise
    for p in pending:
        p.exception()  # all ended before anything is raised
    return answers + [p.result() for p in pending]


def both(first: Callable[[], T], second: Callable[[], U]) -> tuple[T, U]:
    """`first()` here and `second()` on the pool, together; both answers, or the first error (the
    other is still waited for, so nothing is left running behind the caller)."""
    pending = submit(second)
    try:
        one = first()
    except BaseException:
        pending.exception()  # wait, and drop its outcome: the caller's own error is the one raised
        raise
    return one, pending.result()
