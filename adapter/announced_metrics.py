"""Announced values as Prometheus metrics, so the announcements of the past become history.

    prescaler_announced_value{virtualmetricevent="launch", value="audience"} 8

At every scrape: per VirtualMetricEvent whose source announces (every kind but `forecast`, whose items
are predictions, not announcements) and per value name in its current items, the sum of that value
over the items active now (start <= now < end), 0 when none is. Prometheus records it like any gauge,
and a `forecast` source's regressor reads it back with a range query:

    regressors:
      - name: audience
        history: {prometheus: {url: ..., query: 'prescaler_announced_value{virtualmetricevent="launch",value="audience"}'}}
        future: {api: {url: ...}}            # the endpoint the launch VirtualMetricEvent reads

Computed at scrape time from the engine's latest snapshots (no timer, never stale between fetches).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from adapter import observability as obs

METRIC = "prescaler_announced_value"
NOT_ANNOUNCEMENTS = ("forecast",)


class AnnouncedValues(Collector):
    def __init__(self, clock: Callable[[], float] = time.time):
        self.clock = clock
        self._engines: weakref.WeakSet[Any] = weakref.WeakSet()

    def watch(self, engine: Any) -> None:
        self._engines.add(engine)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            METRIC,
            "Sum of each announced value over the items of a VirtualMetricEvent "
            "active now (0 when none is): the history of announcements.",
            labels=["virtualmetricevent", "value"],
        )
        now = self.clock()
        for engine in list(self._engines):
            for name, values in sorted(announced_now(engine, now).items()):
                for value_name, total in sorted(values.items()):
                    family.add_metric([name, value_name], total)
        yield family


def announced_now(engine: Any, now: float) -> dict[str, dict[str, float]]:
    """VirtualMetricEvent -> value name -> sum over the items active at `now`."""
    out: dict[str, dict[str, float]] = {}
    # The loop thread may replace entries while a scrape runs: take a copy (retry if it changed mid-copy).
    for _ in range(3):
        try:
            states = list(engine.events.items())
            break
        except RuntimeError:
            continue
    else:
        return out
    for name, state in states:
        vme = state.vme
        if vme is None or vme.source.kind in NOT_ANNOUNCEMENTS:
            continue
        totals: dict[str, float] = {}
        for item in list(state.items):
            active = item.start <= now < item.end
            for value_name, value in item.values.items():
                totals[value_name] = totals.get(value_name, 0.0) + (float(value) if active else 0.0)
        if totals:
            out[name] = totals
    return out


COLLECTOR = AnnouncedValues()
obs.REGISTRY.register(COLLECTOR)


def export_announced_values(engine: Any) -> None:
    """Serve `engine`'s announced values on /metrics (prescaler's registry)."""
    COLLECTOR.watch(engine)


__all__ = ["COLLECTOR", "METRIC", "AnnouncedValues", "announced_now", "export_announced_values"]
