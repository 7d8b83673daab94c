"""`schedule` source: a calendar of known campaigns written in the manifest.

    schedule:
      timeZone: Asia/Seoul                 # IANA name, default UTC
      lookahead: 48h                       # how far ahead windows are expanded (default 2 days)
      exclude: ["2024-12-25"]              # dates (in the time zone) on which no window starts
      items:                               # absolute windows, unix seconds or RFC3339
        - {start: "2024-11-21T10:30:00+09:00", end: "2024-11-21T10:31:00+09:00", values: {n: 50}}
      windows:
        - {cron: "30 10 * * 1-5", duration: 10m, values: {scheduledMessage: 5000}}
        - {days: [Mon, Tue], start: "20:00", end: "22:00", values: {scheduledMessage: 800}}
        - {start: "23:00", end: "01:00", timeZone: Europe/Berlin, values: {n: 1}}   # crosses midnight

Recurring windows are wall-clock times: 20:00 local is 20:00 local on both sides of a DST change.
Cron expressions are therefore expanded on *naive local* time and each occurrence is then placed in
the zone; a local time skipped by a spring-forward gap maps to the instant one offset later (once:
where the real time after the gap falls on that instant too, it is one occurrence), and a time
repeated by a fall-back fold is taken once (its first occurrence), as most cron daemons do.

The source never goes stale: it needs nothing from outside. Its fetch can still fail, and say so in
status, when a calendar expands to more items than one object (MAX_ITEMS_PER_CALENDAR) or all
calendars of the server together (SourceContext.expansion_budget) may hold; expansion stops at that
bound instead of running to the end, and runs in a worker thread, off the event loop.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

from adapter.errors import SourceError, ValidationError
from adapter.fields import expect_mapping, read_duration, read_string, reject_unknown
from adapter.items import Item, ItemError, parse_item
from adapter.sources.base import FetchResult, Source
from adapter.sources.cron_count import count_starts
from adapter.sources.work import off_loop

DAY = 86400.0
DEFAULT_LOOKAHEAD = 2 * DAY
MAX_LOOKAHEAD = 31 * DAY
MAX_WINDOWS = 1000
MAX_INLINE_ITEMS = 10_000
# Expansion bound per window per fetch: "* * * * *" over 3 days is 4320, so this is generous.
MAX_OCCURRENCES = 20_000
# Items one calendar may expand to per fetch (inline items included).
MAX_ITEMS_PER_CALENDAR = 20_000

_DAY_NAMES = {
    name: i
    for i, names in enumerate(
        [
            ("mon", "monday"),
            ("tue", "tues", "tuesday"),
            ("wed", "wednesday"),
            ("thu", "thur", "thurs", "thursday"),
            ("fri", "friday"),
            ("sat", "saturday"),
            ("sun", "sunday"),
        ]
    )
    for name in names
}
_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?\Z")


@dataclass(frozen=True)
class CronWindow:
    index: int
    cron: str
    duration: float
    values: Mapping[str, float]
    zone: ZoneInfo
    exclude: frozenset[dt.date]


@dataclass(frozen=True)
class DailyWindow:
    index: int
    days: frozenset[int]  # 0 = Monday, the weekday of the window's *start*
    start: int  # seconds after local midnight
    end: int  # seconds after local midnight; <= start means the window ends the next day
    values: Mapping[str, float]
    zone: ZoneInfo
    exclude: frozenset[dt.date]


@dataclass(frozen=True)
class ScheduleConfig:
    zone: ZoneInfo
    items: tuple[Item, ...]
    windows: tuple[CronWindow | DailyWindow, ...]
    exclude: frozenset[dt.date]
    lookahead: float


class ExpansionLimit(Exception):
    """The expansion reached its bound; `limit` is the bound that was hit."""

    def __init__(self, limit: int):
        super().__init__(limit)
        self.limit = limit


class BudgetExhausted(Exception):
    """The server-wide expansion budget has no room for more items (`needed`: at least this many)."""

    def __init__(self, needed: int = 0):
        super().__init__(needed)
        self.needed = needed


# A calendar that expanded beyond its own limit does so again on the next fetch (its windows repeat),
# so for this long the next fetches fail with the same message without expanding again: a thousand
# such objects would otherwise keep the expansion thread (and through the GIL, the server) busy.
OVER_LIMIT_RECHECK_SECONDS = 3600.0
EXPANSION_DEADLINE = 600.0  # seconds a schedule fetch may wait for and use the source worker


class ScheduleSource(Source[ScheduleConfig]):
    kind = "schedule"
    never_stale = True
    default_interval = 60.0

    @classmethod
    def value_names(cls, config: ScheduleConfig) -> frozenset[str]:
        """Names written anywhere in the calendar, so a typo in an expression fails at load time."""
        names: set[str] = set()
        for item in config.items:
            names.update(item.values)
        for window in config.windows:
            names.update(window.values)
        return frozenset(names)

    @classmethod
    def parse_config(cls, spec: Mapping[str, Any], path: str) -> ScheduleConfig:
        reject_unknown(spec, ("timeZone", "items", "windows", "exclude", "lookahead"), path)
        zone = _zone(spec, path, ZoneInfo("UTC"))
        exclude = _dates(spec.get("exclude"), f"{path}.exclude")
        items = _inline_items(spec.get("items"), f"{path}.items", zone)
        windows = _windows(spec.get("windows"), f"{path}.windows", zone, exclude)
        lookahead = read_duration(spec, "lookahead", path, DEFAULT_LOOKAHEAD, minimum=60.0, maximum=MAX_LOOKAHEAD)
        if not items and not windows:
            raise ValidationError(path, "at least one of items or windows is required")
        return ScheduleConfig(zone=zone, items=items, windows=windows, exclude=exclude, lookahead=lookahead)

    def fetch_deadline(self) -> float:
        # Expanding is local work, bounded by the item limits, queued on the one source worker: with
        # thousands of calendars starting at once, most of a fetch is its wait in that queue. The
        # runner's usual deadline (timeout + 1 s) abandoned them there, only for each to queue again.
        return EXPANSION_DEADLINE

    def describe(self) -> str:
        config: ScheduleConfig = self.config
        return f"schedule ({len(config.items)} items, {len(config.windows)} windows, {config.zone.key})"

    # What the last failed expansion learnt: it went beyond the limit (when), or the budget refused
    # it after this many items (its next expansion needs at least that much room to be worth starting).
    _over_limit_at: float | None = None
    _refused_after = 0
    _expansion: Expansion | None = None  # the last one, extended by the next fetch (see Expansion)

    async def fetch(self, now: float) -> FetchResult:
        budget = self.context.expansion_budget
        taken_items = 0

        def take(count: int) -> bool:
            nonlocal taken_items
            granted = budget.take(self, count)
            taken_items += count if granted else 0
            return granted

        try:
            if self._over_limit_at is not None and now - self._over_limit_at < OVER_LIMIT_RECHECK_SECONDS:
                raise ExpansionLimit(MAX_ITEMS_PER_CALENDAR)  # the same calendar, the same answer
            if not budget.has_room(self, self._refused_after + 1):
                raise BudgetExhausted  # without starting: no room for more than it had when last refused
            if self.config.windows:
                previous = self._expansion
                asked = None if previous else ask_ahead(self.config, now, MAX_ITEMS_PER_CALENDAR, take)
                expansion = await off_loop(expand, self.config, now, MAX_ITEMS_PER_CALENDAR, take, previous, asked)
            else:
                # Only inline items (at most MAX_INLINE_ITEMS): a filter, cheaper than the thread hop.
                expansion = expand(self.config, now, MAX_ITEMS_PER_CALENDAR, take)
        except BudgetExhausted as exc:
            self._refused_after = max(self._refused_after, taken_items, exc.needed)
            budget.abandon(self)
            raise SourceError(
                f"the calendars of this server may expand to {budget.total} items in total "
                "and the others hold the rest; shorten lookahead or remove windows here or "
                "elsewhere",
                retry_soon=False,
            ) from None
        except ExpansionLimit as exc:
            if self._over_limit_at is None or now - self._over_limit_at >= OVER_LIMIT_RECHECK_SECONDS:
                self._over_limit_at = now
            budget.abandon(self)
            raise SourceError(
                f"the calendar expands to more than {exc.limit} items within its "
                f"lookahead ({self.config.lookahead:g}s); shorten lookahead or use fewer "
                "or less frequent windows",
                retry_soon=False,
            ) from None
        except BaseException:
            budget.abandon(self)
            raise
        self._over_limit_at, self._refused_after = None, 0
        items = expansion.items
        budget.commit(self, len(items))
        self._expansion = expansion
        return FetchResult(items=items)

    async def close(self) -> None:
        self.context.expansion_budget.release(self)


# Items taken from the shared budget at a time while expanding (fewer lock round trips); when the
# budget has no room for a whole step, exactly what is needed is taken, and a finished expansion
# holds exactly its items, so a thousand one-item calendars hold a thousand items, not a million.
_TAKE_STEP = 1024


def _no_budget(count: int) -> bool:
    return True


AHEAD_SHARE = 0.9  # of the counted items asked ahead: the count may be off around a DST change


def _items_ahead(config: ScheduleConfig, lo: float, hi: float) -> int:
    """Items the cron windows surely have in [lo, hi) (see adapter.sources.cron_count)."""
    total = 0
    for window in config.windows:
        if isinstance(window, CronWindow):
            counted = count_starts(window.cron, window.zone, window.exclude, lo - window.duration, hi)
            total += max(0, int(AHEAD_SHARE * counted) - 1) if counted else 0
    return total


def ask_ahead(config: ScheduleConfig, now: float, limit: int, take: Callable[[int], bool]) -> int:
    """Take (nearly) all the room an expansion from scratch needs before it starts; returns what it
    took. Refused here, a calendar costs microseconds; refused while expanding, as many croniter
    steps as there was room left. The source asks on the event loop, before the expansion queues for
    the worker: ten thousand refusals made there reached the loop as one burst of completions
    (0.4 s without an answer)."""
    lo, hi = now - DAY, now + config.lookahead
    ahead = _items_ahead(config, lo, hi) + sum(1 for item in config.items if item.end > lo and item.start < hi)
    if ahead > limit:
        raise ExpansionLimit(limit)
    if ahead and not take(ahead):
        raise BudgetExhausted(ahead)
    return ahead


@dataclass(frozen=True)
class Expansion:
    """One expansion: its horizon [lo, hi) and its items, inline ones and each window's in order.

    The next fetch extends it instead of starting over: the items still inside the new horizon are
    kept and only occurrences starting at or after the old `hi` are computed. A `* * * * *` window
    re-expanded every minute then costs one occurrence, not the 4 000 of its three-day horizon
    (10 000 such calendars kept a core busy with croniter)."""

    lo: float
    hi: float
    inline: tuple[Item, ...]
    windows: tuple[tuple[Item, ...], ...]

    @property
    def items(self) -> list[Item]:
        return [*self.inline, *(item for window in self.windows for item in window)]


def expand(
    config: ScheduleConfig,
    now: float,
    limit: int = MAX_ITEMS_PER_CALENDAR,
    take: Callable[[int], bool] = _no_budget,
    previous: Expansion | None = None,
    asked: int | None = None,
) -> Expansion:
    """Items overlapping [now - 1 day, now + lookahead], inline items first, then by window order;
    the same whether `previous` (an expansion of the same config at an earlier `now`) is given or not.
    `asked`: what ask_ahead already took from the budget for this expansion (from scratch).

    Raises ExpansionLimit as soon as there would be more than `limit` items, or when `take` (the
    shared budget, asked for items in steps) says no.
    """
    lo, hi = now - DAY, now + config.lookahead
    inline = tuple(item for item in config.items if item.end > lo and item.start < hi)
    if len(inline) > limit:
        raise ExpansionLimit(limit)
    if previous is not None and not (previous.lo <= lo and previous.hi <= hi):
        previous = None  # an earlier `now` (a clock set back): from scratch
    taken = 0

    def reserve(needed: int) -> None:
        nonlocal taken
        while taken < needed:
            step = _TAKE_STEP
            if not take(step):
                step = needed - taken
                if not take(step):
                    raise BudgetExhausted
            taken += step

    if previous is None:
        taken = asked if asked is not None else ask_ahead(config, now, limit, take)
    reserve(count := len(inline))
    windows: list[tuple[Item, ...]] = []
    for position, window in enumerate(config.windows):
        after = previous.hi if previous is not None else None
        out = [item for item in previous.windows[position] if item.end > lo] if previous is not None else []
        count += len(out)
        if count > limit:
            raise ExpansionLimit(limit)
        # From scratch, room for the first item is asked before croniter starts: a calendar the full
        # budget refuses then costs microseconds, not the hour of minutes iterated before `lo`.
        reserve(count if previous is not None else count + 1)
        occurrences = (
            _cron_occurrences(window, lo, hi, after)
            if isinstance(window, CronWindow)
            else _daily_occurrences(window, lo, hi, after)
        )
        for start, end in occurrences:
            if count >= limit:
                raise ExpansionLimit(limit)
            reserve(count := count + 1)
            # Deterministic id: re-expanding on the next fetch yields the same ids (no double count).
            out.append(Item(start=start, end=end, values=window.values, id=f"window{window.index}@{start:.0f}"))
        windows.append(tuple(out))
    return Expansion(lo, hi, inline, tuple(windows))


# ---------------------------------------------------------------- expansion


def _local_naive(ts: float, zone: ZoneInfo) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, zone).replace(tzinfo=None)


def _instant(naive: dt.datetime, zone: ZoneInfo) -> float:
    return naive.replace(tzinfo=zone).timestamp()


def _cron_occurrences(
    window: CronWindow, lo: float, hi: float, after: float | None = None
) -> Iterator[tuple[float, float]]:
    """(start, end) of the occurrences overlapping [lo, hi), in order; with `after`, only those
    starting at or after it (what an earlier expansion up to `after` did not have)."""
    # Start early enough that a window begun before `lo` but still running is found; the hour of
    # margin on both ends absorbs DST offset changes between naive and real time.
    begin = lo - window.duration if after is None else max(lo - window.duration, after)
    cursor = _local_naive(begin - 3600.0, window.zone)
    stop = _local_naive(hi + 3600.0, window.zone)
    last = -math.inf
    try:
        iterator = croniter(window.cron, cursor)
    except (CroniterError, ValueError, OverflowError) as exc:
        raise _cron_failure(window, exc) from None
    for _ in range(MAX_OCCURRENCES):
        try:
            naive = iterator.get_next(dt.datetime)
        except (CroniterError, ValueError, OverflowError) as exc:
            # Parsing checked that the expression occurs; still, a failure here is this window's, not
            # an internal error: the fetch fails cleanly and status names the window.
            raise _cron_failure(window, exc) from None
        if naive > stop:
            return
        if naive.date() in window.exclude:
            continue
        start = _instant(naive, window.zone)
        if start <= last:
            # A time skipped by a spring-forward gap lands one offset later, on an instant the
            # real time after the gap has too (*/7: 02:00 is 03:00): that instant is one occurrence.
            continue
        last = start
        end = start + window.duration
        if end > lo and start < hi and (after is None or start >= after):
            yield start, end
    raise ExpansionLimit(MAX_OCCURRENCES)  # did not reach the end of the lookahead


def _cron_failure(window: CronWindow, exc: Exception) -> SourceError:
    return SourceError(f"windows[{window.index}]: cron {window.cron!r} could not be expanded: {exc}", retry_soon=False)


def _daily_occurrences(
    window: DailyWindow, lo: float, hi: float, after: float | None = None
) -> Iterator[tuple[float, float]]:
    """Like _cron_occurrences, for days + start + end windows."""
    first = _local_naive(lo if after is None else max(lo, after), window.zone).date() - dt.timedelta(days=2)
    last = _local_naive(hi, window.zone).date() + dt.timedelta(days=1)
    day = first
    while day <= last:
        if day.weekday() in window.days and day not in window.exclude:
            midnight = dt.datetime.combine(day, dt.time())
            start = _instant(midnight + dt.timedelta(seconds=window.start), window.zone)
            end_day = midnight + dt.timedelta(days=1 if window.end <= window.start else 0)
            end = _instant(end_day + dt.timedelta(seconds=window.end), window.zone)
            if end > start and end > lo and start < hi and (after is None or start >= after):
                yield start, end
        day += dt.timedelta(days=1)


# ---------------------------------------------------------------- parsing


def _zone(obj: Mapping[str, Any], path: str, default: ZoneInfo) -> ZoneInfo:
    name = read_string(obj, "timeZone", path, max_length=128)
    if name is None:
        return default
    try:
        if name.startswith(("/", ".")) or ".." in name:
            raise ValueError
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValidationError(f"{path}.timeZone", f"unknown IANA time zone {name!r} (e.g. UTC, Asia/Seoul)") from None


def _dates(raw: Any, path: str) -> frozenset[dt.date]:
    if raw is None:
        return frozenset()
    if not isinstance(raw, list):
        raise ValidationError(path, "expected a list of dates YYYY-MM-DD")
    dates = set()
    for index, value in enumerate(raw):
        if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
            dates.add(value)  # YAML reads an unquoted 2024-12-25 as a date
            continue
        try:
            if not isinstance(value, str) or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
                raise ValueError
            dates.add(dt.date.fromisoformat(value))
        except ValueError:
            raise ValidationError(f"{path}[{index}]", f"expected a date YYYY-MM-DD, got {value!r}") from None
    return frozenset(dates)


def _inline_items(raw: Any, path: str, zone: ZoneInfo) -> tuple[Item, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValidationError(path, "expected a list of {start, end, values}")
    if len(raw) > MAX_INLINE_ITEMS:
        raise ValidationError(path, f"more than {MAX_INLINE_ITEMS} items")
    items = []
    for index, value in enumerate(raw):
        where = f"{path}[{index}]"
        entry = dict(expect_mapping(value, where))
        reject_unknown(entry, ("start", "end", "values", "id"), where)
        for key in ("start", "end"):
            entry[key] = _time_value(entry.get(key), f"{where}.{key}", zone)
        items.append(_item(entry, where))
    return tuple(items)


def _item(entry: Mapping[str, Any], where: str) -> Item:
    try:
        return parse_item(dict(entry), where)
    except ItemError as exc:
        field_path, _, message = str(exc).partition(": ")
        raise ValidationError(field_path, message) from None


def _time_value(value: Any, path: str, zone: ZoneInfo) -> Any:
    """Unix seconds, or an RFC3339 timestamp (one without an offset is read in the time zone)."""
    if isinstance(value, dt.datetime):  # YAML may already have parsed it
        moment = value
    elif isinstance(value, str):
        try:
            moment = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValidationError(path, f"expected unix seconds or an RFC3339 time, got {value!r}") from None
    else:
        return value  # numbers (and wrong types) are checked by parse_item
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)
    return moment.timestamp()


def _windows(raw: Any, path: str, zone: ZoneInfo, exclude: frozenset[dt.date]) -> tuple[CronWindow | DailyWindow, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValidationError(path, "expected a list of windows")
    if len(raw) > MAX_WINDOWS:
        raise ValidationError(path, f"more than {MAX_WINDOWS} windows")
    return tuple(_window(value, index, f"{path}[{index}]", zone, exclude) for index, value in enumerate(raw))


# An expression without an occurrence within this many years is refused: croniter's own horizon, so
# whatever it would fail to expand at fetch time. February 29 recurs within 8 years and a fifth
# Monday of February (`1#5`) within 28; `30 2` (February 30) or `31 4` (April 31) never.
CRON_HORIZON_YEARS = 50
_CRON_PROBE_START = dt.datetime(2024, 1, 1)


@functools.lru_cache(maxsize=4096)
def _cron_is_valid(cron: str) -> bool:
    # croniter's check expands the expression (about 0.2 ms); thousands of objects share a few crons.
    return bool(croniter.is_valid(cron))


@functools.lru_cache(maxsize=4096)
def _cron_occurs(cron: str) -> bool:
    """Whether a valid expression has an occurrence at all (croniter accepts `0 0 30 2 *`, then
    fails every expansion with CroniterBadDateError). A few ms when it has none."""
    try:
        croniter(cron, _CRON_PROBE_START, max_years_between_matches=CRON_HORIZON_YEARS).get_next(dt.datetime)
    except (CroniterError, ValueError, OverflowError):
        return False
    return True


def _window(raw: Any, index: int, path: str, zone: ZoneInfo, exclude: frozenset[dt.date]) -> CronWindow | DailyWindow:
    entry = expect_mapping(raw, path)
    reject_unknown(entry, ("cron", "duration", "days", "start", "end", "values", "timeZone", "exclude"), path)
    window_zone = _zone(entry, path, zone)
    window_exclude = exclude | _dates(entry.get("exclude"), f"{path}.exclude")
    if "values" not in entry:
        raise ValidationError(f"{path}.values", "required: a map of name: number")
    values = _item({"start": 1, "end": 2, "values": entry["values"]}, path).values
    if "cron" in entry:
        for key in ("days", "start", "end"):
            if key in entry:
                raise ValidationError(
                    f"{path}.{key}", "not allowed with cron (use either cron + duration or days + start + end)"
                )
        cron = read_string(entry, "cron", path, required=True, max_length=256) or ""
        if len(cron.split()) != 5 or not _cron_is_valid(cron):
            raise ValidationError(
                f"{path}.cron",
                f"{cron!r} is not a 5-field cron expression (minute hour day-of-month month day-of-week)",
            )
        if not _cron_occurs(cron):
            raise ValidationError(
                f"{path}.cron",
                f"{cron!r} never occurs (no match within {CRON_HORIZON_YEARS} years): a day of month "
                "that the months given do not have? (30 2 is February 30, 31 4 is April 31)",
            )
        if "duration" not in entry:
            raise ValidationError(f"{path}.duration", "required with cron (e.g. 10m)")
        duration = read_duration(entry, "duration", path, 0.0, minimum=1.0, maximum=7 * DAY)
        return CronWindow(
            index=index, cron=cron, duration=duration, values=values, zone=window_zone, exclude=window_exclude
        )
    if "duration" in entry:
        raise ValidationError(f"{path}.duration", "only allowed with cron; a daily window uses start and end")
    for key in ("start", "end"):
        if key not in entry:
            raise ValidationError(f"{path}.{key}", "required (HH:MM), or give cron + duration instead")
    start = _clock(entry["start"], f"{path}.start", allow_24=False)
    end = _clock(entry["end"], f"{path}.end", allow_24=True)
    return DailyWindow(
        index=index,
        days=_days(entry.get("days"), f"{path}.days"),
        start=start,
        end=end,
        values=values,
        zone=window_zone,
        exclude=window_exclude,
    )


def _clock(value: Any, path: str, allow_24: bool) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 86400:
        # YAML 1.1 reads an unquoted 20:00 as the sexagesimal integer 1200 (minutes); accept that.
        # Its sexagesimal form needs a leading digit 1-9 (00:05 stays a string), so 1-59 can only be
        # a number someone wrote, most likely an hour: reading `start: 5` as 00:05 was a silent
        # misreading.
        if 0 < value < 60:
            raise ValidationError(
                path,
                f'expected a local time HH:MM, got the bare number {value}: write "{value:02d}:00" '
                f'for {value} o\'clock or "00:{value:02d}" for {value} minutes past midnight',
            )
        return value * 60 if value < 1440 else _bad_clock(value, path)
    match = _CLOCK.match(value) if isinstance(value, str) else None
    if not match:
        return _bad_clock(value, path)
    hours, minutes, seconds = int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)
    if allow_24 and (hours, minutes, seconds) == (24, 0, 0):
        return 86400
    if hours > 23 or minutes > 59 or seconds > 59:
        return _bad_clock(value, path)
    return hours * 3600 + minutes * 60 + seconds


def _bad_clock(value: Any, path: str) -> int:
    raise ValidationError(path, f"expected a local time HH:MM (00:00-23:59), got {value!r}")


def _days(raw: Any, path: str) -> frozenset[int]:
    if raw is None:
        return frozenset(range(7))
    if not isinstance(raw, list) or not raw:
        raise ValidationError(path, "expected a non-empty list of days such as [Mon, Tue] or [Mon-Fri]")
    days: set[int] = set()
    for index, value in enumerate(raw):
        text = value.strip().lower() if isinstance(value, str) else None
        first, _, last = (text or "").partition("-")
        if text is None or first not in _DAY_NAMES or (last and last not in _DAY_NAMES):
            raise ValidationError(
                f"{path}[{index}]", f"expected a day name (Mon..Sun) or range (Mon-Fri), got {value!r}"
            )
        a, b = _DAY_NAMES[first], _DAY_NAMES[last or first]
        days.update(range(a, b + 1) if a <= b else [*range(a, 7), *range(b + 1)])
    return frozenset(days)
