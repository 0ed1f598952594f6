"""Waiting on observable state with a deadline: the one way the tests wait for something to happen."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(
    probe: Callable[[], T | None], *, timeout: float = 30.0, interval: float = 0.05, what: str
) -> T:
    """The probe's first truthy value, asking again every `interval` seconds for `timeout` seconds.

    A probe says "not yet" by returning a falsy value, or by raising AssertionError: a probe may assert
    with a message that shows what it saw, and that message is what the timeout reports. Asserting so
    retries every assertion in the probe, a status check too: one that keeps failing fails at the timeout
    with its own message. Any other exception ends the wait at once: `pytest.fail()` in a probe
    says that waiting on is no use.

    At the timeout, raises AssertionError naming `what` and the last value (or chained to the last
    AssertionError).
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = probe()
        except AssertionError as error:
            if time.monotonic() >= deadline:
                raise AssertionError(f"waited {timeout:g} s for {what}; last: {error}") from error
        else:
            if value:
                return value
            if time.monotonic() >= deadline:
                raise AssertionError(f"waited {timeout:g} s for {what}; last: {value!r}")
        time.sleep(interval)
