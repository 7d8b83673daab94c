"""`leadTime: Auto`, the rule (pure: no Kubernetes client), shared by the cluster's learner
(adapter.store.leadtime, which reads pods and HPAs through the API) and the simulator.

    lead = percentile(pod creation -> Ready, recent pods) + HPA sync period + scale-up ramp

* start-up: a high percentile (p90) of creation -> Ready over the most recent pods of the scale target;
* sync period: the controller looks at the metric once per period (15 s by default), so a value can
  wait that long before anyone acts on it;
* ramp: the HPA's scale-up policy may need several periods to reach the expected step (from the
  current replicas to `step_factor` times as many); computed by running the simulator's HPA
  controller (adapter.sim.controller), not by a second copy of its rules.

The result is clamped to [MIN_LEAD, MAX_LEAD]; with fewer than MIN_PODS measurable pods the fixed
fallback is used and the estimate says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from adapter.sim.controller import ControllerConfig, HpaController, PodsReading, TickInputs
from adapter.sim.hpa_spec import HpaSpec

PERCENTILE = 0.9
RECENT_PODS = 50
MIN_PODS = 3
MIN_LEAD = 30.0
MAX_LEAD = 3600.0
FALLBACK_LEAD = 300.0
SYNC_PERIOD = 15.0
STEP_FACTOR = 2.0
MAX_RAMP_PERIODS = 240


@dataclass(frozen=True)
class LeadTimeEstimate:
    seconds: float
    startup: float | None  # the percentile of creation -> Ready (None: not measurable)
    sync_period: float
    ramp: float
    pods: tuple[str, ...] = field(default=())  # the pods the start-up came from
    reason: str = "Measured"  # Measured | Fallback
    message: str = ""  # why the fallback was used

    def status(self) -> dict[str, Any]:
        """What the VirtualMetric status shows."""
        out: dict[str, Any] = {
            "seconds": round(self.seconds, 3),
            "reason": self.reason,
            "syncPeriodSeconds": self.sync_period,
            "rampSeconds": round(self.ramp, 3),
            "pods": list(self.pods),
        }
        if self.message:
            out["message"] = self.message
        if self.startup is not None:
            out["startupSeconds"] = round(self.startup, 3)
            out["percentile"] = PERCENTILE
        return out


def ramp_seconds(
    hpa: HpaSpec, current: int, target: int, sync_period: float = SYNC_PERIOD, config: ControllerConfig | None = None
) -> float:
    """Time the HPA's scale-up policy needs to go from `current` to `target` replicas.

    Runs the real controller against a metric that asks for `target` at once and counts the
    periods until spec.replicas gets there (0 when one write suffices)."""
    target = min(max(target, hpa.min_replicas), hpa.max_replicas)
    current = max(current, 1)
    if target <= current or not hpa.metrics:
        return 0.0
    controller = HpaController(hpa, config)
    metric = hpa.metrics[0]
    spec = current
    for period in range(MAX_RAMP_PERIODS):
        # A metric that asks for exactly `target` pods, whatever the replicas are now.
        reading: Any
        if metric.type == "Pods":
            reading = PodsReading((metric.target_milli * target // spec,) * spec)
        elif metric.target_type == "AverageValue":
            reading = target * metric.target_milli
        else:  # Value: usage / target x ready pods
            reading = math.ceil(metric.target_milli * target / spec)
        readings = [reading] + [None] * (len(hpa.metrics) - 1)
        decision = controller.reconcile(
            period * sync_period, TickInputs(spec=spec, status=spec, ready=spec, npods=spec, readings=readings)
        )
        spec = decision.replicas
        if spec >= target:
            return period * sync_period
    return MAX_RAMP_PERIODS * sync_period


def learn_lead_time(
    startups: Sequence[tuple[str, float]],
    hpa: HpaSpec | None,
    current: int,
    sync_period: float = SYNC_PERIOD,
    step_factor: float = STEP_FACTOR,
    fallback: float = FALLBACK_LEAD,
) -> LeadTimeEstimate:
    """The rule: p90 start-up of the most recent pods + sync period + ramp, clamped; else fallback.

    `startups`: (pod name, seconds from creation to Ready), most recent last."""
    recent = list(startups)[-RECENT_PODS:]
    target = math.ceil(max(current, 1) * step_factor)
    ramp = ramp_seconds(hpa, current, target, sync_period) if hpa is not None else 0.0
    if len(recent) < MIN_PODS:
        return LeadTimeEstimate(
            fallback,
            None,
            sync_period,
            ramp,
            tuple(n for n, _ in recent),
            "Fallback",
            f"{len(recent)} pod(s) with a measurable start-up (need {MIN_PODS})",
        )
    startup = float(np.quantile([s for _, s in recent], PERCENTILE))
    seconds = min(max(startup + sync_period + ramp, MIN_LEAD), MAX_LEAD)
    return LeadTimeEstimate(seconds, startup, sync_period, ramp, tuple(n for n, _ in recent))
