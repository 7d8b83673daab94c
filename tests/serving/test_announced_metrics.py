"""Announced values exported on /metrics: the history a forecast regressor reads back."""

from __future__ import annotations

from prometheus_client import generate_latest

from adapter import observability as obs
from adapter.announced_metrics import AnnouncedValues, announced_now, export_announced_values
from adapter.engine import Engine
from adapter.items import Item

NOW = 1_800_000_000.0


def vme(name: str, kind_block: dict, expression: str = "audience") -> dict:
    return {
        "apiVersion": "prescaler.pingpong.ai/v1",
        "kind": "VirtualMetricEvent",
        "metadata": {"name": name},
        "spec": {
            "source": kind_block,
            "metrics": [
                {"name": "rps", "resource": {"namespace": "shop", "name": "web"}, "value": {"expression": expression}}
            ],
        },
    }


def engine_with_items() -> Engine:
    engine = Engine(start_sources=False)
    engine.table.apply(vme("launch", {"api": {"url": "http://announcer.example/items"}}))
    engine.table.apply(
        vme("predicted", {"forecast": {"history": {"api": {"url": "http://history.example/h.csv"}}}}, "forecast")
    )
    engine.table.snapshot(
        "launch",
        [
            Item(start=NOW - 60, end=NOW + 600, values={"audience": 5.0}),
            Item(start=NOW - 30, end=NOW + 60, values={"audience": 2.0, "vip": 1.0}),
            Item(start=NOW + 3600, end=NOW + 7200, values={"audience": 100.0}),  # not yet: not counted
        ],
    )
    engine.table.snapshot("predicted", [Item(start=NOW - 60, end=NOW + 60, values={"forecast": 9.0})])
    return engine


def test_sums_values_of_items_active_now_and_zero_otherwise():
    engine = engine_with_items()
    assert engine.events["launch"].vme is not None, engine.events["launch"].error
    assert announced_now(engine, NOW) == {"launch": {"audience": 7.0, "vip": 1.0}}
    assert announced_now(engine, NOW + 120) == {"launch": {"audience": 5.0, "vip": 0.0}}
    assert announced_now(engine, NOW + 4000) == {"launch": {"audience": 100.0, "vip": 0.0}}


def test_forecast_items_are_not_announcements():
    engine = engine_with_items()
    assert engine.events["predicted"].vme is not None, engine.events["predicted"].error
    assert engine.events["predicted"].items  # it has items, they are just not announcements
    assert "predicted" not in announced_now(engine, NOW)


def test_exposed_in_prometheus_text_format():
    collector = AnnouncedValues(clock=lambda: NOW)
    collector.watch(engine_with_items())
    text = "".join(f"{m.name} {s.labels} {s.value}\n" for m in collector.collect() for s in m.samples)
    assert "prescaler_announced_value {'virtualmetricevent': 'launch', 'value': 'audience'} 7.0" in text


def test_server_registry_serves_the_metric():
    engine = engine_with_items()
    export_announced_values(engine)
    assert b"prescaler_announced_value" in generate_latest(obs.REGISTRY)
