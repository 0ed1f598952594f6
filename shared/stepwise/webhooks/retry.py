"""When a failed delivery is tried again: Standard Webhooks' suggested backoff (5 s, 5 min, 30 min, 2 h,
5 h, 10 h, then every 10 h), each delay stretched by up to JITTER so deliveries that failed together
(a receiver's outage) do not all come back in the same second, and none past the delivery's window."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime, timedelta

WINDOW = timedelta(hours=24)  # from the event: after it, the delivery is failed
SCHEDULE: tuple[int, ...] = (5, 300, 1800, 7200, 18000, 36000)  # seconds after attempt 1, 2, ...
JITTER = 0.1
MIN_DELAY = 1  # SQS hides a message for whole seconds


def next_delay(
    attempts: int, now: datetime, gives_up_at: datetime, *, rng: Callable[[], float] = random.random
) -> int | None:
    """Seconds until the attempt after `attempts` failed ones, or None when the window has closed."""
    left = (gives_up_at - now).total_seconds()
    if left < MIN_DELAY:
        return None
    base = SCHEDULE[min(attempts, len(SCHEDULE)) - 1] if attempts >= 1 else SCHEDULE[0]
    delay = base * (1 + JITTER * rng())
    return max(MIN_DELAY, int(min(delay, left)))
