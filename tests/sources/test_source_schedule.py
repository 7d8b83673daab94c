"""`schedule` source: cron and daily windows, midnight crossing, exclusions, DST and time zones.

Expected instants are written independently of the code: as explicit UTC datetimes worked out from
the zone's known offsets (e.g. New York is UTC-5 in winter, UTC-4 in summer; Seoul is UTC+9 always).
"""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
import yaml

from adapter.errors import ValidationError
from adapter.sources.base import CommonSourceSettings, SourceContext
from adapter.sources.schedule import ScheduleSource

PATH = "spec.source.schedule"


def utc(*args: int) -> float:
    return dt.datetime(*args, tzinfo=dt.UTC).timestamp()


def expand(block: dict, now: float):
    source = ScheduleSource(
        ScheduleSource.parse_config(block, PATH), CommonSourceSettings(interval=60), SourceContext()
    )
    return list(asyncio.run(source.fetch(now)).items)


def windows_of(items, index=None):
    return [(i.start, i.end) for i in items if index is None or (i.id or "").startswith(f"window{index}@")]


def test_cron_window_in_seoul():
    block = {
        "timeZone": "Asia/Seoul",
        "windows": [{"cron": "30 10 * * 1-5", "duration": "10m", "values": {"scheduledMessage": 5000}}],
    }
    now = utc(2024, 11, 21, 0, 0)  # Thursday 09:00 in Seoul
    items = expand(block, now)
    # Window overlapping [now - 1 day, now + 2 days]: Wed, Thu, Fri at 10:30 KST = 01:30 UTC.
    assert windows_of(items) == [
        (utc(2024, 11, 20, 1, 30), utc(2024, 11, 20, 1, 40)),
        (utc(2024, 11, 21, 1, 30), utc(2024, 11, 21, 1, 40)),
        (utc(2024, 11, 22, 1, 30), utc(2024, 11, 22, 1, 40)),
    ]
    assert all(dict(i.values) == {"scheduledMessage": 5000.0} for i in items)


def test_daily_window_with_days_and_midnight_crossing():
    block = {"windows": [{"days": ["Fri", "Sat"], "start": "23:00", "end": "01:30", "values": {"n": 3}}]}
    now = utc(2024, 6, 7, 12, 0)  # a Friday, UTC
    items = expand(block, now)
    assert windows_of(items) == [
        (utc(2024, 6, 7, 23, 0), utc(2024, 6, 8, 1, 30)),  # Friday night into Saturday
        (utc(2024, 6, 8, 23, 0), utc(2024, 6, 9, 1, 30)),  # Saturday night into Sunday
    ]


def test_window_started_before_lookback_but_still_running_is_kept():
    # 22:00-06:00 every day; at 01:00 the window of the previous evening is running.
    items = expand(
        {"lookahead": "1h", "windows": [{"start": "22:00", "end": "06:00", "values": {"n": 1}}]}, utc(2024, 6, 7, 1, 0)
    )
    assert (utc(2024, 6, 6, 22, 0), utc(2024, 6, 7, 6, 0)) in windows_of(items)
    # and nothing beyond now + 1h
    assert all(start < utc(2024, 6, 7, 2, 0) for start, _ in windows_of(items))


def test_excluded_dates_skip_windows_starting_that_day():
    block = {
        "timeZone": "Asia/Seoul",
        "lookahead": "72h",
        "exclude": ["2024-11-22"],
        "windows": [
            {"start": "20:00", "end": "22:00", "values": {"n": 1}},
            {"cron": "0 9 * * *", "duration": "1h", "values": {"n": 2}, "exclude": ["2024-11-23"]},
        ],
    }
    items = expand(block, utc(2024, 11, 21, 3, 0))  # 12:00 KST on Nov 21
    starts = {
        dt.datetime.fromtimestamp(s, dt.timezone(dt.timedelta(hours=9))).strftime("%m-%d %H:%M")
        for s, _ in windows_of(items)
    }
    assert "11-22 20:00" not in starts and "11-22 09:00" not in starts  # global exclusion
    assert "11-23 09:00" not in starts and "11-23 20:00" in starts  # window-only exclusion
    assert "11-21 20:00" in starts and "11-21 09:00" in starts


def test_dst_spring_forward_keeps_local_wall_clock():
    # New York switches to EDT on 2024-03-10 at 02:00. 20:00 local is 01:00 UTC before, 00:00 UTC after.
    block = {"timeZone": "America/New_York", "windows": [{"start": "20:00", "end": "22:00", "values": {"n": 1}}]}
    items = expand(block, utc(2024, 3, 10, 12, 0))
    got = windows_of(items)
    assert (utc(2024, 3, 10, 1, 0), utc(2024, 3, 10, 3, 0)) in got  # Mar 9 20:00 EST
    assert (utc(2024, 3, 11, 0, 0), utc(2024, 3, 11, 2, 0)) in got  # Mar 10 20:00 EDT
    assert (utc(2024, 3, 12, 0, 0), utc(2024, 3, 12, 2, 0)) in got  # Mar 11 20:00 EDT


def test_dst_with_cron_and_fall_back():
    # Berlin leaves CEST on 2024-10-27 at 03:00 local. 08:15 local is 06:15 UTC before, 07:15 UTC after.
    block = {"timeZone": "Europe/Berlin", "windows": [{"cron": "15 8 * * *", "duration": "5m", "values": {"n": 1}}]}
    got = windows_of(expand(block, utc(2024, 10, 27, 0, 0)))
    assert got == [
        (utc(2024, 10, 26, 6, 15), utc(2024, 10, 26, 6, 20)),
        (utc(2024, 10, 27, 7, 15), utc(2024, 10, 27, 7, 20)),
        (utc(2024, 10, 28, 7, 15), utc(2024, 10, 28, 7, 20)),
    ]


def test_overnight_window_across_dst_change_has_wall_clock_length():
    # 00:00-06:00 on the spring-forward night is only 5 real hours.
    block = {
        "timeZone": "America/New_York",
        "windows": [{"days": ["Sun"], "start": "00:00", "end": "06:00", "values": {"n": 1}}],
    }
    ((start, end),) = windows_of(expand(block, utc(2024, 3, 10, 12, 0)))
    assert (start, end) == (utc(2024, 3, 10, 5, 0), utc(2024, 3, 10, 10, 0))


def test_per_window_time_zone_overrides_source_zone():
    block = {
        "timeZone": "UTC",
        "windows": [
            {"start": "09:00", "end": "10:00", "timeZone": "Asia/Seoul", "values": {"n": 1}},
            {"start": "09:00", "end": "10:00", "values": {"n": 2}},
        ],
    }
    items = expand(block, utc(2024, 1, 15, 12, 0))
    assert (utc(2024, 1, 16, 0, 0), utc(2024, 1, 16, 1, 0)) in windows_of(items, 0)
    assert (utc(2024, 1, 16, 9, 0), utc(2024, 1, 16, 10, 0)) in windows_of(items, 1)


def test_ids_are_stable_across_fetches():
    block = {"windows": [{"cron": "*/30 * * * *", "duration": "10m", "values": {"n": 1}}]}
    first = expand(block, utc(2024, 1, 15, 12, 0))
    second = expand(block, utc(2024, 1, 15, 12, 1))
    ids_first = {i.id: (i.start, i.end) for i in first}
    shared = [i for i in second if i.id in ids_first]
    assert len(shared) > 100 and all(ids_first[i.id] == (i.start, i.end) for i in shared)
    assert len({i.id for i in second}) == len(second)


def test_inline_items_rfc3339_unix_and_local():
    block = {
        "timeZone": "Asia/Seoul",
        "items": [
            {"start": "2024-11-21T10:30:00+09:00", "end": "2024-11-21T10:31:00Z", "values": {"n": 50}, "id": "a"},
            {"start": 1732152600, "end": 1732152660, "values": {"n": 1}},
            {"start": "2024-11-21T10:30:00", "end": "2024-11-21T10:45:00", "values": {"n": 2}},  # local time
            {"start": 1000, "end": 2000, "values": {"n": 9}},  # long past: not in the snapshot
        ],
    }
    items = expand(block, utc(2024, 11, 21, 0, 0))
    assert [(i.start, i.end, i.id) for i in items] == [
        (utc(2024, 11, 21, 1, 30), utc(2024, 11, 21, 10, 31), "a"),
        (1732152600.0, 1732152660.0, None),
        (utc(2024, 11, 21, 1, 30), utc(2024, 11, 21, 1, 45), None),
    ]


def test_yaml_manifest_with_unquoted_times_and_dates():
    block = yaml.safe_load("""
timeZone: UTC
exclude: [2024-06-08]
windows:
  - days: [Mon-Fri]
    start: 20:00
    end: 21:30
    values: {n: 1}
""")
    # PyYAML reads 20:00 as the sexagesimal integer 1200 and 2024-06-08 as a date; both must work.
    got = windows_of(expand(block, utc(2024, 6, 7, 12, 0)))  # Friday
    assert (utc(2024, 6, 7, 20, 0), utc(2024, 6, 7, 21, 30)) in got
    assert all(dt.datetime.fromtimestamp(s, dt.UTC).weekday() < 5 for s, _ in got)


def test_bare_number_below_sixty_is_refused_not_read_as_minutes():
    """`start: 5` was read as 00:05. A YAML 1.1 reader never produces 1-59 from a time (its
    sexagesimal form starts with 1-9: 00:05 stays a string), so such a number is someone's hour."""
    read = yaml.safe_load("a: 00:05\nb: 1:05\nc: 5\n")
    assert read == {"a": "00:05", "b": 65, "c": 5}
    block = {"windows": [{"start": read["c"], "end": "06:00", "values": {"n": 1}}]}
    with pytest.raises(ValidationError, match=r'bare number 5: write "05:00" for 5 o\'clock or "00:05"') as err:
        expand(block, utc(2024, 6, 7, 0, 0))
    assert err.value.path == f"{PATH}.windows[0].start"
    # The forms a YAML 1.1 reader does produce keep working: 00:05 (string) and 1:05 (65).
    got = windows_of(
        expand({"windows": [{"start": read["a"], "end": read["b"], "values": {"n": 1}}]}, utc(2024, 6, 7, 0, 0))
    )
    assert (utc(2024, 6, 7, 0, 5), utc(2024, 6, 7, 1, 5)) in got


def test_weekday_range_wrapping_the_week():
    block = {"windows": [{"days": ["Sat-Mon"], "start": "12:00", "end": "13:00", "values": {"n": 1}}]}
    got = windows_of(expand({**block, "lookahead": "168h"}, utc(2024, 6, 5, 0, 0)))  # Wednesday
    weekdays = sorted({dt.datetime.fromtimestamp(s, dt.UTC).strftime("%a") for s, _ in got})
    assert weekdays == ["Mon", "Sat", "Sun"]


def test_source_flags():
    assert ScheduleSource.never_stale is True and ScheduleSource.default_interval == 60.0


@pytest.mark.parametrize(
    "block,path,message",
    [
        ({}, PATH, "at least one of items or windows"),
        ({"timeZone": "Mars/Olympus", "windows": []}, f"{PATH}.timeZone", "unknown IANA time zone"),
        (
            {"windows": [{"cron": "61 * * * *", "duration": "1m", "values": {}}]},
            f"{PATH}.windows[0].cron",
            "not a 5-field cron",
        ),
        (
            {"windows": [{"cron": "0 0 * * * *", "duration": "1m", "values": {}}]},
            f"{PATH}.windows[0].cron",
            "not a 5-field cron",
        ),
        ({"windows": [{"cron": "0 9 * * *", "values": {}}]}, f"{PATH}.windows[0].duration", "required"),
        (
            {"windows": [{"cron": "0 9 * * *", "duration": "1m", "days": ["Mon"], "values": {}}]},
            f"{PATH}.windows[0].days",
            "not allowed with cron",
        ),
        (
            {"windows": [{"start": "25:00", "end": "10:00", "values": {}}]},
            f"{PATH}.windows[0].start",
            "expected a local time",
        ),
        ({"windows": [{"start": "10:00", "values": {}}]}, f"{PATH}.windows[0].end", "required"),
        (
            {"windows": [{"start": "10:00", "end": "11:00", "days": ["Funday"], "values": {}}]},
            f"{PATH}.windows[0].days[0]",
            "expected a day name",
        ),
        (
            {"windows": [{"start": "10:00", "end": "11:00", "values": {"n": "many"}}]},
            f"{PATH}.windows[0].values.n",
            "expected a number",
        ),
        ({"windows": [{"start": "10:00", "end": "11:00"}]}, f"{PATH}.windows[0].values", "required"),
        ({"exclude": ["25/12/2024"], "windows": []}, f"{PATH}.exclude[0]", "YYYY-MM-DD"),
        ({"items": [{"start": "tomorrow", "end": 5, "values": {}}]}, f"{PATH}.items[0].start", "RFC3339"),
        ({"items": [{"start": 200, "end": 100, "values": {}}]}, f"{PATH}.items[0]", "must be before end"),
        (
            {"lookahead": "10d", "windows": [{"start": "10:00", "end": "11:00", "values": {}}]},
            f"{PATH}.lookahead",
            "invalid duration",
        ),
        (
            {"windows": [{"start": "10:00", "end": "11:00", "values": {}, "colour": "red"}]},
            f"{PATH}.windows[0].colour",
            "unknown field",
        ),
    ],
)
def test_validation_errors_name_the_field(block, path, message):
    with pytest.raises(ValidationError) as info:
        ScheduleSource.parse_config(block, PATH)
    assert info.value.path == path
    assert message in info.value.detail


def test_full_virtual_metric_event_with_schedule_source():
    from adapter.resources import parse_virtual_metric_event
    from adapter.sources.registry import config_parsers

    doc = yaml.safe_load("""
apiVersion: prescaler.pingpong.ai/v1
kind: VirtualMetricEvent
metadata: {name: campaigns}
spec:
  source:
    schedule:
      timeZone: Asia/Seoul
      windows:
        - {cron: "30 10 * * 1-5", duration: 10m, values: {scheduledMessage: 5000}}
  metrics:
    - name: rps
      resource: {name: service-a, namespace: service-a}
      value: {expression: scheduledMessage * 2}
""")
    event = parse_virtual_metric_event(doc, config_parsers())
    assert event.source.kind == "schedule" and event.source.common.interval == 60.0
    assert event.source.config.windows[0].duration == 600.0
    doc["spec"]["source"]["schedule"]["windows"][0]["cron"] = "every day"
    with pytest.raises(ValidationError) as info:
        parse_virtual_metric_event(doc, config_parsers())
    assert (
        info.value.path == "spec.source.schedule.windows[0].cron" and info.value.obj == "VirtualMetricEvent/campaigns"
    )


@pytest.mark.parametrize("cron", ["0 0 30 2 *", "0 0 31 4 *", "0 0 31 2,4,6,9,11 *"])
def test_a_cron_that_never_occurs_is_refused_at_load(cron):
    """croniter accepts these, then failed every fetch with CroniterBadDateError (an internal error)."""
    block = {
        "windows": [{"start": "10:00", "end": "11:00", "values": {}}, {"cron": cron, "duration": "10m", "values": {}}]
    }
    with pytest.raises(ValidationError) as info:
        ScheduleSource.parse_config(block, PATH)
    assert info.value.path == f"{PATH}.windows[1].cron"
    assert f"'{cron}' never occurs" in info.value.detail


@pytest.mark.parametrize("cron", ["0 0 29 2 *", "0 0 * 2 1#5", "0 0 30 2 1"])
def test_rare_crons_still_load(cron):
    """February 29 (every 4 years), a fifth Monday in February (2044), or Mondays OR the 30th."""
    ScheduleSource.parse_config({"windows": [{"cron": cron, "duration": "10m", "values": {}}]}, PATH)


def test_a_croniter_failure_while_expanding_is_a_source_error(monkeypatch):
    from croniter import CroniterBadDateError

    import adapter.sources.schedule as schedule
    from adapter.errors import SourceError

    class Failing:
        def __init__(self, *args, **kwargs):
            pass

        def get_next(self, *args):
            raise CroniterBadDateError("failed to find next date")

    config = ScheduleSource.parse_config({"windows": [{"cron": "0 9 * * *", "duration": "1m", "values": {}}]}, PATH)
    monkeypatch.setattr(schedule, "croniter", Failing)
    source = ScheduleSource(config, CommonSourceSettings(interval=60), SourceContext())
    with pytest.raises(SourceError) as info:
        asyncio.run(source.fetch(utc(2024, 6, 7, 12, 0)))
    assert "windows[0]: cron '0 9 * * *' could not be expanded: failed to find next date" in str(info.value)
    assert info.value.retry_soon is False
