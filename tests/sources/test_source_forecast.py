"""`forecast` source with an HTTP history endpoint: formats, gaps, alignment, junk, config.

(The Prometheus-backed end-to-end test lives in test_source_prometheus.py beside its server.)
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math

import numpy as np
import pytest

from adapter.durations import DurationError
from adapter.errors import SourceError, ValidationError
from adapter.sources.base import CommonSourceSettings, SourceContext
from adapter.sources.forecast import ForecastSource, parse_history_document, parse_long_duration, regularize
from tests.source_http_fixture import start_server

PATH = "spec.source.forecast"
STEP = 300.0
NOW = 1_800_000_000.0  # a multiple of 300


def sine_history(days: float = 3, base: float = 100.0, end: float = NOW, step: float = STEP):
    times = end - step * np.arange(int(days * 86400 / step))[::-1]
    return times, base + 0.5 * base * np.sin(2 * math.pi * times / 86400)


@pytest.fixture
def server():
    state, stop = start_server({})
    yield state
    stop()


def forecast(block: dict, now: float = NOW):
    source = ForecastSource(
        ForecastSource.parse_config(block, PATH), CommonSourceSettings(interval=300, timeout=5), SourceContext()
    )

    async def go():
        try:
            return await source.fetch(now)
        finally:
            await source.close()

    result = asyncio.run(go())
    return list(result.items), result


def test_csv_history_gives_contiguous_future_items(server):
    times, values = sine_history()
    csv = "timestamp,value\n" + "\n".join(f"{t:.0f},{v:.6f}" for t, v in zip(times, values))
    server.routes["/h.csv"] = (200, "text/csv", csv.encode())
    items, result = forecast({"history": {"api": {"url": server.base_url + "/h.csv"}}, "horizon": "1h"}, NOW + 10)
    assert len(items) == 12 and items[0].start == NOW + 10 and items[0].end == NOW + 600
    assert all(b.start == a.end and b.end - b.start == STEP for a, b in itertools.pairwise(items))
    assert items[0].labels == {}
    truth = 100 + 50 * np.sin(2 * math.pi * np.array([i.end - STEP for i in items]) / 86400)
    assert np.max(np.abs(np.array([i.values["forecast"] for i in items]) - truth)) < 5.0
    assert result.note.startswith("{} ")


def test_json_history_with_labels_and_gaps(server):
    times, values = sine_history(base=10.0)
    values[100:130] = np.nan  # a gap of 2.5 hours, sent as null
    rows = [[t, None if math.isnan(v) else v] for t, v in zip(times.tolist(), values.tolist())]
    rows = [r for i, r in enumerate(rows) if i % 7 != 3]  # and some missing rows
    # JSON null marks a missing value; missing rows are simply absent.
    server.routes["/h"] = (
        200,
        "application/json",
        json.dumps({"history": rows, "labels": {"service": "service-a"}}).encode(),
    )
    items, _ = forecast({"history": {"api": {"url": server.base_url + "/h", "step": "5m"}}, "horizon": "30m"})
    assert len(items) == 6 and all(i.labels == {"service": "service-a"} for i in items)
    assert all(0 < i.values["forecast"] < 30 for i in items)


def test_history_ending_before_now_still_covers_the_horizon(server):
    times, values = sine_history(end=NOW - 3 * 3600)  # the endpoint is 3 hours behind
    server.routes["/h"] = (200, "application/json", json.dumps({"history": np.c_[times, values].tolist()}).encode())
    items, _ = forecast({"history": {"api": {"url": server.base_url + "/h"}}, "horizon": "1h"})
    assert items[0].start == NOW and items[-1].end >= NOW + 3600
    assert all(i.end > NOW for i in items)


def test_output_step_coarser_than_history_aggregates(server):
    times, values = sine_history()
    server.routes["/h"] = (200, "application/json", json.dumps({"history": np.c_[times, values].tolist()}).encode())
    items, _ = forecast({"history": {"api": {"url": server.base_url + "/h"}}, "horizon": "2h", "step": "30m"})
    assert len(items) == 4 and all(i.end - i.start == 1800 for i in items[1:])


@pytest.mark.parametrize(
    "body,message",
    [
        (b"<html>", r"not JSON or `timestamp,value` CSV: line 1: expected 2 columns"),
        (b'{"history": [[1, true]]}', r"number pairs"),
        (b'{"history": "yesterday"}', r"expected JSON \{\"history\""),
        (b'{"history": [[1, 2, 3]]}', r"\[timestamp, value\] pairs"),
        (b'{"history": [[1, "x"]]}', r"number pairs"),
        (b"timestamp,value\n1700000000,1\nnot,a,row\n", r"line 3: timestamp 'not' is neither"),
    ],
)
def test_junk_history_documents(server, body, message):
    server.routes["/h"] = (200, "text/plain", body)
    with pytest.raises(SourceError, match=message):
        forecast({"history": {"api": {"url": server.base_url + "/h"}}})


def test_millisecond_timestamps_are_reported(server):
    times, values = sine_history(days=1)
    server.routes["/h"] = (
        200,
        "application/json",
        json.dumps({"history": np.c_[times * 1000, values].tolist()}).encode(),
    )
    with pytest.raises(SourceError, match=r"milliseconds instead of seconds"):
        forecast({"history": {"api": {"url": server.base_url + "/h"}}})


def test_parse_history_document_formats():
    labels, ts, vs = parse_history_document(b"# comment\n100,1.5\n200,\n300,3\n", "u")
    assert labels == {} and ts.tolist() == [100, 200, 300] and np.isnan(vs[1]) and vs[2] == 3
    labels, ts, vs = parse_history_document(b'{"history": []}', "u")
    assert ts.size == 0


def test_regularize_bins_and_marks_gaps():
    ts = np.array([0, 300, 600, 1500, 1510], dtype=float)
    vs = np.array([1, 2, 3, 4, 6], dtype=float)
    last, grid = regularize(ts, vs, 300.0, None)
    # Grid ends at the newest timestamp (1510): points 1510, 1210, 910, 610, 310, 10.
    assert last == 1510
    np.testing.assert_allclose(grid, [1, 2, 3, np.nan, np.nan, 5])


def test_long_durations():
    assert parse_long_duration("14d") == 14 * 86400
    assert parse_long_duration("336h") == 14 * 86400
    assert parse_long_duration("1d12h") == 36 * 3600
    assert parse_long_duration("2w") == 14 * 86400
    assert parse_long_duration("1.5d") == 36 * 3600
    assert parse_long_duration("500ms") == 0.5
    with pytest.raises(DurationError, match=r"'14 days'"):
        parse_long_duration("14 days")


@pytest.mark.parametrize(
    "block,path,message",
    [
        ({}, f"{PATH}.history", "required"),
        ({"history": {}}, f"{PATH}.history", "exactly one of prometheus or api"),
        (
            {"history": {"api": {"url": "http://h/"}, "prometheus": {"url": "http://p", "query": "up"}}},
            f"{PATH}.history",
            "exactly one",
        ),
        ({"history": {"prometheus": {"url": "http://p"}}}, f"{PATH}.history.prometheus.query", "required"),
        (
            {"history": {"prometheus": {"url": "http://p", "query": "up", "length": "2 weeks"}}},
            f"{PATH}.history.prometheus.length",
            "invalid duration",
        ),
        (
            {"history": {"prometheus": {"url": "http://p", "query": "up", "step": "1m", "length": "2m"}}},
            f"{PATH}.history.prometheus.length",
            "at least 3 steps",
        ),
        (
            {"history": {"prometheus": {"url": "http://p", "query": "up", "step": "5m"}}, "step": "1m"},
            f"{PATH}.step",
            "must not be shorter than the history step",
        ),
        ({"history": {"api": {"url": "http://h/"}}, "model": "prophet"}, f"{PATH}.model", "is not one of"),
        ({"history": {"api": {"url": "http://h/"}}, "quantile": 1.5}, f"{PATH}.quantile", "between 0.5 and 1"),
        ({"history": {"api": {"url": "http://h/"}}, "horizon": "60d"}, f"{PATH}.horizon", "must be between"),
        ({"history": {"api": {"url": "http://h/", "query": "up"}}}, f"{PATH}.history.api.query", "unknown field"),
        (
            {"history": {"prometheus": {"url": "http://p", "query": "up", "step": "1s", "length": "30d"}}},
            f"{PATH}.history.prometheus.length",
            "more than 200000 points",
        ),
    ],
)
def test_config_errors(block, path, message):
    with pytest.raises(ValidationError) as info:
        ForecastSource.parse_config(block, PATH)
    assert info.value.path == path and message in info.value.detail


def test_config_defaults():
    config = ForecastSource.parse_config(
        {"history": {"prometheus": {"url": "http://p:9090", "query": "up", "length": "14d"}}}, PATH
    )
    assert (config.model, config.horizon, config.step, config.quantile, config.season) == (
        "auto",
        7200.0,
        None,
        0.9,
        None,
    )
    assert config.history.length == 14 * 86400 and config.history.step == 300
    assert ForecastSource.default_interval == 300.0


def test_one_bad_series_does_not_sink_the_others():
    source = ForecastSource(
        ForecastSource.parse_config({"history": {"api": {"url": "http://h/"}}, "horizon": "15m"}, PATH),
        CommonSourceSettings(interval=300),
        SourceContext(),
    )
    times, values = sine_history(days=3)
    flat = np.full_like(values, 7.0)
    series = [({"s": "good"}, times, values), ({"s": "short"}, times[-2:], values[-2:]), ({"s": "flat"}, times, flat)]
    from adapter.forecast import fit_predict_many

    calls = []

    def fit_many(grid, *args, **kwargs):
        calls.append(grid.shape)
        # Reject any batch holding the flat series, as a model might for a degenerate input.
        if np.any(np.all(grid == 7.0, axis=1)):
            raise ValueError("degenerate series")
        return fit_predict_many(grid, *args, **kwargs)

    items, notes, warnings = source._forecast_all(fit_many, series, STEP, NOW)
    assert {i.labels["s"] for i in items} == {"good"} and len(items) == 3
    assert any("short" in w and "only 2 history points" in w for w in warnings)
    assert any('{s="flat"}: degenerate series' in w for w in warnings)
    # good + flat share a grid: one batched call, then one per series to isolate the bad one.
    assert calls[0] == (2, times.size) and sorted(calls[1:]) == [(1, times.size), (1, times.size)]
    assert len(notes) == 1 and notes[0].startswith('{s="good"}')


def test_fetch_deadline_leaves_room_for_the_fit():
    config = ForecastSource.parse_config(
        {"history": {"prometheus": {"url": "http://p", "query": "up", "step": "15s", "length": "7d"}}}, PATH
    )
    source = ForecastSource(config, CommonSourceSettings(interval=300, timeout=5), SourceContext())
    # 7d at 15s = 40,320 points: five range requests of at most 10,000 points, plus the fit budget.
    assert source.fetch_deadline() == 5 * 5 + 300


def test_fit_runs_off_the_event_loop(server, monkeypatch):
    """The fit must run in a worker thread: here it waits for a signal that only the event loop can
    send while the fit is in progress. On the loop thread this would deadlock (and fail after 5 s)."""
    import threading

    import adapter.sources.forecast

    times, values = sine_history(days=1)
    server.routes["/h"] = (200, "application/json", json.dumps({"history": np.c_[times, values].tolist()}).encode())
    real = adapter.sources.forecast.fit_predict_many
    fitting, released = threading.Event(), threading.Event()

    def slow_fit(*args, **kwargs):
        fitting.set()
        released.wait(timeout=5)
        return real(*args, **kwargs)

    monkeypatch.setattr(adapter.sources.forecast, "fit_predict_many", slow_fit)
    source = ForecastSource(
        ForecastSource.parse_config({"history": {"api": {"url": server.base_url + "/h"}}}, PATH),
        CommonSourceSettings(interval=300, timeout=5),
        SourceContext(),
    )

    async def go():
        async def releaser():
            while not fitting.is_set():
                await asyncio.sleep(0.01)
            released.set()  # reached only if the loop keeps running during the fit

        try:
            result, _ = await asyncio.gather(source.fetch(NOW), releaser())
            return result.items
        finally:
            await source.close()

    items = asyncio.run(go())
    assert released.is_set() and items


@pytest.mark.parametrize(
    "body,message",
    [
        (b'{"history": [[1700000000, 1], [1700000300, Infinity], [1700000600, 3]]}', "history[1]: value Infinity"),
        (b'{"history": [[1700000000, 1], [1700000300, -Infinity]]}', "history[1]: value -Infinity"),
        (b'{"history": [[Infinity, 1], [1700000300, 2]]}', "history[0]: timestamp Infinity"),
    ],
)
def test_json_history_infinity_is_an_error_as_in_csv(body, message):
    """JSON Infinity used to become a gap silently while CSV `inf` failed with a clear error."""
    with pytest.raises(SourceError, match=r"not finite") as info:
        parse_history_document(body, "u")
    assert str(info.value).startswith(f"u: {message} is not finite")
    with pytest.raises(SourceError, match=r"line 3: value 'inf' is not finite"):
        parse_history_document(b"timestamp,value\n1700000000,1\n1700000300,inf\n", "u")
    labels, ts, vs = parse_history_document(b'{"history": [[1, 2], [2, NaN], [3, null]]}', "u")
    assert np.isnan(vs[1:]).all()  # gaps stay gaps


def _source(horizon: str = "30m") -> ForecastSource:
    return ForecastSource(
        ForecastSource.parse_config({"history": {"api": {"url": "http://h/"}}, "horizon": horizon}, PATH),
        CommonSourceSettings(interval=300),
        SourceContext(),
    )


def test_forecast_steps_beyond_the_value_bound_are_a_warning():
    """Steps beyond ±1e15 used to be dropped without a word: a fetch of 0 items that looked healthy."""
    from adapter.forecast import fit_predict_many

    times, values = sine_history(days=3)
    series = [({"s": "ok"}, times, values), ({"s": "huge"}, times, values * 1e14)]  # about 5e15..1.5e16
    items, _notes, warnings = _source()._forecast_all(fit_predict_many, series, STEP, NOW)
    assert {i.labels["s"] for i in items} == {"ok"}
    [warning] = [w for w in warnings if "huge" in w]
    assert 'series {s="huge"}: 6 of 6 forecast steps left out' in warning and "±1e+15" in warning


def test_a_forecast_entirely_beyond_the_value_bound_fails_the_fetch(server):
    times, values = sine_history(days=3)
    server.routes["/h"] = (
        200,
        "application/json",
        json.dumps({"history": np.c_[times, values * 1e14].tolist()}).encode(),
    )
    with pytest.raises(SourceError, match=r"no series could be forecast: .*6 of 6 forecast steps left out"):
        forecast({"history": {"api": {"url": server.base_url + "/h"}}, "horizon": "30m"})
