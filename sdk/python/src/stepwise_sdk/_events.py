"""Reading a run's events in order, each once, across reconnects: the part of `runs.events` and
`runs.wait` that does not depend on how the pages are fetched."""

from __future__ import annotations

import time
from dataclasses import dataclass

from stepwise_sdk._core import Call
from stepwise_sdk._operations import RUN_EVENTS
from stepwise_sdk.errors import WaitTimeout
from stepwise_sdk.models import TERMINAL_EVENTS, EventPage, RunEvent

EVENT_WAIT = 20.0  # seconds per long poll: under API Gateway's 30 s integration timeout
POLL_MARGIN = 30.0  # the HTTP timeout of a long poll is its wait plus this


@dataclass
class Cursor:
    """Where a reader of a run's events is: `after` is the last seq it was given. Every poll asks for the
    events after it, so a poll that is sent again after a broken connection neither repeats nor skips
    one; `ended` once the terminal event was given or the log says the run is done."""

    run_id: str
    after: int = 0
    wait: float = EVENT_WAIT
    deadline: float | None = None  # time.monotonic() after which waiting is a WaitTimeout
    ended: bool = False

    def next_call(self) -> Call[EventPage]:
        wait = self.wait
        if self.deadline is not None:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeout(f"run {self.run_id} had not ended when the wait ran out")
            wait = min(wait, remaining)
        return RUN_EVENTS.call(
            {"run_id": self.run_id},
            params={"after": self.after, "wait": _seconds(wait)},
            timeout=wait + POLL_MARGIN,
        )

    def take(self, page: EventPage) -> list[RunEvent]:
        fresh = []
        for event in page.events:
            if event.seq <= self.after:
                continue  # a page may overlap what a resumed reader already has
            fresh.append(event)
            self.after = event.seq
            if event.type in TERMINAL_EVENTS:
                self.ended = True
                return fresh
        self.after = max(self.after, page.next)
        self.ended = page.done
        return fresh


def _seconds(value: float) -> float | int:
    rounded = round(value, 3)
    return int(rounded) if rounded.is_integer() else rounded
