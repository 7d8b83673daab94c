"""`prometheus` and `forecast` sources against a real Prometheus, plus config and error handling.

The server holds a synthetic daily sine per service (service-a: 100 + 50 sin, service-b: 10 + 5 sin,
period 1 day) and a real trace, ending at the fixture's `last_sample`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import socket
import time
from urllib.parse import parse_qs

import numpy as np
import pytest

from adapter.errors import SourceError, ValidationError
from adapter.sources.base import CommonSourceSettings, SourceContext
from adapter.sources.forecast import ForecastSource
from adapter.sources.prometheus import PrometheusClient, PrometheusSource, parse_endpoint, query_range
from tests.prometheus_fixture import DAY, synthetic
from tests.shared_data import shared_path
from tests.source_http_fixture import start_server

PATH = "spec.source.prometheus"


@pytest.fixture(scope="module")
def prom():
    from tests.prometheus_fixture import shared_prometheus

    return shared_prometheus()


def run(coro_factory):
    return asyncio.run(coro_factory())


def prometheus_source(block: dict, interval: float = 30.0, context: SourceContext | None = None):
    config = PrometheusSource.parse_config(block, PATH)
    return PrometheusSource(config, CommonSourceSettings(interval=interval, timeout=5.0), context or SourceContext())


def fetch_result(source, now: float):
    async def go():
        try:
            return await source.fetch(now)
        finally:
            await source.close()

    return run(go)


def fetch(source, now: float):
    return list(fetch_result(source, now).items)


# ---------------------------------------------------------------- against the real server


def test_instant_vector_gives_one_item_per_series_with_labels(prom):
    now = time.time()
    items = fetch(prometheus_source({"url": prom.url, "query": "prescaler_test_requests"}, interval=30), now)
    by_service = {i.labels["service"]: i for i in items}
    assert set(by_service) == {"service-a", "service-b"}
    for service, base in (("service-a", 100.0), ("service-b", 10.0)):
        item = by_service[service]
        assert (item.start, item.end) == (now, now + 30)
        assert item.labels["__name__"] == "prescaler_test_requests"
        # The newest sample (within the 5m lookback) is the sine at last_sample.
        assert item.values["value"] == pytest.approx(float(synthetic(np.array([prom.last_sample]), base)[0]), rel=1e-6)


def test_aggregation_query_and_scalar(prom):
    now = time.time()
    items = fetch(prometheus_source({"url": prom.url, "query": "sum(prescaler_test_requests)"}), now)
    expected = float(synthetic(np.array([prom.last_sample]), 110.0)[0])
    assert len(items) == 1 and items[0].labels == {} and items[0].values["value"] == pytest.approx(expected)
    items = fetch(prometheus_source({"url": prom.url, "query": "scalar(sum(prescaler_test_requests)) * 2"}), now)
    assert len(items) == 1 and items[0].values["value"] == pytest.approx(2 * expected)


def test_nan_samples_are_skipped_with_warning(prom):
    source = prometheus_source({"url": prom.url, "query": "prescaler_test_requests / 0 * 0"})
    result = fetch_result(source, time.time())
    items = result.items
    assert items == []
    assert len(result.warnings) == 2 and all("skipped sample nan" in w for w in result.warnings)


def test_bad_promql_gives_prometheus_error_text(prom):
    with pytest.raises(SourceError, match=r"prometheus query failed: bad_data: .*parse error"):
        fetch(prometheus_source({"url": prom.url, "query": "sum(rate(x[5m]"}), time.time())


def test_range_vector_instant_query_is_explained(prom):
    with pytest.raises(SourceError, match=r"range vector \(matrix\)"):
        fetch(prometheus_source({"url": prom.url, "query": "prescaler_test_requests[10m]"}), time.time())


def test_unreachable_server_is_a_source_error():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    with pytest.raises(SourceError, match=r"GET http://127.0.0.1:\d+/api/v1/query: cannot connect"):
        fetch(prometheus_source({"url": f"http://127.0.0.1:{port}", "query": "up"}), time.time())


def test_range_query_returns_aligned_history(prom):
    client = PrometheusClient(parse_endpoint({"url": prom.url}, PATH), SourceContext(), timeout=10)
    end = prom.last_sample
    start = end - DAY

    async def go():
        try:
            return await query_range(client, 'prescaler_test_requests{service="service-a"}', start, end, 300)
        finally:
            await client.aclose()

    ((labels, timestamps, values),) = run(go)
    assert labels["service"] == "service-a"
    assert timestamps[0] == start and timestamps[-1] == end and np.all(np.diff(timestamps) == 300)
    np.testing.assert_allclose(values, synthetic(timestamps, 100.0), rtol=1e-6)


def test_range_query_is_split_beyond_prometheus_point_limit(prom):
    # 2 days at 15s = 11,521 points: above Prometheus' 11,000 cap, so this needs two requests.
    client = PrometheusClient(parse_endpoint({"url": prom.url}, PATH), SourceContext(), timeout=10)
    end = prom.last_sample
    start = end - 2 * DAY

    async def go():
        try:
            return await query_range(client, 'prescaler_test_requests{service="service-b"}', start, end, 15)
        finally:
            await client.aclose()

    ((_, timestamps, values),) = run(go)
    assert timestamps.size == 2 * 86400 // 15 + 1
    assert np.all(np.diff(timestamps) == 15)
    assert np.all(np.isfinite(values))


def test_forecast_end_to_end_against_prometheus(prom):
    now = prom.last_sample + 30
    block = {
        "history": {"prometheus": {"url": prom.url, "query": "prescaler_test_requests", "step": "5m", "length": "3d"}},
        "horizon": "2h",
        "model": "auto",
        "quantile": 0.9,
    }
    source = ForecastSource(
        ForecastSource.parse_config(block, "spec.source.forecast"),
        CommonSourceSettings(interval=300, timeout=10),
        SourceContext(),
    )
    result = fetch_result(source, now)
    items = result.items
    assert result.note and list(result.warnings) == []
    for service, base in (("service-a", 100.0), ("service-b", 10.0)):
        mine = sorted((i for i in items if i.labels.get("service") == service), key=lambda i: i.start)
        assert len(mine) == 24  # 2h of 5m steps
        # History is read on a grid aligned to 5m; the last grid point is the aligned time at or
        # before now, the first forecast step follows it and is stretched back to start at now.
        aligned = math.floor(now / 300) * 300
        assert mine[0].start == now and mine[0].end == aligned + 600
        assert all(b.start == a.end for a, b in itertools.pairwise(mine))
        assert mine[-1].end >= now + 7200
        # A clean daily sine with 3 days of history: the forecast follows it closely.
        mid = np.array([i.end - 300 for i in mine])
        truth = synthetic(mid, base)
        forecast = np.array([i.values["forecast"] for i in mine])
        assert np.max(np.abs(forecast - truth)) < 0.05 * base
        assert all(i.values["lower"] <= i.values["forecast"] <= i.values["upper"] for i in mine)


def test_infinite_history_samples_are_gaps_with_a_warning(prom):
    """x / 0 is +Inf in Prometheus: such samples were dropped as gaps without a word."""
    # +Inf where service-a's sine is above 140 (part of each day), the plain value elsewhere;
    # service-b (10 + 5 sin) never gets there.
    query = "prescaler_test_requests / ((prescaler_test_requests > bool 140) == bool 0)"
    block = {
        "history": {"prometheus": {"url": prom.url, "query": query, "step": "5m", "length": "3d"}},
        "horizon": "1h",
        "model": "auto",
    }
    source = ForecastSource(
        ForecastSource.parse_config(block, "spec.source.forecast"),
        CommonSourceSettings(interval=300, timeout=10),
        SourceContext(),
    )
    result = fetch_result(source, prom.last_sample + 30)
    assert len(result.warnings) == 1, result.warnings
    (warning,) = result.warnings
    assert 'service="service-a"' in warning and "history samples are infinite" in warning
    infinite = int(warning.split(": ", 1)[1].split(" of ")[0])
    assert 100 < infinite < 600  # 3 days of 5m steps is 864; above 140 about a quarter of each day
    services = {i.labels.get("service") for i in result.items}
    assert services == {"service-a", "service-b"}  # still forecast, from the finite samples
    assert all(math.isfinite(i.values["forecast"]) for i in result.items)


def test_forecast_of_real_trace_is_plausible(prom):
    now = prom.last_sample + 30
    block = {
        "history": {
            "prometheus": {
                "url": prom.url,
                "query": 'prescaler_trace_requests{trace="elb"}',
                "step": "5m",
                "length": "4d",
            }
        },
        "horizon": "1h",
        "step": "10m",
    }
    source = ForecastSource(
        ForecastSource.parse_config(block, "spec.source.forecast"),
        CommonSourceSettings(interval=300, timeout=10),
        SourceContext(),
    )
    items = fetch(source, now)
    items.sort(key=lambda i: i.start)
    # 1h of 10m steps; the first one starts at now and may be longer (it bridges to the first step).
    assert len(items) == 6 and items[0].start == now and 0 < items[0].end - now <= 1200
    assert all(i.end - i.start == 600 for i in items[1:])
    assert all(b.start == a.end for a, b in itertools.pairwise(items))
    history = np.loadtxt(
        shared_path("data/traces/nab_aws_elb_request_count_8c0756_5min.csv"), delimiter=",", skiprows=1
    )[-1152:, 1]
    for item in items:
        # Plausible: inside the range the series has shown (with some room for the interval).
        assert history.min() - 1 <= item.values["forecast"] <= 2 * history.max()


# ---------------------------------------------------------------- fake server: error bodies, auth


def test_prometheus_error_body_with_http_400_and_html_proxy_page():
    error = {"status": "error", "errorType": "execution", "error": "query timed out in expression evaluation"}
    state, stop = start_server(
        {
            "/api/v1/query": (422, "application/json", json.dumps(error).encode()),
            "/p/api/v1/query": (502, "text/html", b"<html>Bad gateway</html>"),
        }
    )
    try:
        with pytest.raises(SourceError, match=r"prometheus query failed: execution: query timed out"):
            fetch(prometheus_source({"url": state.base_url, "query": "up"}), 1e9)
        with pytest.raises(SourceError, match=r"HTTP 502 from http://127.0.0.1:\d+/p/api/v1/query"):
            fetch(prometheus_source({"url": state.base_url + "/p/", "query": "up"}), 1e9)
    finally:
        stop()


def test_auth_headers_and_query_parameters(tmp_path):
    body = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": {"service": "a"}, "value": [1e9, "+Inf"]},
                {"metric": {"service": "b"}, "value": [1e9, "2.5"]},
            ],
        },
    }
    state, stop = start_server({"/api/v1/query": (200, "application/json", json.dumps(body).encode())})
    token_file = tmp_path / "token"
    token_file.write_text("file-token\n")
    secrets = {("mon", "prom", "password"): "pa55", ("mon", "prom", "token"): "secret-token"}
    context = SourceContext(secrets=lambda ns, n, k: secrets[(ns, n, k)])
    try:
        source = prometheus_source(
            {"url": state.base_url, "query": 'sum(rate(x{a="b"}[5m]))', "auth": {"bearerTokenFile": str(token_file)}}
        )
        result = fetch_result(source, 1_000_000_000.5)
        assert [(i.labels, i.values) for i in result.items] == [({"service": "b"}, {"value": 2.5})]
        assert list(result.warnings) == ['series {service="a"}: skipped sample inf']
        request = state.requests[-1]
        assert request["headers"]["Authorization"] == "Bearer file-token"
        assert parse_qs(request["query"])["query"] == ['sum(rate(x{a="b"}[5m]))']  # encoded, then decoded intact
        assert "time=1000000000.500" in request["query"]

        fetch(
            prometheus_source(
                {
                    "url": state.base_url,
                    "query": "up",
                    "auth": {
                        "basic": {
                            "username": "u",
                            "password": {"secretKeyRef": {"namespace": "mon", "name": "prom", "key": "password"}},
                        }
                    },
                },
                context=context,
            ),
            1e9,
        )
        assert state.requests[-1]["headers"]["Authorization"] == "Basic dTpwYTU1"  # base64("u:pa55")
        fetch(
            prometheus_source(
                {
                    "url": state.base_url,
                    "query": "up",
                    "auth": {"bearerToken": {"secretKeyRef": {"namespace": "mon", "name": "prom", "key": "token"}}},
                },
                context=context,
            ),
            1e9,
        )
        assert state.requests[-1]["headers"]["Authorization"] == "Bearer secret-token"
        with pytest.raises(SourceError, match=r"auth.bearerTokenFile: cannot read .*missing") as info:
            fetch(
                prometheus_source(
                    {"url": state.base_url, "query": "up", "auth": {"bearerTokenFile": str(tmp_path / "missing")}}
                ),
                1e9,
            )
        assert "file-token" not in str(info.value)
    finally:
        stop()


@pytest.mark.parametrize(
    "block,path,message",
    [
        ({"url": "http://p:9090"}, f"{PATH}.query", "required"),
        ({"url": "http://p:9090", "query": "  "}, f"{PATH}.query", "must not be empty"),
        ({"query": "up"}, f"{PATH}.url", "required"),
        ({"url": "http://p", "query": "up", "auth": {}}, f"{PATH}.auth", "exactly one of"),
        (
            {"url": "http://p", "query": "up", "auth": {"basic": {"username": "u"}}},
            f"{PATH}.auth.basic",
            "exactly one of password or passwordFile",
        ),
        (
            {"url": "http://p", "query": "up", "auth": {"bearerToken": {}}},
            f"{PATH}.auth.bearerToken.secretKeyRef",
            "required",
        ),
        (
            {
                "url": "http://p",
                "query": "up",
                "auth": {"bearerTokenFile": "/t"},
                "headers": [{"name": "authorization", "value": "x"}],
            },
            f"{PATH}.auth",
            "Authorization header",
        ),
        ({"url": "http://p", "query": "up", "step": "1m"}, f"{PATH}.step", "unknown field"),
    ],
)
def test_prometheus_config_errors(block, path, message):
    with pytest.raises(ValidationError) as info:
        PrometheusSource.parse_config(block, PATH)
    assert info.value.path == path and message in info.value.detail


def test_math_is_consistent_with_fixture():
    # Guard for the tests above: the fixture's sine has a one-day period.
    assert synthetic(np.array([0.0]), 100.0)[0] == pytest.approx(100.0)
    assert synthetic(np.array([DAY / 4]), 100.0)[0] == pytest.approx(150.0)
    assert math.isclose(synthetic(np.array([DAY]), 10.0)[0], 10.0, abs_tol=1e-9)
