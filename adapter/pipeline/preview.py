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


def preview_document(published: Published, events: Mapping[str, EventState],
                     req: PreviewRequest) -> dict[str, Any] | MetricNotFound:
    """The preview document (ValueError for a bad request, see PreviewRequest.check)."""
    req.check()
    vm = published.metrics.get(req.metric)
    if vm is None:
        return MetricNotFound(req.metric, f"no VirtualMetric serves metric {req.metric!r}")
    count = int(req.duration // req.step) + 1
    times = req.start + np.arange(count) * req.step
    values = values_over(published, req.metric, req.namespace, req.resource, times)
    key = (req.metric, req.namespace, req.resource)
    contributions = [c for name in sorted(events) for c in explain(name, events[name].entries, events[name].items,
                                                                     key, vm.hold_time)]
    steps = []
    total = 0
    for t, v in zip(times.tolist(), values.tolist()):
        window_end = t + vm.lead_time
        active = [c for c in contributions if c["start"] <= window_end and c["activeUntil"] > t]
        total += len(active)
        if total > MAX_CONTRIBUTIONS:
            raise ValueError(f"the answer would list more than {MAX_CONTRIBUTIONS} contributions; use a larger "
                             "step or a shorter duration")
        steps.append({"time": rfc3339(t), "unix": t, "value": v, "contributions": active})
    return {
        "metric": req.metric, "namespace": req.namespace, "resource": req.resource,
        "virtualMetric": vm.name, "mergeStrategy": vm.merge_strategy, "defaultValue": vm.default_value,
        "leadTime": vm.lead_time, "holdTime": vm.hold_time, "min": vm.min, "max": vm.max,
        "explanation": ("value(t) = clamp(max over s in [t, t+leadTime] of "
                        f"{vm.merge_strategy}(contributions active at s) or defaultValue, min, max)"),
        "steps": steps,
    }
