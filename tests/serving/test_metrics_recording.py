"""The operator's metrics are recorded where things happen: expression failures per event, queries per
metric and code (unknown names folded into one label value), served values, deleted events forgotten."""

from __future__ import annotations

from prometheus_client import generate_latest

from adapter import observability as obs
from tests.helpers import NOW, client, entry, loaded_engine, metric, run, schedule_event, settle

ITEM = {"start": NOW - 60, "end": NOW + 600, "values": {"n": 0}}
V1 = "/apis/external.metrics.k8s.io/v1beta1"


def sample(name: str, **labels: str) -> float:
    value = obs.REGISTRY.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_expression_failures_are_counted_per_event() -> None:
    before = sample("prescaler_expression_failures_total", event="divides")

    async def scenario() -> None:
        engine = await loaded_engine([metric("rps"), schedule_event("divides", [ITEM], [entry("ns", "web", "10 / n")])])
        await engine.stop()

    run(scenario())
    assert sample("prescaler_expression_failures_total", event="divides") - before >= 1


def test_queries_per_metric_and_code_and_served_value() -> None:
    ok_before = sample("prescaler_queries_total", metric="rps", code="200")
    unknown_before = sample("prescaler_queries_total", metric=obs.UNKNOWN_METRIC, code="404")

    async def scenario() -> None:
        engine = await loaded_engine(
            [metric("rps"), schedule_event("calendar", [{**ITEM, "values": {"n": 7}}], [entry("ns", "web", "n * 3")])]
        )
        async with client(engine) as c:
            assert (await c.get(f"{V1}/namespaces/ns/rps", params={"labelSelector": "resource=web"})).status_code == 200
            assert (await c.get(f"{V1}/namespaces/ns/no-such-metric-xyz")).status_code == 404
        await engine.stop()

    run(scenario())
    assert sample("prescaler_queries_total", metric="rps", code="200") - ok_before == 1
    assert sample("prescaler_queries_total", metric=obs.UNKNOWN_METRIC, code="404") - unknown_before == 1
    assert "no-such-metric-xyz" not in generate_latest(obs.REGISTRY).decode()
    assert sample("prescaler_served_value", metric="rps", namespace="ns", resource="web") == 21.0


def test_a_deleted_event_leaves_no_stale_series() -> None:
    async def scenario() -> None:
        engine = await loaded_engine([metric("rps"), schedule_event("gone", [ITEM], [entry("ns", "web", "n")])])
        obs.SOURCE_STALE.labels(event="gone").set(1)
        engine.resync("VirtualMetricEvent", [])
        await settle(engine)
        await engine.stop()

    run(scenario())
    assert obs.REGISTRY.get_sample_value("prescaler_source_stale", {"event": "gone"}) is None
