"""`stepPastTolerance`: serve a value the HPA acts on when a scale-up is needed but sits in its dead band.

The HPA ignores a usage ratio within its tolerance of 1.0 (docs/hpa-algorithm.md §4): with an
AverageValue target of 10 and 20 pods, a served 210 (21 pods needed, ratio 1.05) changes nothing.
When the value implies more replicas than the target has and the ratio is inside the band, the rule
serves the smallest value just past `1 + tolerance` instead, so the HPA adds the pods. It never lowers
a value, and it only acts on the scale-up side: inside the band on the way down the HPA keeps pods,
which costs money but serves the demand.

Pure: the caller says what it knows about the HPA (its target for this metric, the tolerance and the
replica counts, `HpaBand`), or None when it does not know, and then the value is served unchanged.
The cluster (adapter.store.hpa_bands) and the simulator (adapter.sim) build `HpaBand` from their own
state and both call `step_past_band`; the arithmetic is the HPA's own (milli-units, float64 ratios,
inclusive band ends), so what is served here is exactly what the controller reads.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from adapter.policy import DEFAULT_TOLERANCE, ToleranceStep
from adapter.quantity import QuantityError, format_milli, milli_value, parse_quantity

TARGET_TYPES = ("AverageValue", "Value")

# Why a value was or was not stepped (shown in the VirtualMetric's status).
STEPPED = "Stepped"  # inside the band with a scale-up needed: served just past it
NO_STEP = "NotNeeded"  # outside the band, or no more replicas needed: the HPA acts on the value itself
UNKNOWN = "Unknown"  # the HPA or its replica count is not known: served unchanged
CLAMPED = "Clamped"  # the step would go past spec.max: served unchanged


@dataclass(frozen=True)
class HpaBand:
    """What the rule needs to know about the HPA that reads one target's value."""

    target_type: str  # AverageValue | Value (the HPA's target for this External metric)
    target_milli: int  # the target in milli-units, as the controller reads it
    # behavior.scaleUp.tolerance; None: the controller's flag, which prescaler cannot read, so the
    # VirtualMetric's stepPastTolerance.tolerance (0.1 by default) stands in for it.
    tolerance_up: float | None
    replicas: int  # status.replicas of the scale target (AverageValue compares against it)
    spec: int | None = None  # spec.replicas (Value targets); None: = replicas
    ready: int | None = None  # Ready pods (Value targets multiply by them); None: = replicas
    hpa: str = ""  # namespace/name, for status

    def __post_init__(self) -> None:
        if self.target_type not in TARGET_TYPES:
            raise ValueError(f"target type {self.target_type!r} is not one of {', '.join(TARGET_TYPES)}")
        if self.target_milli <= 0:
            raise ValueError("the HPA target must be positive")
        if self.tolerance_up is not None and not (self.tolerance_up >= 0 and math.isfinite(self.tolerance_up)):
            raise ValueError("the tolerance must be a non-negative number")
        if self.replicas < 0:
            raise ValueError("replicas must not be negative")


@dataclass(frozen=True)
class Step:
    value: float  # the value to serve
    reason: str  # STEPPED | NO_STEP | UNKNOWN | CLAMPED
    needed: int | None = None  # replicas the original value implies (None: unknown)


def milli(value: float) -> int:
    """The milli-units the HPA reads for a served value: `format_milli`, read back by MilliValue()."""
    return milli_value(parse_quantity(format_milli(float(value))))


def _first_past(bound: float, denominator: float) -> int:
    """The smallest milli usage m with m / denominator > bound (float64, as the controller divides)."""
    m = max(0, math.floor(bound * denominator) - 2)
    while m / denominator <= bound:
        m += 1
    return m


def step_past_band(
    value: float, band: HpaBand | None, maximum: float | None = None, default_tolerance: float = DEFAULT_TOLERANCE
) -> Step:
    """The value to serve so that a needed scale-up is not swallowed by the HPA's tolerance.

    `maximum`: the VirtualMetric's max (a step never goes past it); `default_tolerance`: the
    controller's flag as assumed, for an HPA without its own scale-up tolerance."""
    if band is None or not math.isfinite(value):
        return Step(value, UNKNOWN)
    try:
        usage = milli(value)
    except QuantityError:
        return Step(value, NO_STEP)  # beyond what the HPA can read: nothing to step
    bound = 1.0 + (default_tolerance if band.tolerance_up is None else band.tolerance_up)
    if band.target_type == "AverageValue":
        # ratio = usage / (target x status); inside the band the HPA proposes status, outside
        # ceil(usage / target) whatever the replicas.
        needed = math.ceil(usage / band.target_milli)
        if band.replicas == 0 or needed <= band.replicas:
            return Step(value, NO_STEP, needed)
        denominator = float(band.target_milli) * float(band.replicas)
    else:
        # Value: ratio = usage / target; inside the band the HPA proposes spec, outside
        # ceil(ratio x ready). From zero replicas the HPA skips the tolerance.
        spec = band.replicas if band.spec is None else band.spec
        ready = band.replicas if band.ready is None else band.ready
        needed = math.ceil(usage / band.target_milli * ready)
        if spec == 0 or needed <= spec:
            return Step(value, NO_STEP, needed)
        denominator = float(band.target_milli)
    if usage / denominator > bound:
        return Step(value, NO_STEP, needed)  # already outside the band: the HPA scales on its own
    stepped = _first_past(bound, denominator) / 1000.0
    if maximum is not None and stepped > maximum:
        return Step(value, CLAMPED, needed)
    return Step(stepped, STEPPED, needed)


BandLookup = Callable[[str, str, str], "HpaBand | None"]  # (metric, namespace, resource) -> band


def _unknown(metric: str, namespace: str, resource: str) -> HpaBand | None:
    return None


@dataclass(frozen=True)
class TargetStep:
    """The latest decision for one target, for status."""

    reason: str
    hpa: str = ""
    value: float | None = None  # before the step
    served: float | None = None


class ToleranceSteps:
    """Applies `stepPastTolerance` to the answers an HPA gets, and remembers the decisions for status.

    `lookup` is where the HPAs' targets and replica counts come from: the cluster's reader
    (adapter.store.hpa_bands) sets it; without one (local manifests) every target is Unknown and its
    value is served unchanged."""

    MAX_TARGETS = 20  # shown per VirtualMetric

    def __init__(self, lookup: BandLookup = _unknown) -> None:
        self.lookup = lookup
        self.decisions: dict[str, dict[str, TargetStep]] = {}  # metric name -> "ns/name" -> step

    def apply(self, values: tuple[Any, ...], vm: Any) -> tuple[tuple[Any, ...], bool]:
        """(the answer's items, stepped where needed; True when a target's reason changed).

        Only an answer with exactly one item is stepped: the HPA sums the items it gets, so with
        several, no single target's value is what the controller compares with its tolerance."""
        policy: Any = getattr(vm, "policy", None)
        rule: ToleranceStep | None = getattr(policy, "tolerance_step", None)
        if rule is None or not rule.scale_up or len(values) != 1:
            return values, False
        item = values[0]
        band = self.lookup(vm.metric_name, item.namespace, item.name)
        step = step_past_band(item.value, band, policy.max, rule.tolerance)
        key = f"{item.namespace}/{item.name}"
        seen = self.decisions.setdefault(vm.metric_name, {})
        old = seen.get(key)
        seen[key] = TargetStep(step.reason, band.hpa if band else "", item.value, step.value)
        if len(seen) > 4 * self.MAX_TARGETS:  # targets come and go: keep the latest ones only
            for stale in list(seen)[: len(seen) - 2 * self.MAX_TARGETS]:
                del seen[stale]
        changed = old is None or old.reason != step.reason
        if step.value == item.value:
            return values, changed
        return (replace(item, value=step.value),), changed

    def status(self, vm: Any) -> dict[str, Any] | None:
        """`status.toleranceStep` of a VirtualMetric with stepPastTolerance (None without it)."""
        if getattr(getattr(vm, "policy", None), "tolerance_step", None) is None:
            return None
        seen = self.decisions.get(vm.metric_name, {})
        rows: list[dict[str, Any]] = []
        for key in sorted(seen)[: self.MAX_TARGETS]:
            s = seen[key]
            row: dict[str, Any] = {"target": key, "reason": s.reason}
            if s.hpa:
                row["hpa"] = s.hpa
            if s.reason == UNKNOWN:
                row["message"] = "no HPA with its target and replica count is known for this target: served unchanged"
            elif s.reason == CLAMPED:
                row["message"] = "the step would exceed spec.max: served unchanged"
            if s.reason == STEPPED and s.value is not None and s.served is not None:
                row["value"], row["served"] = s.value, s.served
            rows.append(row)
        return {"targets": rows}
