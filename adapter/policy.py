"""What a VirtualMetric tells the timeline: its default, merge strategy, lead/hold times and bounds
(and how the served value meets the HPA's tolerance).

It lives below both the resource models (a VirtualMetric holds one) and the timeline (which merges
contributions by it), so neither has to import the other. The semantics are in adapter.timeline.
"""

from __future__ import annotations

from dataclasses import dataclass

MERGE_STRATEGIES = ("Sum", "Max", "Min", "Average")
DEFAULT_TOLERANCE = 0.1  # kube-controller-manager --horizontal-pod-autoscaler-tolerance


@dataclass(frozen=True)
class ToleranceStep:
    """`spec.stepPastTolerance`: step a needed scale-up past the HPA's dead band (adapter.pipeline.deadband).

    `tolerance` is what prescaler assumes the controller's flag to be (it cannot read it); an HPA's
    own `behavior.scaleUp.tolerance` takes its place when set."""

    scale_up: bool = True
    tolerance: float = DEFAULT_TOLERANCE


@dataclass(frozen=True)
class MetricPolicy:
    default_value: float = 0.0
    merge_strategy: str = "Sum"
    lead_time: float = 0.0
    hold_time: float = 0.0
    min: float | None = None
    max: float | None = None
    # Not used by the timeline: applied to a target's value when an HPA reads it (adapter.pipeline.deadband).
    tolerance_step: ToleranceStep | None = None

    def clamp(self, value: float) -> float:
        if self.min is not None and value < self.min:
            value = self.min
        if self.max is not None and value > self.max:
            value = self.max
        return value
