"""EventBridge Scheduler's part in the local stack: fire the schedules moto holds at their targets.

moto stores schedules but never fires them. This does what Scheduler would: for every enabled
schedule, it works out the fire times due since the last one it fired (from the schedule's own
expression, time zone and start), fills `<aws.scheduler.scheduled-time>` into the target's Input and
invokes the target function with it. A background thread ticks every few seconds; tests call
`fire_due(now)` with the `now` they want instead of waiting for the clock.

Like Scheduler, a fire time older than a day (the retry policy's maximum event age) is dropped; a
stack that slept through many fire times delivers only the latest few. A delivery that fails is
logged and not retried (Scheduler would retry it).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import takewhile
from typing import Any

from stepwise.core import aws
from stepwise.core.schema import utcnow
from stepwise.schedules import expressions
from stepwise.schedules.service import RETRY_POLICY, SCHEDULED_TIME
from stepwise.schedules.triggers import iso
from stepwise_local.lambdas import FunctionError

log = logging.getLogger("stepwise_local")

MAX_AGE = timedelta(seconds=RETRY_POLICY["MaximumEventAgeInSeconds"])
CATCH_UP = 5  # fire times delivered per schedule and tick, the latest ones, after a long pause

Invoke = Callable[[str, dict[str, Any]], Any]  # (function name or ARN, payload) -> result


@dataclass
class Delivery:
    schedule: str  # "<group>/<name>"
    scheduled_time: datetime
    payload: dict[str, Any]
    result: Any = None
    error: str | None = None


class LocalScheduler:
    def __init__(self, invoke: Invoke, *, interval: float) -> None:
        self._invoke = invoke
        self.interval = interval
        self._fired: dict[str, datetime] = {}  # schedule ARN -> the last fire time delivered
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.on_fired: Callable[[], None] = lambda: None  # told after a schedule's last fire time moves

    @property
    def fired(self) -> dict[str, datetime]:
        """schedule ARN → the last fire time delivered (what a restarted stack must not deliver again).
        Not under the lock, which a tick holds while it invokes targets: copying a dict is atomic."""
        return dict(self._fired)

    def remember(self, fired: dict[str, datetime]) -> None:
        """Carry on from fire times delivered before a restart."""
        with self._lock:
            self._fired.update(fired)

    def start(self) -> None:
        """Tick in the background every `interval` seconds (not at all when it is 0)."""
        if self.interval <= 0 or self._thread is not None:
            return
        aws.client("scheduler")  # built here: boto3 clients are not safe to create from two threads
        self._thread = threading.Thread(target=self._tick, name="local-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop ticking (after the tick in progress, if any); `start` ticks again."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._stop.clear()

    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.fire_due()
            except Exception:  # a broken tick must not end the ticker; the next one tries again
                log.exception("local scheduler tick failed")

    def fire_due(self, now: datetime | None = None) -> list[Delivery]:
        """Deliver every enabled schedule's fire times up to `now` not delivered before."""
        now = now or utcnow()
        client = aws.client("scheduler")
        delivered: list[Delivery] = []
        with self._lock:
            for summary in _enabled(client):
                schedule = client.get_schedule(GroupName=summary["GroupName"], Name=summary["Name"])
                delivered.extend(self._fire(schedule, now))
        return delivered

    def _fire(self, schedule: dict[str, Any], now: datetime) -> list[Delivery]:
        name = f"{schedule['GroupName']}/{schedule['Name']}"
        expression = expressions.parse(schedule["ScheduleExpression"])
        tz = expressions.zone(schedule.get("ScheduleExpressionTimezone") or "UTC")
        start: datetime = schedule.get("StartDate") or schedule["CreationDate"]
        last = self._fired.get(schedule["Arn"], start - timedelta(microseconds=1))
        fires = expressions.fires(expression, tz, start, max(last, now - MAX_AGE))
        due = list(takewhile(lambda t: t <= now, fires))
        if not due:
            return []
        if len(due) > CATCH_UP:
            log.warning("schedule %s: %d fire times missed, delivering the last %d", name, len(due), CATCH_UP)
        self._fired[schedule["Arn"]] = due[-1]
        self.on_fired()
        target = schedule["Target"]
        deliveries = []
        for when in due[-CATCH_UP:]:
            payload = json.loads(target["Input"].replace(SCHEDULED_TIME, iso(when)))
            delivery = Delivery(schedule=name, scheduled_time=when, payload=payload)
            try:
                delivery.result = self._invoke(target["Arn"], payload)
            except FunctionError as err:
                delivery.error = str(err.payload.get("errorMessage"))
                log.warning("schedule %s: delivery for %s failed: %s", name, iso(when), delivery.error)
            deliveries.append(delivery)
        return deliveries


def _enabled(client: Any) -> Iterator[dict[str, Any]]:
    for page in client.get_paginator("list_schedules").paginate(State="ENABLED"):
        yield from page["Schedules"]
