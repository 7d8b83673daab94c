"""Published snapshot + loaded events -> the preview document: V(t) over a window, explained.

The values are read from the same timelines the API serves; the explanation lists the (entry, item)
pairs active at each step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from adapter.pipeline.contributions import explain
from adapter.pipeline.objects import EventState
from adapter.pipeline.publish import Published
from adapter.pipeline.query import MetricNotFound, values_over
from adapter.timefmt import rfc3339

MAX_STEPS = 10_000
MAX_CONTRIBUTIONS = 200_000  # (step, contribution) pairs in one document
MAX_TIME = 1e11  # seconds: year 5138, far beyond any item (and keeps float steps exact enough)


@dataclass(frozen=True)
class PreviewRequest:
    metric: str
    namespace: str
    resource: str
    start: float
    duration: float = 7200.0
    step: float = 60.0

    def check(self) -> None:
        """Raises ValueError naming the bad parameter."""
        for name in ("start", "duration", "step"):
            value = getattr(self, name)
            if not math.isfinite(value) or abs(value) > MAX_TIME:
                raise ValueError(f"{name}: {value!r} is not a usable number")
        if self.step <= 0 or self.duration < 0:
            raise ValueError("step must be positive and duration non-negative")
        count = int(self.duration // self.step) + 1
        if count > MAX_STEPS:
            raise ValueError(f"{count} steps requested; at most {MAX_STEPS} (use a larger step)")


def parse_time(text: str | None, now: float) -> float:
    """Unix seconds, RFC 3339 or "now". Raises ValueError naming the text."""
    if text is None or text == "now":
        return now
    try:
        value = float(text)
    except ValueError:
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"invalid time {text[:64]!r}: use unix seconds, RFC3339 or 'now'") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        value = parsed.timestamp()
    if not math.isfinite(value) or abs(value) > MAX_TIME:
        raise ValueError(f"invalid time {text[:64]!r}: out of range")
    return value


def preview_document(
    published: Published, events: Mapping[str, EventState], req: PreviewRequest
) -> dict[str, Any] | MetricNotFound:
    """The preview document (ValueError for a bad request, see PreviewRequest.check).

    Each step names the peak time inside [t, t + leadTime] and the contributions active at that
    instant: merged with the metric's strategy (the defaultValue when none) and clamped, they give
    the step's value. `load` is F(t) itself (no look-ahead) and `loadByObject` its share per object,
    for plots."""
    req.check()
    vm = published.metrics.get(req.metric)
    if vm is None:
        return MetricNotFound(req.metric, f"no VirtualMetric serves metric {req.metric!r}")
    count = int(req.duration // req.step) + 1
    times = req.start + np.arange(count) * req.step
    values = values_over(published, req.metric, req.namespace, req.resource, times)
    key = (req.metric, req.namespace, req.resource)
    listed = [
        c for name in sorted(events) for c in explain(name, events[name].entries, events[name].items, key, vm.hold_time)
    ]
    usable = [c for c in listed if c["value"] is not None]  # failed evaluations contribute nothing
    load = MergedLoad(usable, vm.merge_strategy, vm.default_value)
    steps = []
    total = 0
    for t, v in zip(times.tolist(), values.tolist()):
        peak = load.peak(t, t + vm.lead_time)
        active = load.active_at(peak)
        total += len(active)
        if total > MAX_CONTRIBUTIONS:
            raise ValueError(
                f"the answer would list more than {MAX_CONTRIBUTIONS} contributions; use a larger "
                "step or a shorter duration"
            )
        steps.append(
            {
                "time": rfc3339(t),
                "unix": t,
                "value": v,
                "peakTime": rfc3339(peak),
                "peakUnix": peak,
                "merged": load.merge(active),  # before clamping; value = clamp(merged, min, max)
                "contributions": [usable[i] for i in active],
                "load": load.merge(load.active_at(t)),
                "loadByObject": load.by_object(t),
            }
        )
    failed = [c for c in listed if c["value"] is None]
    return {
        "metric": req.metric,
        "namespace": req.namespace,
        "resource": req.resource,
        "virtualMetric": vm.name,
        "mergeStrategy": vm.merge_strategy,
        "defaultValue": vm.default_value,
        "leadTime": vm.lead_time,
        "holdTime": vm.hold_time,
        "min": vm.min,
        "max": vm.max,
        "explanation": (
            "value(t) = clamp(F(peakTime), min, max) where F(s) = "
            f"{vm.merge_strategy}(contributions active at s) or defaultValue, and peakTime is "
            "the s in [t, t+leadTime] where F is largest (the earliest on ties); a contribution "
            "is active on [start, end + holdTime)"
        ),
        "steps": steps,
        "failedContributions": failed[:100],  # expression errors: dropped, listed for the reader
    }


class MergedLoad:
    """F(s) of one target from its contributions (the same rule the timelines vectorise)."""

    def __init__(self, contributions: list[dict[str, Any]], strategy: str, default: float):
        self.strategy, self.default = strategy, default
        self.events = [c["event"] for c in contributions]
        self.start = np.array([c["start"] for c in contributions], dtype=float)
        self.until = np.array([c["activeUntil"] for c in contributions], dtype=float)
        self.value = np.array([c["value"] for c in contributions], dtype=float)
        self.edges = np.unique(np.concatenate([self.start, self.until]))

    def active_at(self, s: float) -> list[int]:
        return np.flatnonzero((self.start <= s) & (s < self.until)).tolist()

    def merge(self, active: list[int]) -> float:
        if not active:
            return self.default
        values = self.value[active]
        if self.strategy == "Max":
            return float(values.max())
        if self.strategy == "Min":
            return float(values.min())
        if self.strategy == "Average":
            return float(values.mean())
        return float(values.sum())

    def peak(self, lo: float, hi: float) -> float:
        """The earliest s in [lo, hi] where F is largest (F only changes at contribution edges)."""
        inside = self.edges[(self.edges > lo) & (self.edges <= hi)]
        best, best_value = lo, self.merge(self.active_at(lo))
        for s in inside.tolist():
            value = self.merge(self.active_at(s))
            if value > best_value:
                best, best_value = s, value
        return best

    def by_object(self, s: float) -> dict[str, float]:
        """Each object's share of F(s): its contributions merged alone."""
        groups: dict[str, list[int]] = {}
        for i in self.active_at(s):
            groups.setdefault(self.events[i], []).append(i)
        return {event: self.merge(active) for event, active in groups.items()}
