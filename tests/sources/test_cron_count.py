"""Counting a cron's firings from its fields, and what a calendar asks of the budget with it."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.sources import schedule
from adapter.sources.base import ExpansionBudget
from adapter.sources.cron_count import count_starts
from adapter.sources.schedule import BudgetExhausted, ScheduleSource, expand

START = dt.datetime(2024, 3, 6, 0, 0, tzinfo=dt.UTC).timestamp()  # days before New York's DST change

CRONS = [
    "* * * * *",
    "*/7 * * * *",
    "0 9 * * 1-5",
    "30 2 * * *",  # 02:30 does not exist in New York on 2024-03-10
    "15,45 */3 1,10,15 * 0",  # day of month OR Sunday
    "0 0 * 2,3 *",
    "5 4 * * 7",
]


def iterated(cron: str, zone: ZoneInfo, exclude: frozenset[dt.date], start: float, end: float) -> int:
    """The reference: croniter stepped one firing at a time, as expansion does."""
    it = croniter(cron, dt.datetime.fromtimestamp(start - 1, zone).replace(tzinfo=None))
    count = 0
    while True:
        naive = it.get_next(dt.datetime)
        instant = naive.replace(tzinfo=zone).timestamp()
        if instant >= end:
            return count
        if instant >= start and naive.date() not in exclude:
            count += 1


@settings(max_examples=60, deadline=None)
@given(
    cron=st.sampled_from(CRONS),
    zone=st.sampled_from(["UTC", "Asia/Seoul", "America/New_York"]),
    offset=st.floats(min_value=0, max_value=6 * 86400),
    span=st.floats(min_value=0, max_value=3 * 86400),
    exclude=st.sets(st.sampled_from([dt.date(2024, 3, d) for d in range(6, 16)]), max_size=2),
)
def test_the_count_matches_iterating(cron, zone, offset, span, exclude) -> None:
    tz = ZoneInfo(zone)
    start = START + offset
    counted = count_starts(cron, tz, frozenset(exclude), start, start + span)
    expected = iterated(cron, tz, frozenset(exclude), start, start + span)
    assert counted is not None
    # Exact, except for an hour's worth around a DST change on the first or last day.
    assert abs(counted - expected) <= 60, (counted, expected)
    if zone != "America/New_York":
        assert counted == expected


def test_crons_the_count_does_not_model_give_none() -> None:
    for cron in ("0 0 L * *", "0 0 * * 5#2", "0 0 15W * *"):
        try:
            croniter(cron)
        except Exception:  # noqa: BLE001 - a croniter version without W
            continue
        assert count_starts(cron, ZoneInfo("UTC"), frozenset(), START, START + 86400) is None


def test_a_calendar_the_budget_cannot_hold_is_refused_before_croniter_starts(monkeypatch) -> None:
    block = {"windows": [{"cron": "* * * * *", "duration": "1m", "values": {"n": 1}}]}
    config = ScheduleSource.parse_config(block, "spec.source.schedule")
    budget = ExpansionBudget(7_000)
    first = expand(config, START, take=lambda n: budget.take("first", n))
    budget.commit("first", len(first.items))  # 4 320 held, 2 680 left: not enough for another
    steps: list[float] = []
    real = schedule._cron_occurrences

    def counting(*args, **kwargs):
        for occurrence in real(*args, **kwargs):
            steps.append(occurrence[0])
            yield occurrence

    monkeypatch.setattr(schedule, "_cron_occurrences", counting)
    try:
        expand(config, START, take=lambda n: budget.take("second", n))
        raise AssertionError("the second calendar fits a budget it cannot fit")
    except BudgetExhausted as refused:
        assert refused.needed > 2_680
    assert steps == []  # before: 2 680 croniter steps to find out
    budget.abandon("second")
    assert budget.used == 4_320


def test_a_calendar_that_fits_exactly_still_fits() -> None:
    block = {"windows": [{"cron": "*/10 * * * *", "duration": "1m", "values": {"n": 1}}]}
    config = ScheduleSource.parse_config(block, "spec.source.schedule")
    size = len(expand(config, START).items)
    budget = ExpansionBudget(size)
    items = expand(config, START, take=lambda n: budget.take("only", n)).items
    budget.commit("only", len(items))
    assert len(items) == size and budget.used == size


def test_a_start_a_tenth_of_a_microsecond_after_a_firing_does_not_count_it() -> None:
    # Found by the test above: datetime rounded START + 1.19e-07 down onto the minute.
    tz = ZoneInfo("UTC")
    start = START + 1.192092896e-07
    assert count_starts("* * * * *", tz, frozenset(), start, start + 1.0) == 0
    assert count_starts("* * * * *", tz, frozenset(), START - 1.0, START + 1.192092896e-07) == 1
