"""A calendar's next expansion extends the last one; it must equal expanding from scratch."""

from __future__ import annotations

import datetime as dt

from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.sources import schedule
from adapter.sources.schedule import ScheduleSource, expand

PATH = "spec.source.schedule"
START = dt.datetime(2024, 3, 8, 0, 0, tzinfo=dt.UTC).timestamp()  # days before a New York DST change

WINDOWS = st.sampled_from(
    [
        {"cron": "*/7 * * * *", "duration": "3m"},
        {"cron": "30 2 * * *", "duration": "2h"},  # 02:30 New York does not exist on 2024-03-10
        {"cron": "0 9 * * 1-5", "duration": "8h", "exclude": ["2024-03-11"]},
        {"days": ["Mon", "Fri", "Sun"], "start": "22:00", "end": "02:00"},
        {"days": ["Sat"], "start": "01:30", "end": "03:30"},
    ]
)


def config(windows: list[dict], zone: str, lookahead: str):
    block = {
        "timeZone": zone,
        "lookahead": lookahead,
        "items": [{"start": START + 3600, "end": START + 7200, "values": {"n": 7}}],
        "windows": [{**w, "values": {"n": i}} for i, w in enumerate(windows)],
    }
    return ScheduleSource.parse_config(block, PATH)


@settings(max_examples=25, deadline=None)
@given(
    windows=st.lists(WINDOWS, min_size=1, max_size=3),
    zone=st.sampled_from(["UTC", "America/New_York", "Asia/Seoul"]),
    lookahead=st.sampled_from(["2h", "24h", "48h"]),
    steps=st.lists(st.floats(min_value=0, max_value=40_000), min_size=1, max_size=6),
)
def test_extending_equals_expanding_from_scratch(windows, zone, lookahead, steps) -> None:
    cfg = config(windows, zone, lookahead)
    now = START
    previous = expand(cfg, now)
    for step in steps:
        now += step
        extended = expand(cfg, now, previous=previous)
        assert extended.items == expand(cfg, now).items
        previous = extended


def test_a_spring_forward_gap_gives_each_instant_once_in_both_ways() -> None:
    # 02:00 and 02:07 New York do not exist on 2024-03-10; they land on 03:00 and 03:07, which the
    # real times after the gap have too. Found by the test above (steps 25 201 s, then 420 s).
    cfg = config([{"cron": "*/7 * * * *", "duration": "3m"}], "America/New_York", "48h")
    now = START
    previous = expand(cfg, now)
    for step in (25_201.0, 420.0):
        now += step
        extended = expand(cfg, now, previous=previous)
        fresh = expand(cfg, now)
        assert extended.items == fresh.items
        ids = [item.id for item in fresh.items]
        assert len(ids) == len(set(ids)), "an instant listed twice"
        previous = extended


def test_the_next_minute_computes_one_occurrence_not_the_whole_horizon(monkeypatch) -> None:
    cfg = config([{"cron": "* * * * *", "duration": "1m"}], "UTC", "48h")
    first = expand(cfg, START)
    assert len(first.items) > 4000
    made: list[float] = []
    real = schedule._cron_occurrences

    def counting(window, lo, hi, after=None):
        for start, end in real(window, lo, hi, after):
            made.append(start)
            yield start, end

    monkeypatch.setattr(schedule, "_cron_occurrences", counting)
    second = expand(cfg, START + 60, previous=first)
    assert made == [first.hi]  # the one window that entered the horizon
    assert second.items[-1].start == first.hi and len(second.items) == len(first.items)


def test_an_earlier_now_expands_from_scratch() -> None:
    cfg = config([{"cron": "*/5 * * * *", "duration": "1m"}], "UTC", "24h")
    later = expand(cfg, START + 7200)
    assert expand(cfg, START, previous=later).items == expand(cfg, START).items
