"""A creation window as a range of run ids: the ULID's first 48 bits are its milliseconds."""

from datetime import UTC, datetime, timedelta, timezone

from stepwise.core.ids import ulid_ms
from stepwise.runs.listing import RunFilter

AT = datetime(2026, 12, 4, 10, 0, tzinfo=UTC)
AT_MS = int(AT.timestamp() * 1000)


def test_the_window_is_the_lowest_and_highest_id_of_its_milliseconds() -> None:
    window = RunFilter(created_after=AT, created_before=AT + timedelta(seconds=1))
    low, high = window.id_range() or (None, None)

    assert low is not None and high is not None
    assert ulid_ms(low.removeprefix("run_")) == AT_MS and low.endswith("0" * 16)
    # `before` is exclusive: the last millisecond in is the one before it
    assert ulid_ms(high.removeprefix("run_")) == AT_MS + 999 and high.endswith("Z" * 16)


def test_an_open_side_is_none_and_a_naive_time_is_utc() -> None:
    low, high = RunFilter(created_after=AT.replace(tzinfo=None)).id_range() or ("", "")

    assert ulid_ms(low.removeprefix("run_")) == AT_MS and high is None
    assert RunFilter().id_range() == (None, None)
    other_zone = AT.astimezone(timezone(timedelta(hours=5, minutes=30)))
    assert RunFilter(created_after=other_zone).id_range() == RunFilter(created_after=AT).id_range()


def test_a_window_no_run_can_be_in_reads_nothing() -> None:
    assert RunFilter(created_after=AT, created_before=AT).id_range() is None  # empty
    assert RunFilter(created_after=AT, created_before=AT - timedelta(days=1)).id_range() is None  # reversed
    assert RunFilter(created_before=datetime(1969, 12, 31, tzinfo=UTC)).id_range() is None  # before any ULID
    # the far ends of what a datetime can say still give ids, never an error
    assert RunFilter(created_after=datetime(1, 1, 1, tzinfo=UTC)).id_range() == ("run_" + "0" * 26, None)
    assert RunFilter(created_before=datetime(9999, 12, 31, tzinfo=UTC)).id_range() is not None
