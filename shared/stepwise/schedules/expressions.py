"""EventBridge Scheduler's schedule expressions: parsed, checked, and evaluated to fire times.

The API checks an expression with the same parser the local stack fires it with, so a schedule the API
accepts is one both AWS and the local stack can run. The three forms:

- `rate(value unit)`: every `value` minutes, hours or days (`minute`/`hour`/`day` when the value is 1),
  counted from the schedule's start; the first delivery is at the start itself, as in Scheduler.
  Days are 24 hours, whatever the time zone does.
- `cron(minutes hours day-of-month month day-of-week year)`: six fields, evaluated in the schedule's
  time zone. Each field takes `*`, values, `a-b` ranges, `,` lists and `/` steps where AWS allows them
  (not in day-of-week); months and weekdays also by name (JAN-DEC, SUN-SAT; weekday 1 is Sunday).
  Exactly one of day-of-month and day-of-week is `?`. Day-of-month also takes `L` (last day), `LW`
  (last weekday) and `15W` (the weekday nearest the 15th, within the month); day-of-week takes `6L`
  (the month's last Friday) and `2#1` (its first Monday, alone in the field). `L-3` offsets and a bare
  `L` in day-of-week are refused: they are rare and their semantics are easy to get subtly wrong.
- `at(yyyy-mm-ddThh:mm:ss)`: once, at that wall-clock time in the schedule's time zone.

Daylight saving time follows Scheduler: a wall-clock time the spring change skips does not fire that
day, and a time the autumn change repeats fires once, at its first occurrence.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

MIN_YEAR, MAX_YEAR = 1970, 2199
MONTHS = {
    name: i
    for i, name in enumerate(
        ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"), 1
    )
}
WEEKDAYS = {"SUN": 1, "MON": 2, "TUE": 3, "WED": 4, "THU": 5, "FRI": 6, "SAT": 7}

_RATE = re.compile(r"^rate\(\s*(\d+)\s+([a-z]+)\s*\)$")
_CRON = re.compile(r"^cron\((.*)\)$")
_AT = re.compile(r"^at\((\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\)$")
_UNITS = {"minute": 60, "hour": 3600, "day": 86400}


class InvalidExpression(ValueError):
    """The expression is not one EventBridge Scheduler (or Stepwise's evaluator) accepts."""


class InvalidTimezone(ValueError):
    pass


@dataclass(frozen=True)
class Rate:
    value: int
    unit: str  # minute | hour | day

    @property
    def period(self) -> timedelta:
        return timedelta(seconds=self.value * _UNITS[self.unit])


@dataclass(frozen=True)
class DayRule:
    """A day-of-month or day-of-week field that is more than a set of values."""

    kind: str  # "last" (L), "last_weekday" (LW), "nearest_weekday" (15W), "last_of" (6L), "nth" (2#1)
    value: int = 0
    nth: int = 0


@dataclass(frozen=True)
class Cron:
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: tuple[int, ...] | DayRule | None  # None: `?`
    months: tuple[int, ...]
    weekdays: tuple[int, ...] | DayRule | None  # None: `?`; 1 = Sunday ... 7 = Saturday
    years: tuple[int, ...]


@dataclass(frozen=True)
class At:
    local: datetime  # naive: a wall-clock time in the schedule's time zone


Expression = Rate | Cron | At


# --- Parsing ------------------------------------------------------------------------------------


def parse(text: str) -> Expression:
    """The expression, or InvalidExpression saying what is wrong with it."""
    text = text.strip()
    if match := _RATE.match(text):
        return _rate(int(match.group(1)), match.group(2))
    if match := _AT.match(text):
        year, month, day, hour, minute, second = (int(g) for g in match.groups())
        try:
            return At(datetime(year, month, day, hour, minute, second))
        except ValueError as exc:
            raise InvalidExpression(f"{text} is not a real date and time: {exc}") from None
    if match := _CRON.match(text):
        return _cron(match.group(1).split())
    raise InvalidExpression(
        f"{text!r} is not a schedule expression: use rate(5 minutes), "
        "cron(minutes hours day-of-month month day-of-week year) or at(yyyy-mm-ddThh:mm:ss)"
    )


def _rate(value: int, unit: str) -> Rate:
    singular = unit.removesuffix("s")
    if singular not in _UNITS:
        raise InvalidExpression(f"rate unit {unit!r} is not one of minute(s), hour(s), day(s)")
    if value < 1:
        raise InvalidExpression("a rate's value must be a positive whole number")
    if (value == 1) != (unit == singular):
        raise InvalidExpression(f"write rate(1 {singular}) for one and rate({value} {singular}s) for more")
    return Rate(value, singular)


def _cron(fields: list[str]) -> Cron:
    if len(fields) != 6:
        raise InvalidExpression(
            f"cron() takes 6 fields (minutes hours day-of-month month day-of-week year), got {len(fields)}"
        )
    minute, hour, dom, month, dow, year = fields
    if (dom == "?") == (dow == "?"):
        raise InvalidExpression(
            "exactly one of day-of-month and day-of-week must be '?': "
            "use cron(0 9 * * ? *) for every day or cron(0 9 ? * MON-FRI *) for weekdays"
        )
    return Cron(
        minutes=_values(minute, "minutes", 0, 59),
        hours=_values(hour, "hours", 0, 23),
        days=None if dom == "?" else _day_of_month(dom),
        months=_values(month, "month", 1, 12, MONTHS),
        weekdays=None if dow == "?" else _day_of_week(dow),
        years=_values(year, "year", MIN_YEAR, MAX_YEAR),
    )


def _day_of_month(field: str) -> tuple[int, ...] | DayRule:
    if field == "L":
        return DayRule("last")
    if field == "LW":
        return DayRule("last_weekday")
    if match := re.fullmatch(r"(\d{1,2})W", field):
        day = int(match.group(1))
        if not 1 <= day <= 31:
            raise InvalidExpression(f"day-of-month {field}: {day} is not between 1 and 31")
        return DayRule("nearest_weekday", day)
    if "L" in field or "W" in field:
        raise InvalidExpression(
            f"day-of-month {field!r}: Stepwise supports L, LW and nW alone in the field (no L-n offsets)"
        )
    return _values(field, "day-of-month", 1, 31)


def _day_of_week(field: str) -> tuple[int, ...] | DayRule:
    if match := re.fullmatch(r"([1-7]|[A-Za-z]{3})#([1-5])", field):
        return DayRule("nth", _value(match.group(1), "day-of-week", 1, 7, WEEKDAYS), int(match.group(2)))
    if match := re.fullmatch(r"([1-7]|[A-Za-z]{3})L", field):
        return DayRule("last_of", _value(match.group(1), "day-of-week", 1, 7, WEEKDAYS))
    if "#" in field or "L" in field.upper():
        raise InvalidExpression(
            f"day-of-week {field!r}: use d#n (the nth weekday d, alone in the field) or dL (the last "
            "weekday d of the month); a bare L is not supported"
        )
    if "/" in field:
        raise InvalidExpression(f"day-of-week {field!r}: EventBridge allows no '/' steps in day-of-week")
    return _values(field, "day-of-week", 1, 7, WEEKDAYS)


def _value(token: str, name: str, low: int, high: int, names: dict[str, int] | None = None) -> int:
    if names and token.upper() in names:
        return names[token.upper()]
    if not token.isdigit():
        hint = f" or {min(names, key=names.__getitem__)}-{max(names, key=names.__getitem__)}" if names else ""
        raise InvalidExpression(f"{name} {token!r} is not a number from {low} to {high}{hint}")
    value = int(token)
    if not low <= value <= high:
        raise InvalidExpression(f"{name} {value} is out of range {low}-{high}")
    return value


def _values(
    field: str, name: str, low: int, high: int, names: dict[str, int] | None = None
) -> tuple[int, ...]:
    """`*`, `5`, `1-5`, `*/15`, `10/5`, `1-30/2` and comma lists of them, as the sorted values."""
    chosen: set[int] = set()
    for part in field.split(","):
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) < 1:
                raise InvalidExpression(f"{name} {part!r}: the step after '/' must be a positive number")
            step = int(step_text)
        if base == "*":
            start, end = low, high
        elif "-" in base:
            first, _, last = base.partition("-")
            start, end = _value(first, name, low, high, names), _value(last, name, low, high, names)
            if start > end:
                raise InvalidExpression(f"{name} range {base!r} runs backwards; write it as two ranges")
        elif base:
            start = _value(base, name, low, high, names)
            end = high if slash else start  # "10/5": from 10, every 5
        else:
            raise InvalidExpression(f"{name} field {field!r} has an empty part")
        chosen.update(range(start, end + 1, step))
    return tuple(sorted(chosen))


def zone(name: str) -> ZoneInfo:
    """The IANA time zone, or InvalidTimezone."""
    if name not in _zone_names():
        raise InvalidTimezone(f"{name!r} is not an IANA time zone name such as UTC or Europe/Paris")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:  # listed but unreadable: a broken tz database
        raise InvalidTimezone(f"time zone {name!r} cannot be loaded: {exc}") from None


@cache
def _zone_names() -> frozenset[str]:
    return frozenset(available_timezones() | {"UTC"})


# --- Evaluation ---------------------------------------------------------------------------------


def fires(expression: Expression, tz: ZoneInfo, start: datetime, after: datetime) -> Iterator[datetime]:
    """The fire times (aware, UTC) strictly later than `after`, in order, of a schedule that started at
    `start` (a rate counts from it; a cron or at() never fires before it)."""
    after = max(after, start - timedelta(microseconds=1))
    if isinstance(expression, Rate):
        period = expression.period
        k = max(0, (after - start) // period + 1)
        while True:
            yield (start + k * period).astimezone(UTC)
            k += 1
    elif isinstance(expression, At):
        when = _to_utc(expression.local, tz)
        if when is not None and when > after:
            yield when
    else:
        yield from _cron_fires(expression, tz, after)


def next_fire(expression: Expression, tz: ZoneInfo, start: datetime, after: datetime) -> datetime | None:
    return next(fires(expression, tz, start, after), None)


def _to_utc(local: datetime, tz: ZoneInfo) -> datetime | None:
    """A wall-clock time in `tz` as UTC; None when the time does not exist there (a DST gap). A repeated
    time (the autumn change) is its first occurrence (fold=0)."""
    aware = local.replace(tzinfo=tz, fold=0)
    utc = aware.astimezone(UTC)
    if utc.astimezone(tz).replace(tzinfo=None) != local:
        return None
    return utc


def _cron_fires(cron: Cron, tz: ZoneInfo, after: datetime) -> Iterator[datetime]:
    first_day = after.astimezone(tz).date()
    for year in cron.years:
        if year < first_day.year:
            continue
        for month in cron.months:
            if (year, month) < (first_day.year, first_day.month):
                continue
            for day in range(1, calendar.monthrange(year, month)[1] + 1):
                today = date(year, month, day)
                if today < first_day or not _day_matches(cron, today):
                    continue
                for hour in cron.hours:
                    for minute in cron.minutes:
                        when = _to_utc(datetime(year, month, day, hour, minute), tz)
                        if when is not None and when > after:
                            yield when


def _weekday(day: date) -> int:
    """EventBridge numbering: 1 = Sunday ... 7 = Saturday."""
    return (day.weekday() + 1) % 7 + 1


def _day_matches(cron: Cron, day: date) -> bool:
    last = calendar.monthrange(day.year, day.month)[1]
    if cron.days is not None:
        days = cron.days
        if isinstance(days, tuple):
            return day.day in days
        if days.kind == "last":
            return day.day == last
        target = last if days.kind == "last_weekday" else days.value
        return target <= last and day.day == _nearest_weekday(day.year, day.month, target, last)
    weekdays = cron.weekdays
    if isinstance(weekdays, tuple):
        return _weekday(day) in weekdays
    assert weekdays is not None  # parsing guarantees one of the two day fields
    if _weekday(day) != weekdays.value:
        return False
    if weekdays.kind == "last_of":
        return day.day + 7 > last
    return (day.day - 1) // 7 + 1 == weekdays.nth


def _nearest_weekday(year: int, month: int, day: int, last: int) -> int:
    """The weekday (Mon-Fri) nearest `day` without leaving the month (Quartz's `W`)."""
    weekday = date(year, month, day).weekday()  # Monday = 0
    if weekday == 5:  # Saturday: the Friday before, or the Monday after on the 1st
        return day - 1 if day > 1 else day + 2
    if weekday == 6:  # Sunday: the Monday after, or the Friday before on the last day
        return day + 1 if day < last else day - 2
    return day
