"""What a VirtualMetric tells the timeline: its default, merge strategy, lead/hold times and bounds.

It lives below both the resource models (a VirtualMetric holds one) and the timeline (which merges
contributions by it), so neither has to import the other. The semantics are in adapter.timeline.
"""

from __future__ import annotations

from dataclasses import dataclass

MERGE_STRATEGIES = ("Sum", "Max", "Min", "Average")


@dataclass(frozen=True)
class MetricPolicy:
    default_value: float = 0.0
    merge_strategy: str = "Sum"
    lead_time: float = 0.0
    hold_time: float = 0.0
    min: float | None = None
    max: float | None = None

    def clamp(self, value: float) -> float:
        if self.min is not None and value < self.min:
            value = self.min
        if self.max is not None and value > self.max:
            value = self.max
        return value
