"""A brute-force model of the served value, for checking the vectorised timelines against."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from adapter.timeline import Contribution, MetricPolicy


def reference_value(
    policy: MetricPolicy,
    contributions: Sequence[Contribution],
    t: float,
    probe_points: Mapping[str, float] | None = None,
) -> float:
    """Brute-force V(t) straight from the definition: evaluate F at every point where it can change
    inside [t, t + leadTime] and take the peak."""

    def merged(s: float) -> float:
        active = [c.value for c in contributions if c.start <= s < c.end + policy.hold_time]
        if not active:
            return policy.default_value
        if policy.merge_strategy == "Sum":
            return math.fsum(active)
        if policy.merge_strategy == "Max":
            return max(active)
        if policy.merge_strategy == "Min":
            return min(active)
        return math.fsum(active) / len(active)

    horizon = t + policy.lead_time
    points = {t, horizon}
    for c in contributions:
        for edge in (c.start, c.end + policy.hold_time):
            if t <= edge <= horizon:
                points.add(edge)
    return policy.clamp(max(merged(s) for s in points))
