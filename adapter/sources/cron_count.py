"""How many times a cron fires in a span, from its fields, without iterating it.

A calendar's expansion asks the server-wide budget for room as it goes. When the budget is nearly
full, a calendar that will not fit only finds out after iterating as many occurrences as there is
room left (croniter: ~35 us each), and ten thousand such calendars did that one after another. A
count from the cron's fields costs microseconds, so an expansion can ask for (nearly) all its room
before it starts and be refused at once.

The count is exact for crons of plain numbers, ranges, lists and steps, except around a daylight
saving change on the span's first or last day (an hour's worth at most). Crons with L, W or # get
None: the caller then asks for nothing ahead.
"""

from __future__ import annotations

import bisect
import datetime as dt
import functools
from zoneinfo import ZoneInfo

from croniter import croniter

MINUTES_PER_DAY = 1440


@functools.lru_cache(maxsize=4096)
def _fields(
    cron: str,
) -> tuple[tuple[int, ...], frozenset[int] | None, frozenset[int] | None, frozenset[int] | None] | None:
    """(minutes of the day it fires, sorted; days of month; months; weekdays with 0 = Sunday), each
    None for '*'; None for the whole when the cron uses a field this count does not model."""
    try:
        parsed = croniter(cron)
    except Exception:  # noqa: BLE001 - validation reports bad crons; here it only means "no count"
        return None
    if getattr(parsed, "nth_weekday_of_month", None) or getattr(parsed, "nearest_weekday", None):
        return None  # '#' and 'W' move firings between days
    if not getattr(parsed, "_day_or", True):
        return None  # croniter told to AND day of month and weekday: not cron's rule, not modelled
    expanded = parsed.expanded
    if len(expanded) != 5 or any(v != "*" and not isinstance(v, int) for field in expanded for v in field):
        return None

    def values(field: list[int | str]) -> frozenset[int] | None:
        return None if field == ["*"] else frozenset(int(v) for v in field)

    minutes, hours, days, months, weekdays = expanded
    minute_set = range(60) if minutes == ["*"] else [int(m) for m in minutes]
    hour_set = range(24) if hours == ["*"] else [int(h) for h in hours]
    times = tuple(sorted(h * 60 + m for h in hour_set for m in minute_set))
    return times, values(days), values(months), values(weekdays)


def _day_matches(
    day: dt.date, days: frozenset[int] | None, months: frozenset[int] | None, weekdays: frozenset[int] | None
) -> bool:
    if months is not None and day.month not in months:
        return False
    on_day = days is None or day.day in days
    on_weekday = weekdays is None or (day.weekday() + 1) % 7 in weekdays
    if days is not None and weekdays is not None:
        return on_day or on_weekday  # cron's rule when both are restricted: either one
    return on_day and on_weekday


def _minute_of_day(moment: dt.datetime) -> int:
    """Minutes since midnight, rounded up: a firing at an earlier minute is before `moment`."""
    whole = moment.hour * 60 + moment.minute
    return whole + (1 if moment.second or moment.microsecond else 0)


def _local_moment(instant: float, zone: ZoneInfo) -> dt.datetime:
    """Naive local time of `instant`, never before it: datetime keeps microseconds, and rounding a
    moment 0.1 us after a whole minute down onto the minute would count that minute's firing in."""
    aware = dt.datetime.fromtimestamp(instant, zone)
    if aware.timestamp() < instant:
        aware += dt.timedelta(microseconds=1)
    return aware.replace(tzinfo=None)


def count_starts(cron: str, zone: ZoneInfo, exclude: frozenset[dt.date], start: float, end: float) -> int | None:
    """Firings of `cron` in `zone` at instants in [start, end), skipping the dates in `exclude`."""
    fields = _fields(cron)
    if fields is None or end <= start:
        return None if fields is None else 0
    times, days, months, weekdays = fields
    first = _local_moment(start, zone)
    last = _local_moment(end, zone)
    count = 0
    day = first.date()
    while day <= last.date():
        if day not in exclude and _day_matches(day, days, months, weekdays):
            low = _minute_of_day(first) if day == first.date() else 0
            high = _minute_of_day(last) if day == last.date() else MINUTES_PER_DAY
            count += max(0, bisect.bisect_left(times, high) - bisect.bisect_left(times, low))
        day += dt.timedelta(days=1)
    return count
