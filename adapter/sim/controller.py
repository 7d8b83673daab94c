"""The HorizontalPodAutoscaler controller, one reconcile per call (docs/hpa-algorithm.md §3–§6, §8).

This follows `reconcileAutoscaler` of kube-controller-manager step by step so that two independent
implementations give the same replica sequence (docs/hpa-algorithm.md §11): int64 milli-units, float64 ratios,
`math.ceil`, truncating `int()` for Percent scale-down, the strict age rule `t - ts < W`, and the
prenormalized max over metrics stored as the recommendation. Scale-to-zero follows v1.30–v1.35
(`zero_active` ⇔ minReplicas == 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from adapter.sim.hpa_spec import HpaSpec, MetricSpec, ScalingRules
from adapter.sim.quantity import MAX_INT32, MAX_INT64


@dataclass(frozen=True)
class ControllerConfig:
    """kube-controller-manager flags that change the math (docs/hpa-algorithm.md §1)."""

    tolerance: float = 0.1
    downscale_stabilization: float = 300.0
    # HPAConfigurableTolerance: beta, on by default since v1.35.
    configurable_tolerance: bool = True


@dataclass(frozen=True)
class PodsReading:
    """A Pods metric at one tick: the per-pod values of pods that report one (milli-units)."""

    values: tuple[int, ...]
    unready: int = 0  # Pending pods (their metric is removed; they count as 0 on a scale-up)
    missing: int = 0  # running pods without a metric


# External: the summed milli value of the items, or None when the fetch fails (empty list, error).
Reading = int | PodsReading | None


@dataclass(frozen=True)
class TickInputs:
    spec: int  # scale.spec.replicas ("currentReplicas")
    status: int  # scale.status.replicas: non-terminated pods, ready or not
    ready: int  # Running and Ready pods
    npods: int  # pods matching the selector, any phase
    readings: Sequence[Reading]  # one per hpa.metrics entry, in order


@dataclass
class Decision:
    time: float
    current: int  # spec.replicas before the reconcile
    replicas: int  # spec.replicas after it
    outcome: str  # scaled | held | aborted | disabled | out-of-range
    proposals: tuple[int | None, ...] = ()  # per metric; None = invalid metric
    prenormalized: int | None = None  # max over valid metrics (what `recs` stores)
    conditions: dict[str, str] = field(default_factory=dict)  # condition type -> reason


class MetricError(Exception):
    """One metric cannot give a proposal this tick (the metric is 'invalid', docs/hpa-algorithm.md §5)."""


@dataclass(frozen=True)
class Tolerances:
    up: float
    down: float

    def within(self, ratio: float) -> bool:
        # Inclusive both ends; NaN is never within.
        return (1.0 - self.down) <= ratio <= (1.0 + self.up)


def _ceil_int32(x: float) -> int:
    """`int32(math.Ceil(x))` capped at MaxInt32 (docs/hpa-algorithm.md §4) (Go's conversion of ±Inf is undefined)."""
    if math.isnan(x):
        return 0
    if x >= MAX_INT32:
        return MAX_INT32
    if x <= -MAX_INT32:
        return -MAX_INT32
    return math.ceil(x)


def _divide(a: float, b: float) -> float:
    """IEEE float64 division: x/0 is ±Inf or NaN, as in Go, instead of an exception."""
    if b == 0.0:
        if a == 0.0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


# ---------------------------------------------------------------- proposals (docs/hpa-algorithm.md §4)


def external_value_replicas(usage: int, target: int, spec: int, ready: int, npods: int, tol: Tolerances) -> int:
    """`GetExternalMetricReplicas` → `getUsageRatioReplicaCount` (target.type Value)."""
    ratio = _divide(float(usage), float(target))
    if spec == 0:
        return _ceil_int32(ratio)
    if tol.within(ratio):
        return spec
    if npods == 0:
        raise MetricError("no pods returned by selector while calculating replica count")
    return _ceil_int32(ratio * float(ready))


def external_average_replicas(usage: int, target: int, status: int, tol: Tolerances) -> int:
    """`GetExternalPerPodMetricReplicas` (target.type AverageValue): tolerance against STATUS replicas."""
    ratio = _divide(float(usage), float(target) * float(status))
    if tol.within(ratio):
        return status
    return _ceil_int32(_divide(float(usage), float(target)))


def pods_replicas(reading: PodsReading, target: int, spec: int, npods: int, tol: Tolerances) -> int:
    """`calcPlainMetricReplicas` for a Pods metric (AverageValue), non-CPU branch of `groupPods`."""
    if npods == 0:
        raise MetricError("no pods returned by selector while calculating replica count")
    if not reading.values:
        raise MetricError("did not receive metrics for targeted pods (pods might be unready)")
    count = len(reading.values)
    total = sum(reading.values)
    ratio = float(total // count) / float(target)  # GetMetricUsageRatio: int64 average, then float
    scale_up_with_unready = reading.unready > 0 and ratio > 1.0
    if not scale_up_with_unready and reading.missing == 0:
        if tol.within(ratio):
            return spec
        return _ceil_int32(ratio * float(count))
    if reading.missing:
        # Missing pods are assumed at the target on a scale-down and idle on a scale-up.
        total += (target if ratio < 1.0 else 0) * reading.missing
        count += reading.missing
    if scale_up_with_unready:
        count += reading.unready
    new_ratio = float(total // count) / float(target)
    if tol.within(new_ratio) or (ratio > 1.0 and new_ratio < 1.0) or (ratio < 1.0 and new_ratio > 1.0):
        return spec
    replicas = _ceil_int32(new_ratio * float(count))
    if (new_ratio < 1.0 and replicas > spec) or (new_ratio > 1.0 and replicas < spec):
        return spec
    return replicas


# ---------------------------------------------------------------- the controller


class HpaController:
    """Controller memory for one HPA: recommendations and scale events (in-process, per HPA)."""

    def __init__(self, hpa: HpaSpec, config: ControllerConfig | None = None):
        self.hpa = hpa
        self.config = config or ControllerConfig()
        self.recs: list[tuple[int, float]] | None = None
        self.up_events: list[tuple[int, float]] = []
        self.down_events: list[tuple[int, float]] = []
        self.tolerances = self._tolerances()
        behavior = hpa.behavior
        self._up = behavior.scale_up if behavior else None
        self._down = behavior.scale_down if behavior else None
        self._window_up = (self._up.window or 0.0) if self._up else 0.0
        self._window_down = self._resolve_down_window()
        periods = [p.period for r in (self._up, self._down) if r for p in r.policies]
        self._longest_period = max(periods, default=0.0)

    def _tolerances(self) -> Tolerances:
        """`tolerancesForHpa`: the global flag, overridden per direction when behavior sets one."""
        up = down = self.config.tolerance
        behavior = self.hpa.behavior
        if behavior is not None and self.config.configurable_tolerance:
            if behavior.scale_up.tolerance is not None:
                up = behavior.scale_up.tolerance
            if behavior.scale_down.tolerance is not None:
                down = behavior.scale_down.tolerance
        return Tolerances(up=up, down=down)

    def _resolve_down_window(self) -> float:
        if self._down is None or self._down.window is None:
            return self.config.downscale_stabilization
        return self._down.window

    # ---------------------------------------------------------------- reconcile (docs/hpa-algorithm.md §3)

    def reconcile(self, t: float, inputs: TickInputs) -> Decision:
        hpa = self.hpa
        cur = inputs.spec
        if self.recs is None:
            self.recs = [(cur, t)]  # recordInitialRecommendation
        min_r, max_r = hpa.min_replicas, hpa.max_replicas
        if cur == 0 and min_r != 0:
            return Decision(t, cur, cur, "disabled", conditions={"ScalingActive": "ScalingDisabled"})
        if cur > max_r:
            return self._write(t, cur, max_r, "out-of-range", {})
        if cur < min_r:
            return self._write(t, cur, min_r, "out-of-range", {})
        proposals, prenormalized, reason = self.compute_replicas_for_metrics(inputs)
        if prenormalized is None:
            return Decision(t, cur, cur, "aborted", proposals, None, {"ScalingActive": reason})
        conditions = {"ScalingActive": "ValidMetricFound"}
        if hpa.behavior is None:
            desired = self._normalize_legacy(t, cur, prenormalized, min_r, max_r, conditions)
        else:
            desired = self._normalize_behavior(t, cur, prenormalized, min_r, max_r, conditions)
        if desired == cur:
            return Decision(t, cur, cur, "held", proposals, prenormalized, conditions)
        decision = self._write(t, cur, desired, "scaled", conditions)
        decision.proposals, decision.prenormalized = proposals, prenormalized
        return decision

    def _write(self, t: float, cur: int, desired: int, outcome: str, conditions: dict[str, str]) -> Decision:
        if self.hpa.behavior is not None:  # storeScaleEvent: the legacy path records nothing
            events = self.up_events if desired > cur else self.down_events
            events.append((abs(desired - cur), t))
            self._prune_events(t)
        conditions = dict(conditions, AbleToScale="SucceededRescale")
        return Decision(t, cur, desired, outcome, conditions=conditions)

    def compute_replicas_for_metrics(self, inputs: TickInputs) -> tuple[tuple[int | None, ...], int | None, str]:
        """Max over valid metrics; abort if all fail, or some fail and the max is below spec (§5)."""
        replicas = 0
        invalid = 0
        first_error = ""
        proposals: list[int | None] = []
        for metric, reading in zip(self.hpa.metrics, inputs.readings, strict=True):
            try:
                proposal = self._proposal(metric, reading, inputs)
            except MetricError:
                invalid += 1
                first_error = first_error or _failure_reason(metric)
                proposals.append(None)
                continue
            proposals.append(proposal)
            if replicas == 0 or proposal > replicas:
                replicas = proposal
        if invalid >= len(self.hpa.metrics) or (invalid > 0 and replicas < inputs.spec):
            return tuple(proposals), None, first_error
        return tuple(proposals), replicas, "ValidMetricFound"

    def _proposal(self, metric: MetricSpec, reading: Reading, inputs: TickInputs) -> int:
        if reading is None:
            raise MetricError(f"unable to get metric {metric.name}")
        tol = self.tolerances
        if metric.type == "Pods":
            if not isinstance(reading, PodsReading):
                raise TypeError(f"metric {metric.name}: a Pods metric needs a PodsReading")
            return pods_replicas(reading, metric.target_milli, inputs.spec, inputs.npods, tol)
        if isinstance(reading, PodsReading):
            raise TypeError(f"metric {metric.name}: an External metric needs a summed milli value")
        usage = min(int(reading), MAX_INT64)
        if metric.target_type == "Value":
            return external_value_replicas(usage, metric.target_milli, inputs.spec, inputs.ready, inputs.npods, tol)
        return external_average_replicas(usage, metric.target_milli, inputs.status, tol)

    # ---------------------------------------------------------------- normalization (docs/hpa-algorithm.md §6)

    def _normalize_legacy(self, t: float, cur: int, d: int, min_r: int, max_r: int, conditions: dict[str, str]) -> int:
        window = self.config.downscale_stabilization
        recs = self._recs()
        stabilized = max([d] + [r for r, ts in recs if t - ts < window])
        recs.append((d, t))
        self._prune_recs(t, window)
        conditions["AbleToScale"] = "ScaleDownStabilized" if stabilized != d else "ReadyForNewScale"
        up_limit = int(max(2.0 * cur, 4.0))
        if max_r > up_limit:
            max_allowed, reason = up_limit, "ScaleUpLimit"
        else:
            max_allowed, reason = max_r, "TooManyReplicas"
        if stabilized < min_r:
            out, reason = min_r, "TooFewReplicas"
        elif stabilized > max_allowed:
            out = max_allowed
        else:
            out, reason = stabilized, "DesiredWithinRange"
        conditions["ScalingLimited"] = reason
        return out

    def _normalize_behavior(
        self, t: float, cur: int, d: int, min_r: int, max_r: int, conditions: dict[str, str]
    ) -> int:
        assert self._up is not None and self._down is not None
        recs = self._recs()
        up_rec = min([d] + [r for r, ts in recs if t - ts < self._window_up])
        down_rec = max([d] + [r for r, ts in recs if t - ts < self._window_down])
        recs.append((d, t))
        self._prune_recs(t, max(self._window_up, self._window_down))
        rec = cur
        rec = max(rec, up_rec)
        rec = min(rec, down_rec)
        if rec != d:
            conditions["AbleToScale"] = "ScaleUpStabilized" if d >= cur else "ScaleDownStabilized"
        else:
            conditions["AbleToScale"] = "ReadyForNewScale"
        out, reason = rec, "DesiredWithinRange"
        if rec > cur:
            limit = max(self._scale_up_limit(t, cur, self._up), cur)
            if max_r > limit:
                max_allowed, why = limit, "ScaleUpLimit"
            else:
                max_allowed, why = max_r, "TooManyReplicas"
            if rec > max_allowed:
                out, reason = max_allowed, why
        elif rec < cur:
            limit = min(self._scale_down_limit(t, cur, self._down), cur)
            if min_r < limit:
                min_allowed, why = limit, "ScaleDownLimit"
            else:
                min_allowed, why = min_r, "TooFewReplicas"
            if rec < min_allowed:
                out, reason = min_allowed, why
        conditions["ScalingLimited"] = reason
        return out

    def _period_start(self, t: float, cur: int, period: float) -> int:
        """Replicas at the start of the policy period: undo the changes made within it."""
        added = sum(c for c, ts in self.up_events if t - ts < period)
        deleted = sum(c for c, ts in self.down_events if t - ts < period)
        return cur - added + deleted

    def _scale_up_limit(self, t: float, cur: int, rules: ScalingRules) -> int:
        if rules.select_policy == "Disabled":
            return cur
        values = []
        for policy in rules.policies:
            start = self._period_start(t, cur, policy.period)
            if policy.type == "Pods":
                values.append(start + policy.value)
            else:
                values.append(_ceil_int32(float(start) * (1 + float(policy.value) / 100)))
        return min(values) if rules.select_policy == "Min" else max(values)

    def _scale_down_limit(self, t: float, cur: int, rules: ScalingRules) -> int:
        if rules.select_policy == "Disabled":
            return cur
        values = []
        for policy in rules.policies:
            start = self._period_start(t, cur, policy.period)
            if policy.type == "Pods":
                values.append(start - policy.value)
            else:
                values.append(int(float(start) * (1 - float(policy.value) / 100)))  # Go int32(): truncates
        # "Max" allows the largest decrease, i.e. the smallest limit.
        return max(values) if rules.select_policy == "Min" else min(values)

    # ---------------------------------------------------------------- memory housekeeping

    def _recs(self) -> list[tuple[int, float]]:
        assert self.recs is not None
        return self.recs

    def _prune_recs(self, t: float, window: float) -> None:
        # A sample with age >= every window can never count again (time only moves forward).
        self.recs = [(r, ts) for r, ts in self._recs() if t - ts < window] or self.recs[-1:]  # type: ignore[index]

    def _prune_events(self, t: float) -> None:
        longest = self._longest_period
        self.up_events = [(c, ts) for c, ts in self.up_events if t - ts < longest]
        self.down_events = [(c, ts) for c, ts in self.down_events if t - ts < longest]


def _failure_reason(metric: MetricSpec) -> str:
    return {"External": "FailedGetExternalMetric", "Pods": "FailedGetPodsMetric"}.get(
        metric.type, "InvalidMetricSourceType"
    )
