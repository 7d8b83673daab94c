"""`leadTime: Auto`: how early the HPA must be told, learnt from how long the target's pods take.

    lead = percentile(pod creation -> Ready, recent pods) + HPA sync period + scale-up ramp

* start-up: a high percentile (p90) of creation -> Ready over the most recent pods of the scale
  target (read-only: the Deployment's selector, then its pods);
* sync period: the controller looks at the metric once per period (15 s by default), so a value can
  wait that long before anyone acts on it;
* ramp: the HPA's scale-up policy may need several periods to reach the expected step (from the
  current replicas to `step_factor` times as many); computed by running the simulator's HPA
  controller (adapter.sim.controller), not by a second copy of its rules.

The result is clamped to [MIN_LEAD, MAX_LEAD]; with fewer than MIN_PODS measurable pods the fixed
fallback is used and the estimate says so. The simulator uses the same rule, with start-up delays
drawn from its workload model.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterable, Mapping, Sequence
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
        out: dict[str, Any] = {"seconds": round(self.seconds, 3), "reason": self.reason,
                               "syncPeriodSeconds": self.sync_period, "rampSeconds": round(self.ramp, 3),
                               "pods": list(self.pods)}
        if self.message:
            out["message"] = self.message
        if self.startup is not None:
            out["startupSeconds"] = round(self.startup, 3)
            out["percentile"] = PERCENTILE
        return out


def ramp_seconds(hpa: HpaSpec, current: int, target: int, sync_period: float = SYNC_PERIOD,
                 config: ControllerConfig | None = None) -> float:
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
        decision = controller.reconcile(period * sync_period,
                                        TickInputs(spec=spec, status=spec, ready=spec, npods=spec, readings=readings))
        spec = decision.replicas
        if spec >= target:
            return period * sync_period
    return MAX_RAMP_PERIODS * sync_period


def learn_lead_time(startups: Sequence[tuple[str, float]], hpa: HpaSpec | None, current: int,
                    sync_period: float = SYNC_PERIOD, step_factor: float = STEP_FACTOR,
                    fallback: float = FALLBACK_LEAD) -> LeadTimeEstimate:
    """The rule: p90 start-up of the most recent pods + sync period + ramp, clamped; else fallback.

    `startups`: (pod name, seconds from creation to Ready), most recent last."""
    recent = list(startups)[-RECENT_PODS:]
    target = math.ceil(max(current, 1) * step_factor)
    ramp = ramp_seconds(hpa, current, target, sync_period) if hpa is not None else 0.0
    if len(recent) < MIN_PODS:
        return LeadTimeEstimate(fallback, None, sync_period, ramp, tuple(n for n, _ in recent), "Fallback",
                                f"{len(recent)} pod(s) with a measurable start-up (need {MIN_PODS})")
    startup = float(np.quantile([s for _, s in recent], PERCENTILE))
    seconds = min(max(startup + sync_period + ramp, MIN_LEAD), MAX_LEAD)
    return LeadTimeEstimate(seconds, startup, sync_period, ramp, tuple(n for n, _ in recent))


# ---------------------------------------------------------------- cluster: pods through the API


def _time(value: Any) -> float | None:
    if isinstance(value, dt.datetime):
        return value.timestamp()
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def pod_startups(pods: Iterable[Mapping[str, Any]]) -> list[tuple[str, float]]:
    """(name, creation -> Ready seconds) of pods that became Ready, oldest creation first."""
    out: list[tuple[float, str, float]] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        created = _time(meta.get("creationTimestamp"))
        ready = None
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "Ready" and cond.get("status") == "True":
                ready = _time(cond.get("lastTransitionTime"))
        if created is None or ready is None or ready < created:
            continue
        out.append((created, str(meta.get("name", "")), ready - created))
    out.sort()
    return [(name, seconds) for _, name, seconds in out]


def _json(response: Any) -> dict[str, Any]:
    """The body of a `_preload_content=False` response as a dict (ValueError if it is not one)."""
    body = json.loads(response.data)
    if not isinstance(body, dict):
        raise ValueError("the API returned no object")
    return body


def selector_string(match_labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))


def measure_lead_time(api_client: Any, namespace: str, target: Mapping[str, str], hpa: HpaSpec | None = None,
                      fallback: float = FALLBACK_LEAD) -> LeadTimeEstimate:
    """Read the scale target (Deployment) and its pods through the API; apply the rule.

    Needs only get/list on deployments and pods (read-only RBAC). Any API failure gives the fallback."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    kind, name = target.get("kind", "Deployment"), target.get("name", "")
    try:
        if kind != "Deployment":
            raise ValueError(f"scale target kind {kind} is not supported (Deployment only)")
        # Raw JSON (no model classes): only the fields read here need to be there.
        apps = client.AppsV1Api(api_client)
        deployment = _json(apps.read_namespaced_deployment(name, namespace, _preload_content=False))
        spec = deployment.get("spec") or {}
        labels = ((spec.get("selector") or {}).get("matchLabels")) or {}
        if not labels:
            raise ValueError("the Deployment has no selector.matchLabels")
        current = int((deployment.get("status") or {}).get("replicas") or spec.get("replicas") or 1)
        core = client.CoreV1Api(api_client)
        pods = _json(core.list_namespaced_pod(namespace, label_selector=selector_string(labels),
                                              _preload_content=False)).get("items") or []
    except (ApiException, ValueError, OSError) as exc:
        estimate = learn_lead_time([], hpa, 1, fallback=fallback)
        return LeadTimeEstimate(estimate.seconds, None, estimate.sync_period, estimate.ramp, (), "Fallback",
                                f"cannot read the scale target {kind}/{namespace}/{name}: {str(exc)[:200]}")
    return learn_lead_time(pod_startups(pods), hpa, current, fallback=fallback)


def hpa_reader(api_client: Any) -> Any:
    """(namespace, deployment) -> the HpaSpec of the HPA that scales it, or None (then: default policy).

    Read-only (get/list horizontalpodautoscalers); an HPA that cannot be parsed counts as none."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from adapter.errors import ValidationError
    from adapter.sim.hpa_spec import parse_hpa

    def read(namespace: str, name: str) -> HpaSpec | None:
        try:
            listing = _json(client.AutoscalingV2Api(api_client).list_namespaced_horizontal_pod_autoscaler(
                namespace, _preload_content=False))
        except (ApiException, ValueError, OSError):
            return None
        for doc in listing.get("items") or []:
            ref = (doc.get("spec") or {}).get("scaleTargetRef") or {}
            if ref.get("kind") == "Deployment" and ref.get("name") == name:
                try:
                    return parse_hpa({**doc, "apiVersion": "autoscaling/v2",
                                      "kind": "HorizontalPodAutoscaler"}, "hpa")
                except ValidationError:
                    return None
        return None

    return read


class AutoLeadTimes:
    """Cluster mode: the learnt lead of every `leadTime: Auto` VirtualMetric.

    A VirtualMetric serves several targets (the resources its VirtualMetricEvents name); each target
    Deployment is measured and the slowest one decides, since every target must be ready in time.
    `refresh` does blocking API calls: run it in a worker thread every REFRESH seconds."""

    REFRESH = 300.0

    def __init__(self, api_client: Any, hpa_for: Any = None, fallback: float = FALLBACK_LEAD):
        self.api_client = api_client
        self.hpa_for = hpa_for  # (namespace, name) -> HpaSpec | None; None: default policy (no ramp)
        self.fallback = fallback
        self.estimates: dict[str, LeadTimeEstimate] = {}

    def refresh(self, metrics: Iterable[Any], events: Iterable[Any]) -> bool:
        """Measure every Auto VirtualMetric's targets; True when a served lead changed."""
        events = list(events)
        changed = False
        seen = set()
        for vm in metrics:
            if not getattr(vm, "lead_time_auto", False):
                continue
            seen.add(vm.name)
            targets = auto_targets(vm, events)
            found = [measure_lead_time(self.api_client, ns, {"kind": "Deployment", "name": name},
                                       self.hpa_for(ns, name) if self.hpa_for else None, self.fallback)
                     for ns, name in targets]
            measured = [e for e in found if e.reason == "Measured"]
            if measured:
                estimate = max(measured, key=lambda e: e.seconds)
            elif found:
                estimate = found[0]
            else:
                estimate = LeadTimeEstimate(self.fallback, None, SYNC_PERIOD, 0.0, (), "Fallback",
                                            "no VirtualMetricEvent names a target for this metric")
            old = self.estimates.get(vm.name)
            changed |= old is None or old.seconds != estimate.seconds
            self.estimates[vm.name] = estimate
        for name in [n for n in self.estimates if n not in seen]:
            del self.estimates[name]
        return changed

    def lead_time(self, vm: Any) -> float:
        """The lead to serve `vm` with: learnt for Auto, its own otherwise."""
        estimate = self.estimates.get(vm.name) if getattr(vm, "lead_time_auto", False) else None
        return estimate.seconds if estimate is not None else float(vm.lead_time)

    def status(self, vm: Any) -> dict[str, Any] | None:
        """`status.learnedLeadTime` of an Auto VirtualMetric (None for a fixed leadTime)."""
        estimate = self.estimates.get(vm.name) if getattr(vm, "lead_time_auto", False) else None
        return estimate.status() if estimate is not None else None


def auto_targets(vm: Any, events: Iterable[Any]) -> list[tuple[str, str]]:
    """(namespace, name) of the workloads the VirtualMetricEvents give values of `vm`'s metric."""
    return sorted({(entry.resource.namespace, entry.resource.name) for vme in events for entry in vme.metrics
                   if entry.metric == vm.metric_name and entry.resource.name})


async def learn_forever(engine: Any, learner: AutoLeadTimes, interval: float = AutoLeadTimes.REFRESH,
                        check_every: float = 2.0) -> None:
    """Cluster mode: re-measure the Auto VirtualMetrics' targets every `interval` (API calls in a thread),
    and within `check_every` when an Auto VirtualMetric or one of its targets appears or changes: the
    objects arrive from the API after this loop starts, and a metric switched to Auto must not wait
    for the next full round on the fallback lead."""
    import asyncio
    import logging
    import time

    log = logging.getLogger("prescaler.leadtime")
    measured: Any = None
    measured_at = -math.inf
    while True:
        metrics = [s.metric for s in list(engine.metrics.values()) if s.metric is not None]
        events = [s.vme for s in list(engine.events.values()) if s.vme is not None]
        wanted = {vm.name: auto_targets(vm, events) for vm in metrics if vm.lead_time_auto}
        if wanted and (wanted != measured or time.monotonic() - measured_at >= interval):
            measured, measured_at = wanted, time.monotonic()
            try:
                if await asyncio.to_thread(learner.refresh, metrics, events):
                    engine.lead_times_changed()
            except Exception:  # noqa: BLE001 - a bug here must not stop serving; the fixed fallback stays
                log.exception("leadTime: Auto measurement failed")
        await asyncio.sleep(min(check_every, interval))


__all__ = ["AutoLeadTimes", "auto_targets", "hpa_reader", "learn_forever", "LeadTimeEstimate", "learn_lead_time", "measure_lead_time", "pod_startups", "ramp_seconds"]
