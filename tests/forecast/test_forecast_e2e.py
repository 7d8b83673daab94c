"""Issue goal: a forecast VirtualMetricEvent reading a real Prometheus serves forecast-driven values
through the API. Prometheus (Debian package) holds 4 days of a daily sine per service, loaded with
`promtool tsdb create-blocks-from openmetrics`; the forecast source fits it and the API serves
`upper * 1.1` for service-a, with a prometheus-source VME adding the current value on top."""

from __future__ import annotations

import math
import time

from adapter.quantity import parse_quantity
from tests.helpers import client, event_status, fetch_all, loaded_engine, metric, run
from tests.prometheus_fixture import shared_prometheus

V1 = "/apis/external.metrics.k8s.io/v1beta1"


def forecast_event(url: str) -> dict:
    return {
        "apiVersion": "prescaler.pingpong.ai/v1",
        "kind": "VirtualMetricEvent",
        "metadata": {"name": "baseline-forecast"},
        "spec": {
            "source": {
                "forecast": {
                    "history": {
                        "prometheus": {"url": url, "query": "prescaler_test_requests", "step": "5m", "length": "3d"}
                    },
                    "model": "auto",
                    "horizon": "2h",
                    "quantile": 0.9,
                },
                "interval": "5m",
                "timeout": "30s",
            },
            "metrics": [
                {
                    "name": "rps",
                    "resource": {"nameFromLabel": "service", "namespace": "shop"},
                    "value": {"expression": "upper * 1.1"},
                }
            ],
        },
    }


def expected_sine(t: float, base: float) -> float:
    # prometheus_fixture.synthetic: base + base/2 * sin(2 pi t / day)
    return base + 0.5 * base * math.sin(2 * math.pi * t / 86400)


def test_forecast_from_real_prometheus_served_through_the_api() -> None:
    prom = shared_prometheus()

    async def go():
        now = time.time()
        engine = await loaded_engine([metric("rps", leadTime="10m"), forecast_event(prom.url)], now=now)
        await fetch_all(engine)
        status = event_status(engine, "baseline-forecast")
        async with client(engine) as c:
            a = await c.get(f"{V1}/namespaces/shop/rps", params={"labelSelector": "resource=service-a"})
            b = await c.get(f"{V1}/namespaces/shop/rps", params={"labelSelector": "resource=service-b"})
            listing = await c.get(f"{V1}/namespaces/shop/rps")
        await engine.stop()
        return now, status, a, b, listing

    now, status, a, b, listing = run(go())
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True", status
    assert status["itemCount"] >= 2 * 20  # two series, 2 h of 5-minute steps each
    assert a.status_code == 200 and b.status_code == 200
    value_a = float(parse_quantity(a.json()["items"][0]["value"]))
    value_b = float(parse_quantity(b.json()["items"][0]["value"]))
    # The served value is the peak of upper*1.1 over the next 10 minutes: above the true series'
    # value there, and not absurdly so (the sine is exactly predictable from 3 days of history).
    true_peak_a = max(expected_sine(now + s, 100.0) for s in range(0, 601, 60))
    true_peak_b = max(expected_sine(now + s, 10.0) for s in range(0, 601, 60))
    assert true_peak_a * 0.95 <= value_a <= true_peak_a * 1.6, (value_a, true_peak_a)
    assert true_peak_b * 0.95 <= value_b <= true_peak_b * 1.6, (value_b, true_peak_b)
    # Targets come from the series' `service` label.
    assert [i["metricLabels"]["resource"] for i in listing.json()["items"]] == ["service-a", "service-b"]
