"""Metric values on simulated time: what the HPA would read at each tick.

Three producers feed the controller:
- replay series: the value per tick given directly (exactness checks);
- traffic: the current demand, as an External metric (sum) or a Pods metric (demand / ready pods);
- prescaler: VirtualMetric + VirtualMetricEvent manifests evaluated with the server's pipeline
  (`adapter.pipeline`): each source's item snapshots over simulated time -> contributions ->
  published timelines -> V(t), read at `tick - L_adapter`.

Source kinds in the simulator: `schedule` calls the real ScheduleSource.fetch(now) at simulated time
every source interval; `api`/`prometheus` replay recorded responses (`recorded: {vme: [{at, items}]}`,
the latest response at or before a time is the snapshot); `forecast` refits on the trace's past
every `refit` (the history the real source would read from Prometheus).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from adapter.errors import ValidationError
from adapter.items import Item, dedupe
from adapter.pipeline.contributions import Contributions, EntryPlan, compile_entries, compute_contributions
from adapter.pipeline.deadband import ToleranceSteps
from adapter.pipeline.publish import EMPTY, EventFeed, build_published
from adapter.pipeline.query import TargetValue, values_over
from adapter.quantity import format_milli
from adapter.resources import VirtualMetric, VirtualMetricEvent
from adapter.sim.controller import PodsReading, Reading
from adapter.sim.hpa_band import band_for
from adapter.sim.hpa_spec import HpaSpec
from adapter.sim.quantity import MAX_INT64, to_milli
from adapter.sim.traffic import Trace
from adapter.sources.forecast import forecast_items

# ---------------------------------------------------------------- value encodings


def hpa_milli(value: float) -> int:
    """A value read as the HPA reads a quantity written with all its digits ."""
    return min(to_milli(float(value)), MAX_INT64)


def served_milli(value: float) -> int:
    """A prescaler value as the HPA sees it: the adapter serves `format_milli(V)`."""
    return to_milli(format_milli(float(value)))


def encode(values: np.ndarray, encoder: Callable[[float], int]) -> list[int | None]:
    """Per-tick milli values; NaN (a failed fetch) becomes None."""
    return [None if math.isnan(v) else encoder(v) for v in values.tolist()]


# ---------------------------------------------------------------- per-tick feeds for the controller


class Feed:
    """One HPA metric's readings over the tick grid."""

    name: str

    def reading(self, k: int, ready: int, unready: int, spec: int | None = None) -> Reading:
        """The reading at tick k; `spec` is spec.replicas before the reconcile (None: unknown)."""
        raise NotImplementedError

    def value(self, k: int, ready: int) -> float | None:
        """The metric value to report in the output (None = failed)."""
        raise NotImplementedError


class ExternalFeed(Feed):
    """An External metric: the summed value per tick (NaN = the fetch fails)."""

    def __init__(self, name: str, values: np.ndarray, milli: list[int | None]):
        self.name = name
        self.values = np.asarray(values, dtype=float)
        self.milli = milli
        if len(self.milli) != len(self.values):
            raise ValueError("values and milli differ in length")

    @classmethod
    def from_values(cls, name: str, values: np.ndarray, encoder: Callable[[float], int] = hpa_milli) -> ExternalFeed:
        values = np.asarray(values, dtype=float)
        return cls(name, values, encode(values, encoder))

    def reading(self, k: int, ready: int, unready: int, spec: int | None = None) -> Reading:
        return self.milli[k]

    def value(self, k: int, ready: int) -> float | None:
        v = float(self.values[k])
        return None if math.isnan(v) else v


class PodsTrafficFeed(Feed):
    """A Pods metric from traffic: every ready pod reports demand / ready; starting pods are Pending."""

    def __init__(self, name: str, demand: np.ndarray):
        self.name = name
        self.demand = np.asarray(demand, dtype=float)

    def reading(self, k: int, ready: int, unready: int, spec: int | None = None) -> Reading:
        if ready <= 0:
            return PodsReading((), unready=unready)
        per_pod = hpa_milli(float(self.demand[k]) / ready)
        return PodsReading((per_pod,) * ready, unready=unready)

    def value(self, k: int, ready: int) -> float | None:
        return float(self.demand[k]) / ready if ready > 0 else None


class SteppedFeed(Feed):
    """A prescaler metric with `stepPastTolerance`: V(t) from the pipeline, then stepped past the HPA's
    dead band at each tick with the simulated HPA and workload (status = ready + starting pods), by
    the same rule the server applies to an HPA's query (adapter.pipeline.deadband)."""

    def __init__(self, name: str, values: np.ndarray, hpa: HpaSpec, resource: str, vm: VirtualMetric):
        self.name = name
        self.values = np.asarray(values, dtype=float)
        self.hpa, self.resource, self.vm = hpa, resource, vm
        self.steps = ToleranceSteps()
        self.served: list[float | None] = [None] * len(self.values)
        self.stepped = 0  # ticks whose value was stepped

    def reading(self, k: int, ready: int, unready: int, spec: int | None = None) -> Reading:
        v = float(self.values[k])
        if math.isnan(v):
            return None  # a failed fetch stays one
        band = band_for(self.hpa, self.name, self.resource, ready + unready, spec, ready)
        self.steps.lookup = lambda metric, namespace, resource: band
        item = TargetValue(self.resource, self.hpa.namespace, {"resource": self.resource}, v)
        (out,), _ = self.steps.apply((item,), self.vm)
        self.served[k] = out.value
        self.stepped += out.value != v
        return served_milli(out.value)

    def value(self, k: int, ready: int) -> float | None:
        return self.served[k]


# ---------------------------------------------------------------- prescaler manifests


@dataclass(frozen=True)
class RecordedResponse:
    at: float  # absolute simulated time of the response
    items: tuple[Item, ...]


@dataclass(frozen=True)
class ForecastSettings:
    refit: float = 1800.0  # seconds between refits
    lookback: float = 14 * 86400.0  # trailing history given to each fit
    model: str = "auto"
    season: float | None = None
    quantile: float = 0.9
    horizon: float | None = None  # default: refit + the VirtualMetric's leadTime + one trace step
    unserved_cost: float | None = None  # set: the quantile is chosen per refit by backtest cost


@dataclass
class Snapshots:
    """One source's item snapshots over time: `items[i]` holds from `times[i]` to `times[i+1]`."""

    times: list[float] = field(default_factory=list)
    items: list[tuple[Item, ...]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, t: float, items: Sequence[Item]) -> None:
        snapshot = tuple(dedupe(list(items)))
        if self.items and self.items[-1] == snapshot:
            return  # unchanged: no rebuild needed
        self.times.append(t)
        self.items.append(snapshot)


ForecastFn = Callable[..., Any]


class PrescalerModel:
    """Evaluates VirtualMetrics for one target over simulated time, as the adapter would serve them."""

    def __init__(
        self,
        virtual_metrics: Sequence[VirtualMetric],
        events: Sequence[VirtualMetricEvent],
        recorded: Mapping[str, Sequence[RecordedResponse]] | None = None,
        trace: Trace | None = None,
        forecast: ForecastSettings | None = None,
    ):
        # As on the server, a contested metric name goes to the first VirtualMetric by name (objects
        # in a scenario have no creation time).
        self.metrics = {vm.metric_name: vm for vm in sorted(virtual_metrics, key=lambda vm: vm.name, reverse=True)}
        self._compiled: dict[str, list[EntryPlan]] = {}
        self.events = list(events)
        self.recorded = dict(recorded or {})
        self.trace = trace
        self.forecast = forecast or ForecastSettings()
        self.notes: list[str] = []
        self._snapshots: dict[tuple[str, float, float, float], Snapshots] = {}

    def values(self, metric: str, namespace: str, resource: str, times: np.ndarray) -> np.ndarray:
        """V(t) at each time (sorted ascending) for the target `namespace/resource`.

        Runs the server's pipeline: each source snapshot's contributions (adapter.pipeline.contributions),
        published for the target's partition (adapter.pipeline.publish) and read as a query reads it."""
        if metric not in self.metrics:
            raise ValidationError("metrics", f"no VirtualMetric serves the metric {metric!r}")
        times = np.asarray(times, dtype=float)
        if len(times) == 0:
            return np.empty(0)
        lo, hi = float(times[0]), float(times[-1])
        lead = self.metrics[metric].lead_time
        partition = {(metric, namespace)}
        plans = []
        for vme in self._events_for(metric, namespace, resource):
            plans.append((vme, self._entries(vme), self._snapshots_for(vme, lo, hi, lead)))
        # Every time any snapshot changes, the served timeline changes: rebuild, read the ticks until
        # the next change.
        change_times = sorted({t for _, _, s in plans for t in s.times} | {-math.inf})
        out = np.empty(len(times))
        cache: dict[tuple[int, int], Contributions] = {}
        for i, change in enumerate(change_times):
            until = change_times[i + 1] if i + 1 < len(change_times) else math.inf
            a = int(np.searchsorted(times, change, side="left"))
            b = int(np.searchsorted(times, until, side="left"))
            if a >= b:
                continue
            feeds = []
            for p, (vme, entries, snaps) in enumerate(plans):
                j = int(np.searchsorted(snaps.times, change, side="right")) - 1
                if j < 0:
                    continue
                if (p, j) not in cache:
                    cache[(p, j)] = compute_contributions(entries, snaps.items[j])
                feeds.append(EventFeed(vme.name, vme.labels, entries, cache[(p, j)].by_key))
            published = build_published(self.metrics, feeds, change, EMPTY, partition)
            out[a:b] = values_over(published, metric, namespace, resource, times[a:b])
        return out

    def _events_for(self, metric: str, namespace: str, resource: str) -> list[VirtualMetricEvent]:
        return [
            vme
            for vme in self.events
            if any(
                e.metric == metric
                and e.resource.namespace == namespace
                and (e.resource.name == resource or e.resource.name_from_label is not None)
                for e in vme.metrics
            )
        ]

    def _entries(self, vme: VirtualMetricEvent) -> list[EntryPlan]:
        if vme.name not in self._compiled:
            self._compiled[vme.name] = compile_entries(vme)
        return self._compiled[vme.name]

    # -------------------------------------------------------------- snapshots per source kind

    def _snapshots_for(self, vme: VirtualMetricEvent, lo: float, hi: float, lead: float) -> Snapshots:
        key = (vme.name, lo, hi, lead)
        if key not in self._snapshots:
            kind = vme.source.kind
            if kind == "schedule":
                snaps = self._schedule_snapshots(vme, lo, hi)
            elif kind == "forecast":
                snaps = self._forecast_snapshots(vme, lo, hi, lead)
            else:
                snaps = self._recorded_snapshots(vme)
            self._snapshots[key] = snaps
            self.notes.extend(f"VirtualMetricEvent/{vme.name}: {n}" for n in snaps.notes)
        return self._snapshots[key]

    def _recorded_snapshots(self, vme: VirtualMetricEvent) -> Snapshots:
        responses = self.recorded.get(vme.name)
        if responses is None:
            raise ValidationError(
                f"recorded.{vme.name}",
                f"the {vme.source.kind} source of VirtualMetricEvent/"
                f"{vme.name} needs recorded responses in the scenario",
            )
        snaps = Snapshots()
        for response in sorted(responses, key=lambda r: r.at):
            snaps.add(response.at, response.items)
        return snaps

    def _schedule_snapshots(self, vme: VirtualMetricEvent, lo: float, hi: float) -> Snapshots:
        from adapter.sources.base import SourceContext
        from adapter.sources.registry import create_source

        # Fetching every `interval` over a month is slow (each fetch expands cron over the lookahead).
        # Items only matter once they start within [t, t + leadTime] and stay in a snapshot for a day
        # after their end, so fetching every (lookahead - leadTime) / 2 gives exactly the same V(t)
        # while holdTime < 1 day; we never fetch less often than that.
        interval = vme.source.common.interval
        lookahead = float(getattr(vme.source.config, "lookahead", 0.0) or 0.0)
        vm_lead = max((vm.lead_time for vm in self.metrics.values()), default=0.0)
        max_hold = max((vm.hold_time for vm in self.metrics.values()), default=0.0)
        if lookahead > 2 * vm_lead and max_hold < 86400.0:
            interval = max(interval, (lookahead - vm_lead) / 2)
        snaps = Snapshots()
        now = [lo]
        source = create_source("schedule", vme.source.config, vme.source.common, SourceContext(clock=lambda: now[0]))
        loop = asyncio.new_event_loop()
        try:
            t = lo
            while t <= hi:
                now[0] = t
                snaps.add(t, list(loop.run_until_complete(source.fetch(t)).items))
                t += interval
            loop.run_until_complete(source.close())
        finally:
            loop.close()
        return snaps

    def _forecast_snapshots(self, vme: VirtualMetricEvent, lo: float, hi: float, lead: float) -> Snapshots:
        if self.trace is None:
            raise ValidationError(
                "traffic",
                f"VirtualMetricEvent/{vme.name} has a forecast source: the "
                "scenario needs a traffic trace to forecast from",
            )
        settings = _forecast_overrides(self.forecast, vme.source.config, vme.source.raw)
        return forecast_snapshots(self.trace, lo, hi, settings, lead)


def _forecast_overrides(settings: ForecastSettings, config: Any, raw: Any) -> ForecastSettings:
    """The VME's own model, season, quantile, horizon and history length apply in the simulation too.

    `config` is the real ForecastSource config when that kind is available, else the raw block. The
    refit period stays the scenario's `forecast.refit` (refitting at the source's own interval over
    a month would be slow), and the horizon is stretched if needed so that items never run out
    between two simulated refits.
    """
    from dataclasses import replace

    block = raw.get("forecast") if isinstance(raw, Mapping) else None
    block = block if isinstance(block, Mapping) else {}

    def pick(name: str) -> Any:
        if config is not None and not isinstance(config, Mapping) and hasattr(config, name):
            return getattr(config, name)
        return block.get(name)

    changes: dict[str, Any] = {}
    if isinstance(pick("model"), str):
        changes["model"] = pick("model")
    for name in ("quantile", "season", "horizon"):
        value = pick(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            changes[name] = float(value)
    cost = pick("unserved_cost") if config is not None and not isinstance(config, Mapping) else None
    cost = block.get("unservedCost") if cost is None else cost
    if isinstance(cost, (int, float)) and not isinstance(cost, bool):
        changes["unserved_cost"] = float(cost)
    length = getattr(getattr(config, "history", None), "length", None)
    if isinstance(length, (int, float)) and length > 0:
        changes["lookback"] = float(length)
    return replace(settings, **changes) if changes else settings


def forecast_snapshots(
    trace: Trace,
    lo: float,
    hi: float,
    settings: ForecastSettings,
    lead: float,
    fit: ForecastFn | None = None,
    batch: int = 64,
) -> Snapshots:
    """Refit every `settings.refit` seconds on the trailing history; items are the next bins.

    Refits whose history fills the whole lookback have equally long inputs, so they go through
    `fit_predict_many` in batches (several times faster than one call per refit); shorter early
    histories are fitted one by one. Each refit still sees only the data before its own time.
    """
    step = trace.step
    needed = settings.refit + lead + step  # items must last until the next refit, plus the look-ahead
    horizon_s = max(settings.horizon or 0.0, needed)
    horizon = max(1, math.ceil(horizon_s / step))
    lookback = max(2, int(settings.lookback // step))
    many = None
    if fit is None:
        fit, many = _forecast_function()
    refits = np.arange(lo, hi + settings.refit, settings.refit).tolist()
    histories = []
    for r in refits:
        stamps, values = trace.history_until(r)
        histories.append((float(stamps[-1]) if len(stamps) else math.nan, values[-lookback:]))
    results: list[Any] = [None] * len(refits)
    errors: list[str | None] = [None] * len(refits)
    full = [i for i, (_, v) in enumerate(histories) if len(v) == lookback]
    for chunk in range(0, len(full) if many is not None else 0, batch):
        index = full[chunk : chunk + batch]
        try:
            assert many is not None
            out = many(
                np.stack([histories[i][1] for i in index]),
                step,
                horizon,
                model=settings.model,
                season=settings.season,
                quantile=settings.quantile,
                unserved_cost=settings.unserved_cost,
            )
            for i, res in zip(index, out):
                results[i] = res
        except ValueError:
            pass  # fall back to one call per refit below, which reports the error per refit
    for i, (_, values) in enumerate(histories):
        if results[i] is not None or len(values) < 2:
            continue
        try:
            options: dict[str, Any] = {
                "model": settings.model,
                "season": settings.season,
                "quantile": settings.quantile,
            }
            if settings.unserved_cost is not None:
                options["unserved_cost"] = settings.unserved_cost
            results[i] = fit(values, step, horizon, **options)
        except ValueError as exc:
            errors[i] = str(exc)
    snaps = Snapshots()
    for r, (last, _), result, error in zip(refits, histories, results, errors):
        if error:
            snaps.notes.append(f"refit at {r:g}: {error}")
        if result is None:
            snaps.add(r, ())
            continue
        # The forecast source's own item rules (bounds, the first item covering the gap to now).
        snaps.add(r, forecast_items({}, last, step, r, result))
    return snaps


def _forecast_function() -> tuple[ForecastFn, ForecastFn | None]:
    """(one series, many equal-length series) from adapter.forecast."""
    from adapter.forecast import fit_predict, fit_predict_many

    return fit_predict, fit_predict_many


@dataclass(frozen=True)
class SimpleForecast:
    forecast: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    model: str = "seasonalNaive"
    season: float | None = None
    note: str = ""


def seasonal_naive(
    values: np.ndarray,
    step: float,
    horizon: int,
    model: str = "seasonalNaive",
    season: float | None = None,
    quantile: float = 0.9,
) -> SimpleForecast:
    """Fallback forecaster: repeat the last day (or the last value), interval from past errors."""
    values = np.asarray(values, dtype=float)
    m = round((season or 86400.0) / step)
    if m < 1 or len(values) < m + 1:
        m = 1
    idx = len(values) - m + (np.arange(horizon) % m)
    point = values[idx]
    errors = np.abs(values[m:] - values[:-m]) if len(values) > m else np.zeros(1)
    spread = float(np.quantile(errors, quantile)) if len(errors) else 0.0
    return SimpleForecast(point, np.maximum(point - spread, 0.0), point + spread, season=m * step)


def traffic_feed(metric_type: str, name: str, demand: np.ndarray) -> Feed:
    """The reactive metric: current demand as an External (sum) or Pods (per ready pod) metric."""
    if metric_type == "Pods":
        return PodsTrafficFeed(name, demand)
    return ExternalFeed.from_values(name, demand)


__all__ = [
    "ExternalFeed",
    "Feed",
    "ForecastSettings",
    "PodsTrafficFeed",
    "PrescalerModel",
    "RecordedResponse",
    "Snapshots",
    "SteppedFeed",
    "forecast_snapshots",
    "hpa_milli",
    "seasonal_naive",
    "served_milli",
    "traffic_feed",
]
