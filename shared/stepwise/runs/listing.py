"""What GET /v1/runs filters on beyond its index (agent or session) and status: the end user, the kind
of trigger and a window of creation times. Run ids are `run_<ULID>` and a ULID starts with its
milliseconds, so a time window is a range of run ids: a key condition, exact and free, on the table
and on both of its indexes (their sort key is the run id too)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from stepwise.core.ids import ulid
from stepwise.runs.models import PREFIXED_TRIGGERS, Run, Trigger

_MAX_MS = (1 << 48) - 1  # a ULID's time part is 48 bits
_LOWEST = b"\x00" * 10
_HIGHEST = b"\xff" * 10


@dataclass(frozen=True)
class RunFilter:
    user_id: str | None = None
    trigger: Trigger | None = None
    created_after: datetime | None = None  # inclusive
    created_before: datetime | None = None  # exclusive

    def id_range(self) -> tuple[str | None, str | None] | None:
        """(lowest, highest) run id a run created in the window can have, each None when that side is
        open; None when no run can be in the window (it is empty, or ends before 1970)."""
        low = max(_ms(self.created_after), 0) if self.created_after else None
        high = _ms(self.created_before) - 1 if self.created_before else None
        if high is not None and (high < 0 or (low is not None and low > high)):
            return None
        return (
            None if low is None else f"run_{ulid(min(low, _MAX_MS), _LOWEST)}",
            None if high is None else f"run_{ulid(min(high, _MAX_MS), _HIGHEST)}",
        )

    def matches(self, run: Run) -> bool:
        """The same test in memory (the stores' fakes)."""
        created = _ms(run.created_at)
        return (
            (self.user_id is None or run.user_id == self.user_id)
            and (self.trigger is None or run.trigger == self.trigger)
            and (self.created_after is None or created >= _ms(self.created_after))
            and (self.created_before is None or created < _ms(self.created_before))
        )


NO_FILTER = RunFilter()


def trigger_prefix(trigger: Trigger) -> str | None:
    """The `<kind>:` prefix a run's trigger id has for that kind; None for "api" (none of them)."""
    return f"{trigger}:" if trigger in PREFIXED_TRIGGERS else None


def _ms(at: datetime) -> int:
    # A time with no zone is read as UTC, as the API writes every time.
    return int((at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp() * 1000)
