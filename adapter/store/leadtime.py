"""`leadTime: Auto` in a cluster: measure how long the scale target's pods take from creation to Ready
(read-only: the Deployment's selector, then its pods, and the HPA whose scale-up policy sets the ramp)
and apply the rule in adapter.sim.leadtime, which the simulator shares.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping
from typing import Any

from adapter.sim.hpa_spec import HpaSpec
from adapter.sim.leadtime import (  # noqa: F401 - the rule's names, re-exported for the cluster side
    FALLBACK_LEAD,
    MAX_LEAD,
    MIN_LEAD,
    MIN_PODS,
    PERCENTILE,
    RECENT_PODS,
    STEP_FACTOR,
    SYNC_PERIOD,
    LeadTimeEstimate,
    learn_lead_time,
    ramp_seconds,
)

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


def selector_string(match_labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))


REQUEST_TIMEOUT = 10.0  # seconds, for each read of the scale target and its pods


def measure_lead_time(
    api_client: Any,
    namespace: str,
    target: Mapping[str, str],
    hpa: HpaSpec | None = None,
    fallback: float = FALLBACK_LEAD,
) -> LeadTimeEstimate:
    """Read the scale target (Deployment) and its pods through the API; apply the rule.

    Needs only get/list on deployments and pods (read-only RBAC). Any API failure gives the fallback."""
    from kubernetes.client.rest import ApiException

    from adapter.store.kube_json import list_pods, read_deployment

    kind, name = target.get("kind", "Deployment"), target.get("name", "")
    try:
        if kind != "Deployment":
            raise ValueError(f"scale target kind {kind} is not supported (Deployment only)")
        # Raw JSON (no model classes): only the fields read here need to be there.
        deployment = read_deployment(api_client, namespace, name, timeout=REQUEST_TIMEOUT)
        spec = deployment.get("spec") or {}
        labels = ((spec.get("selector") or {}).get("matchLabels")) or {}
        if not labels:
            raise ValueError("the Deployment has no selector.matchLabels")
        current = int((deployment.get("status") or {}).get("replicas") or spec.get("replicas") or 1)
        pods = list_pods(api_client, namespace, selector_string(labels), timeout=REQUEST_TIMEOUT).get("items") or []
    except (ApiException, ValueError, OSError) as exc:
        estimate = learn_lead_time([], hpa, 1, fallback=fallback)
        return LeadTimeEstimate(
            estimate.seconds,
            None,
            estimate.sync_period,
            estimate.ramp,
            (),
            "Fallback",
            f"cannot read the scale target {kind}/{namespace}/{name}: {str(exc)[:200]}",
        )
    return learn_lead_time(pod_startups(pods), hpa, current, fallback=fallback)


def hpa_reader(api_client: Any) -> Any:
    """(namespace, deployment) -> the HpaSpec of the HPA that scales it, or None (then: default policy).

    Read-only (get/list horizontalpodautoscalers); an HPA that cannot be parsed counts as none."""
    from kubernetes.client.rest import ApiException

    from adapter.errors import ValidationError
    from adapter.sim.hpa_spec import parse_hpa
    from adapter.store.kube_json import list_hpas

    def read(namespace: str, name: str) -> HpaSpec | None:
        try:
            listing = list_hpas(api_client, namespace)
        except (ApiException, ValueError, OSError):
            return None
        for doc in listing.get("items") or []:
            ref = (doc.get("spec") or {}).get("scaleTargetRef") or {}
            if ref.get("kind") == "Deployment" and ref.get("name") == name:
                try:
                    return parse_hpa({**doc, "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler"}, "hpa")
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
            found = [
                measure_lead_time(
                    self.api_client,
                    ns,
                    {"kind": "Deployment", "name": name},
                    self.hpa_for(ns, name) if self.hpa_for else None,
                    self.fallback,
                )
                for ns, name in targets
            ]
            measured = [e for e in found if e.reason == "Measured"]
            if measured:
                estimate = max(measured, key=lambda e: e.seconds)
            elif found:
                estimate = found[0]
            else:
                estimate = LeadTimeEstimate(
                    self.fallback,
                    None,
                    SYNC_PERIOD,
                    0.0,
                    (),
                    "Fallback",
                    "no VirtualMetricEvent names a target for this metric",
                )
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
    return sorted(
        {
            (entry.resource.namespace, entry.resource.name)
            for vme in events
            for entry in vme.metrics
            if entry.metric == vm.metric_name and entry.resource.name
        }
    )


async def learn_forever(
    engine: Any, learner: AutoLeadTimes, interval: float = AutoLeadTimes.REFRESH, check_every: float = 2.0
) -> None:
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


__all__ = [
    "AutoLeadTimes",
    "auto_targets",
    "hpa_reader",
    "learn_forever",
    "LeadTimeEstimate",
    "learn_lead_time",
    "measure_lead_time",
    "pod_startups",
    "ramp_seconds",
]
