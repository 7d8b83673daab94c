"""A publication that fails (memory running out, a bug) leaves the previous values served, says so in
the log and in a counter, and is retried as a full rebuild with backoff until it succeeds."""

from __future__ import annotations

import asyncio
import logging

import pytest

from adapter import observability as obs
from adapter import publisher as publisher_module
from adapter.engine import Engine
from adapter.items import Item
from adapter.labels import parse_selector
from adapter.pipeline.query import Values
from adapter.sources.base import FetchResult
from tests.helpers import entry, fetch_all, metric, run, schedule_event, settle

NOW = 1_900_000_000.0


def value(engine: Engine, resource: str) -> float:
    result = engine.query("rps", "ns", parse_selector(f"resource={resource}"))
    assert isinstance(result, Values)
    return result.values[0].value


def calendar(name: str, resource: str, n: float) -> dict:
    items = [{"start": NOW - 60, "end": NOW + 3600, "values": {"n": n}}]
    return schedule_event(name, items, [entry("ns", resource, "n")])


def failures() -> float:
    return obs.REGISTRY.get_sample_value("prescaler_timeline_recompute_failures_total") or 0.0


@pytest.mark.parametrize("path", ["publish_changes", "publish_targets_in_steps"])
def test_a_failed_publication_keeps_the_old_values_and_is_retried(monkeypatch, caplog, path: str) -> None:
    monkeypatch.setattr(publisher_module, "RETRY_DELAY", 0.05)
    real = getattr(publisher_module, path)
    # The retry is a full rebuild (publish_changes), so an item snapshot's path fails once only.
    expected = 2 if path == "publish_changes" else 1
    broken = {"left": 2}

    def flaky(*args, **kwargs):
        if broken["left"]:
            broken["left"] -= 1
            raise MemoryError("Unable to allocate 3.69 GiB")
        return real(*args, **kwargs)

    async def scenario() -> None:
        engine = Engine(clock=lambda: NOW, start_sources=False, rebuild_delay=0.0, snapshot_delay=0.0)
        await engine.start()
        engine.resync("VirtualMetric", [metric("rps")])
        engine.resync("VirtualMetricEvent", [calendar("cal", "web", 7)])
        await settle(engine)
        await fetch_all(engine)
        assert value(engine, "web") == 7
        before = failures()
        monkeypatch.setattr(publisher_module, path, flaky)
        if path == "publish_changes":  # an object change: whole partitions, in a thread
            engine.resync("VirtualMetric", [metric("rps", max=9)])
            served = 20.0  # clamped to max: 9 once published
        else:  # an item snapshot: targets on the loop, in pieces
            served = 9.0
        runner = engine.events["cal"].runner
        assert runner is not None

        async def fetch(now: float) -> FetchResult:
            return FetchResult([Item(NOW - 60, NOW + 3600, {"n": served})])

        monkeypatch.setattr(runner.source, "fetch", fetch)
        await runner.fetch_once()
        for _ in range(100):
            await asyncio.sleep(0.01)
            if failures() - before >= 1:
                break
        assert value(engine, "web") == 7  # the previous snapshot is still served
        for _ in range(300):
            await asyncio.sleep(0.01)
            if not engine.busy and value(engine, "web") == 9:
                break
        assert failures() - before == expected
        assert value(engine, "web") == 9  # retried (1 s, then 2 s: scaled down here) until it worked
        assert engine.publisher.failures == 0
        await engine.stop()

    with caplog.at_level(logging.ERROR, logger="prescaler.publisher"):
        run(scenario())
    messages = [r.getMessage() for r in caplog.records if r.name == "prescaler.publisher"]
    assert len(messages) == (2 if path == "publish_changes" else 1) and all(
        "MemoryError" in m and "previous values stay served" in m for m in messages
    )
