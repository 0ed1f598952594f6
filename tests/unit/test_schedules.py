"""Schedule expressions (parsing, refusals, fire times in time zones across DST), the run ids derived
from deliveries, and the delivery payloads. Pure: no AWS, no moto."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from itertools import islice
from zoneinfo import ZoneInfo

import pytest
from pydantic import ValidationError

from stepwise.core.ids import ulid
from stepwise.runs.models import MESSAGE_LIMIT
from stepwise.schedules import expressions
from stepwise.schedules.expressions import At, Cron, InvalidExpression, InvalidTimezone, Rate
from stepwise.schedules.models import EventDelivery, Schedule, ScheduleCreate, ScheduleDelivery
from stepwise.schedules.triggers import (
    derived_id,
    event_message,
    event_run_id,
    iso,
    schedule_run_id,
)

UTC_ZONE = ZoneInfo("UTC")
NEW_YORK = ZoneInfo("America/New_York")
PARIS = ZoneInfo("Europe/Paris")
ULID = re.compile(r"^run_[0-9A-HJKMNP-TV-Z]{26}$")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def first(expression: str, after: datetime, tz: ZoneInfo = UTC_ZONE, n: int = 1) -> list[datetime]:
    """The first n fire times after `after` of a schedule that started long before."""
    parsed = expressions.parse(expression)
    return list(islice(expressions.fires(parsed, tz, utc(2000, 1, 1), after), n))


# --- Parsing ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("rate(1 minute)", Rate(1, "minute")),
        ("rate(5 minutes)", Rate(5, "minute")),
        ("rate(1 hour)", Rate(1, "hour")),
        ("rate(12 hours)", Rate(12, "hour")),
        ("rate(1 day)", Rate(1, "day")),
        ("rate(7 days)", Rate(7, "day")),
        ("at(2030-01-31T23:59:00)", At(datetime(2030, 1, 31, 23, 59))),
    ],
)
def test_rates_and_ats_parse(text: str, expected: object) -> None:
    assert expressions.parse(text) == expected


def test_a_cron_parses_into_its_six_fields() -> None:
    cron = expressions.parse("cron(0/15 9-17 ? JAN,jun-AUG MON-FRI 2030-2032)")

    assert cron == Cron(
        minutes=(0, 15, 30, 45),
        hours=tuple(range(9, 18)),
        days=None,
        months=(1, 6, 7, 8),
        weekdays=(2, 3, 4, 5, 6),
        years=(2030, 2031, 2032),
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("every hour", "is not a schedule expression"),
        ("rate(0 minutes)", "positive"),
        ("rate(1 minutes)", "rate(1 minute)"),
        ("rate(5 minute)", "rate(5 minutes)"),
        ("rate(5 seconds)", "minute(s), hour(s), day(s)"),
        ("cron(0 9 * * ?)", "6 fields"),
        ("cron(0 9 * * * *)", "exactly one of day-of-month and day-of-week must be '?'"),
        ("cron(0 9 ? * ? *)", "exactly one of day-of-month and day-of-week must be '?'"),
        ("cron(60 9 * * ? *)", "minutes 60 is out of range 0-59"),
        ("cron(0 24 * * ? *)", "hours 24 is out of range 0-23"),
        ("cron(0 9 32 * ? *)", "day-of-month 32 is out of range 1-31"),
        ("cron(0 9 * 13 ? *)", "month 13 is out of range 1-12"),
        ("cron(0 9 * FOO ? *)", "month 'FOO' is not a number from 1 to 12 or JAN-DEC"),
        ("cron(0 9 ? * 8 *)", "day-of-week 8 is out of range 1-7"),
        ("cron(0 9 * * ? 2200)", "year 2200 is out of range 1970-2199"),
        ("cron(0 9 5-1 * ? *)", "runs backwards"),
        ("cron(*/0 9 * * ? *)", "step after '/' must be a positive number"),
        ("cron(0 9 ? * 2/2 *)", "no '/' steps in day-of-week"),
        ("cron(0 9 L-2 * ? *)", "no L-n offsets"),
        ("cron(0 9 ? * L *)", "a bare L is not supported"),
        ("cron(0 9 ? * 2#1,3#2 *)", "alone in the field"),
        ("cron(0 9 1,,2 * ? *)", "empty part"),
        ("at(2030-02-30T10:00:00)", "not a real date"),
        ("at(2030-02-03 10:00:00)", "is not a schedule expression"),
    ],
)
def test_invalid_expressions_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(InvalidExpression) as raised:
        expressions.parse(text)

    assert says in str(raised.value)


def test_time_zones_are_iana_names() -> None:
    assert expressions.zone("Europe/Paris") == PARIS
    assert expressions.zone("UTC") == UTC_ZONE
    for bad in ("Mars/Olympus_Mons", "../../etc/passwd", "/etc/localtime", "CEST", ""):
        with pytest.raises(InvalidTimezone):
            expressions.zone(bad)


# --- Fire times ---------------------------------------------------------------------------------


def test_a_rate_fires_at_its_start_and_then_every_period() -> None:
    start = utc(2030, 5, 1, 12, 0, 7)
    rate = expressions.parse("rate(1 minute)")

    fires = list(islice(expressions.fires(rate, UTC_ZONE, start, start - timedelta(hours=1)), 3))
    later = next(expressions.fires(rate, UTC_ZONE, start, utc(2030, 5, 1, 12, 30, 7)))

    assert fires == [start, start + timedelta(minutes=1), start + timedelta(minutes=2)]
    assert later == utc(2030, 5, 1, 12, 31, 7), "strictly after: a fire time equal to `after` is past"


def test_a_days_rate_is_24_hours_even_across_a_dst_change() -> None:
    start = datetime(2025, 3, 8, 9, 0, tzinfo=NEW_YORK).astimezone(UTC)  # the day before spring forward
    rate = expressions.parse("rate(1 day)")

    second = next(expressions.fires(rate, NEW_YORK, start, start))

    assert second - start == timedelta(hours=24)
    assert second.astimezone(NEW_YORK).hour == 10  # the wall clock moved, the rate did not


def test_cron_fires_in_utc() -> None:
    assert first("cron(*/15 * * * ? *)", utc(2030, 1, 1, 10, 7), n=3) == [
        utc(2030, 1, 1, 10, 15),
        utc(2030, 1, 1, 10, 30),
        utc(2030, 1, 1, 10, 45),
    ]
    assert first("cron(5/20 8 * * ? *)", utc(2030, 1, 1), n=3) == [
        utc(2030, 1, 1, 8, 5),
        utc(2030, 1, 1, 8, 25),
        utc(2030, 1, 1, 8, 45),
    ]


def test_weekday_names_and_numbers_start_the_week_on_sunday() -> None:
    # 2030-01-04 is a Friday.
    weekdays = first("cron(0 9 ? * MON-FRI *)", utc(2030, 1, 4, 10), n=2)
    sundays = first("cron(0 9 ? * 1 *)", utc(2030, 1, 4, 10), n=1)

    assert weekdays == [utc(2030, 1, 7, 9), utc(2030, 1, 8, 9)]
    assert sundays == [utc(2030, 1, 6, 9)]


def test_cron_follows_the_time_zone_through_dst() -> None:
    # Europe/Paris: UTC+1 in winter, UTC+2 from 2025-03-30.
    fires = first("cron(0 9 * * ? *)", utc(2025, 3, 28, 12), PARIS, n=3)

    assert fires == [utc(2025, 3, 29, 8), utc(2025, 3, 30, 7), utc(2025, 3, 31, 7)]
    assert all(f.astimezone(PARIS).hour == 9 for f in fires)


def test_a_time_the_spring_change_skips_does_not_fire_that_day() -> None:
    # America/New_York jumps from 02:00 to 03:00 on 2025-03-09.
    fires = first("cron(30 2 * * ? *)", utc(2025, 3, 8, 12), NEW_YORK, n=2)

    assert [f.astimezone(NEW_YORK).date().day for f in fires] == [10, 11]
    assert fires[0] == utc(2025, 3, 10, 6, 30)


def test_a_time_the_autumn_change_repeats_fires_once() -> None:
    # America/New_York falls back from 02:00 EDT to 01:00 EST on 2025-11-02: 01:30 happens twice.
    fires = first("cron(30 1 * * ? *)", utc(2025, 11, 1, 12), NEW_YORK, n=2)
    hourly = first("cron(*/30 * * * ? *)", utc(2025, 11, 2, 4, 45), NEW_YORK, n=4)

    assert fires == [utc(2025, 11, 2, 5, 30), utc(2025, 11, 3, 6, 30)]  # EDT once, then EST
    assert hourly == [
        utc(2025, 11, 2, 5, 0),  # 01:00 EDT
        utc(2025, 11, 2, 5, 30),  # 01:30 EDT; the EST repeats of 01:00 and 01:30 do not fire
        utc(2025, 11, 2, 7, 0),  # 02:00 EST
        utc(2025, 11, 2, 7, 30),
    ]


def test_at_fires_once_in_its_time_zone() -> None:
    at = expressions.parse("at(2030-06-01T09:00:00)")

    assert list(expressions.fires(at, PARIS, utc(2030, 1, 1), utc(2030, 1, 1))) == [utc(2030, 6, 1, 7)]
    assert list(expressions.fires(at, PARIS, utc(2030, 1, 1), utc(2030, 6, 1, 7))) == []


def test_an_at_in_a_dst_gap_never_fires() -> None:
    at = expressions.parse("at(2025-03-09T02:30:00)")

    assert expressions.next_fire(at, NEW_YORK, utc(2025, 1, 1), utc(2025, 1, 1)) is None


def test_nothing_fires_before_the_schedule_starts() -> None:
    cron = expressions.parse("cron(0 * * * ? *)")
    start = utc(2030, 1, 1, 10, 30)

    assert expressions.next_fire(cron, UTC_ZONE, start, utc(2029, 1, 1)) == utc(2030, 1, 1, 11)


@pytest.mark.parametrize(
    ("text", "after", "expected"),
    [
        ("cron(0 12 L * ? *)", utc(2030, 2, 1), [utc(2030, 2, 28, 12), utc(2030, 3, 31, 12)]),
        # Last weekday: 2030-03-31 is a Sunday, 2030-06-30 a Sunday too.
        ("cron(0 12 LW 3,6 ? *)", utc(2030, 1, 1), [utc(2030, 3, 29, 12), utc(2030, 6, 28, 12)]),
        # Nearest weekday to the 1st: 2030-06-01 is a Saturday, so Monday the 3rd (not May 31).
        ("cron(0 12 1W 6 ? 2030)", utc(2030, 1, 1), [utc(2030, 6, 3, 12)]),
        # ... to the 15th: 2030-09-15 is a Sunday, so Monday the 16th.
        ("cron(0 12 15W 9 ? 2030)", utc(2030, 1, 1), [utc(2030, 9, 16, 12)]),
        # The last Friday of the month.
        ("cron(0 12 ? 1,2 6L 2030)", utc(2030, 1, 1), [utc(2030, 1, 25, 12), utc(2030, 2, 22, 12)]),
        # The first Monday of the month.
        ("cron(0 12 ? * MON#1 2030)", utc(2030, 1, 1), [utc(2030, 1, 7, 12), utc(2030, 2, 4, 12)]),
        # Only the years named.
        ("cron(0 0 1 1 ? 2031,2033)", utc(2030, 6, 1), [utc(2031, 1, 1), utc(2033, 1, 1)]),
    ],
)
def test_special_day_fields(text: str, after: datetime, expected: list[datetime]) -> None:
    assert first(text, after, n=len(expected)) == expected


def test_a_cron_that_can_never_fire_has_no_next_fire() -> None:
    cron = expressions.parse("cron(0 0 30 2 ? *)")  # February 30th

    assert expressions.next_fire(cron, UTC_ZONE, utc(2030, 1, 1), utc(2030, 1, 1)) is None


# --- Request bodies -----------------------------------------------------------------------------


def test_a_schedule_body_is_checked_at_the_edge() -> None:
    good = ScheduleCreate(expression=" cron(0 9 ? * MON-FRI *) ", timezone="Europe/Paris", message="hi")

    assert good.expression == "cron(0 9 ? * MON-FRI *)"
    assert good.timezone == "Europe/Paris" and good.enabled is True
    with pytest.raises(ValidationError, match="exactly one of day-of-month"):
        ScheduleCreate(expression="cron(0 9 * * * *)", message="hi")
    with pytest.raises(ValidationError, match="not an IANA time zone"):
        ScheduleCreate(expression="rate(1 hour)", timezone="Paris", message="hi")
    with pytest.raises(ValidationError, match="in the past"):
        ScheduleCreate(expression="at(2001-01-01T00:00:00)", message="hi")
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        ScheduleCreate(expression="rate(1 hour)", message="hi", cron="x")  # type: ignore[call-arg]


def test_next_run_is_the_first_fire_time_at_or_after_now() -> None:
    created = utc(2030, 1, 1, 10, 0, 5)
    schedule = Schedule(
        schedule_id="sch_1",
        agent_id="agt_1",
        expression="rate(1 hour)",
        timezone="UTC",
        message="hi",
        enabled=True,
        created_at=created,
    )

    assert schedule.with_next_run(created).next_run == created
    assert schedule.with_next_run(created + timedelta(minutes=1)).next_run == created + timedelta(hours=1)
    disabled = schedule.model_copy(update={"enabled": False})
    assert disabled.with_next_run(created).next_run is None


# --- Deliveries ---------------------------------------------------------------------------------


def test_derived_run_ids_are_deterministic_ulids_that_sort_by_time() -> None:
    at = utc(2030, 1, 1, 9)
    one = schedule_run_id("acme", "sch_1", at)

    assert ULID.match(one)
    assert schedule_run_id("acme", "sch_1", at) == one
    assert schedule_run_id("acme", "sch_1", at + timedelta(minutes=1)) > one
    assert schedule_run_id("acme", "sch_2", at) != one
    assert schedule_run_id("other", "sch_1", at) != one


def test_event_run_ids_are_per_event_and_agent() -> None:
    at = utc(2030, 1, 1, 9)

    assert event_run_id("acme", "agt_1", "ev-1", at) == event_run_id("acme", "agt_1", "ev-1", at)
    assert event_run_id("acme", "agt_1", "ev-1", at) != event_run_id("acme", "agt_2", "ev-1", at)
    assert event_run_id("acme", "agt_1", "ev-1", at) != event_run_id("acme", "agt_1", "ev-2", at)
    assert ULID.match(event_run_id("acme", "agt_1", "ev-1", at))


def test_the_time_part_of_a_derived_id_is_the_delivery_time() -> None:
    at = utc(2030, 1, 1, 9)

    assert derived_id("run", at, "x")[4:14] == ulid(int(at.timestamp() * 1000))[:10]


def test_scheduled_time_reads_schedulers_format() -> None:
    delivery = ScheduleDelivery.model_validate(
        {"tenant_id": "t", "agent_id": "a", "schedule_id": "s", "scheduled_time": "2030-01-01T09:00:00Z"}
    )

    assert delivery.scheduled_time == utc(2030, 1, 1, 9)
    assert iso(delivery.scheduled_time) == "2030-01-01T09:00:00Z"


EVENT = {
    "version": "0",
    "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718",
    "detail-type": "Order Placed",
    "source": "shop.orders",
    "account": "123456789012",
    "time": "2030-01-01T09:00:00Z",
    "region": "us-east-1",
    "resources": [],
    "detail": {"order_id": "o-1", "total": 42},
}


def test_an_event_is_read_flat_or_wrapped() -> None:
    flat = EventDelivery.model_validate({**EVENT, "tenant_id": "acme", "agent_id": "agt_1"})
    wrapped = EventDelivery.model_validate({"tenant_id": "acme", "agent_id": "agt_1", "event": EVENT})

    assert flat == wrapped
    assert flat.detail_type == "Order Placed" and flat.time == utc(2030, 1, 1, 9)


def test_the_event_message_names_the_event_and_carries_its_json() -> None:
    event = EventDelivery.model_validate({**EVENT, "tenant_id": "acme", "agent_id": "agt_1"})

    message = event_message(event)

    assert message.startswith("EventBridge event 'Order Placed' from 'shop.orders':\n")
    assert '"detail": {"order_id": "o-1", "total": 42}' in message


def test_a_huge_event_is_clipped_to_what_a_run_accepts() -> None:
    event = EventDelivery.model_validate(
        {**EVENT, "tenant_id": "acme", "agent_id": "agt_1", "detail": {"blob": "é" * 200_000}}
    )

    message = event_message(event)

    assert len(message) <= MESSAGE_LIMIT and len(message.encode()) <= 300_000
    assert message.endswith("(truncated)")
