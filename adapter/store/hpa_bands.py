"""`stepPastTolerance` in a cluster: which HPA reads each target, its target for the metric, its
scale-up tolerance and the scale target's replica count, read (list only) from the HPAs themselves.

An HPA's `status.currentReplicas` is the scale target's `status.replicas` as of its last reconcile:
the very number its AverageValue tolerance compares against, so no Deployment read is needed. The
rule itself is adapter.pipeline.deadband (the simulator applies the same one); this module only
turns HPA objects into its inputs (adapter.sim.hpa_band.band_for) and keeps them fresh.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from adapter.errors import ValidationError
from adapter.pipeline.deadband import HpaBand
from adapter.sim.hpa_band import band_for
from adapter.sim.hpa_spec import parse_hpa

log = logging.getLogger("prescaler.deadband")
REFRESH = 15.0  # the HPA's own sync period: its replica count changes no faster than it reconciles


def bands_from_hpas(namespace: str, docs: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], HpaBand]:
    """(metric, namespace, resource) -> band for every External metric of these HPAs that selects a
    `resource=<name>`. An HPA that cannot be parsed, or has no status yet, is skipped (its targets are
    then unknown and served unchanged). Two HPAs reading the same target make it unknown too: which
    one the value should be stepped for is not defined."""
    out: dict[tuple[str, str, str], HpaBand] = {}
    ambiguous: set[tuple[str, str, str]] = set()
    for doc in docs:
        meta = doc.get("metadata") or {}
        status = doc.get("status") or {}
        current = status.get("currentReplicas")
        if not isinstance(current, int) or isinstance(current, bool) or current < 0:
            continue
        desired = status.get("desiredReplicas")
        spec_replicas = desired if isinstance(desired, int) and not isinstance(desired, bool) else None
        try:
            hpa = parse_hpa(
                {
                    "apiVersion": "autoscaling/v2",
                    "kind": "HorizontalPodAutoscaler",
                    "metadata": {"name": meta.get("name", "hpa"), "namespace": namespace},
                    "spec": doc.get("spec"),
                },
                "hpa",
            )
        except ValidationError:
            continue
        for m in hpa.metrics:
            resource = m.resource_label
            if m.type != "External" or resource is None:
                continue
            band = band_for(hpa, m.name, resource, current, spec_replicas)
            key = (m.name, namespace, resource)
            if band is None:
                continue
            if key in out:
                ambiguous.add(key)
            out[key] = band
    for key in ambiguous:
        del out[key]
    return out


class HpaBands:
    """The cluster's `ToleranceSteps.lookup`: refreshed from the API every REFRESH seconds."""

    def __init__(self, api_client: Any) -> None:
        self.api_client = api_client
        self.bands: dict[tuple[str, str, str], HpaBand] = {}
        self.failing: set[str] = set()  # namespaces whose last list failed (warned once per run of failures)

    def lookup(self, metric: str, namespace: str, resource: str) -> HpaBand | None:
        return self.bands.get((metric, namespace, resource))

    def refresh(self, namespaces: Iterable[str]) -> None:
        """List the HPAs of these namespaces (blocking: run it in a thread). A namespace that cannot
        be read keeps no bands: its targets are served unchanged until the next refresh works."""
        from kubernetes.client.rest import ApiException

        from adapter.store.kube_json import list_hpas

        found: dict[tuple[str, str, str], HpaBand] = {}
        for namespace in sorted(set(namespaces)):
            try:
                listing = list_hpas(self.api_client, namespace)
            except (ApiException, ValueError, OSError) as exc:
                # Loud once (an RBAC mistake shows here), then quiet until it works again: the
                # targets' status.toleranceStep says Unknown meanwhile.
                level = logging.DEBUG if namespace in self.failing else logging.WARNING
                log.log(
                    level,
                    "stepPastTolerance: cannot list HPAs in namespace %s (values there are served unchanged): %s",
                    namespace,
                    _short(exc),
                )
                self.failing.add(namespace)
                continue
            if namespace in self.failing:
                self.failing.discard(namespace)
                log.info("stepPastTolerance: listing HPAs in namespace %s works again", namespace)
            found.update(bands_from_hpas(namespace, listing.get("items") or []))
        self.bands = found  # one assignment: a query sees the old map or the new one


def _short(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None)
    return f"{status} {reason}" if status is not None else f"{type(exc).__name__}: {exc}"


def stepping_namespaces(engine: Any) -> set[str]:
    """Namespaces of the targets of VirtualMetrics with stepPastTolerance (from each event's
    partitions, worked out once per entries list: this runs on the loop every REFRESH seconds)."""
    names = {
        s.metric.metric_name
        for s in list(engine.metrics.values())
        if s.metric is not None and s.metric.policy.tolerance_step is not None
    }
    if not names:
        return set()
    return {
        namespace
        for s in list(engine.events.values())
        if s.vme is not None
        for metric, namespace in s.summary.partitions
        if metric in names
    }


async def refresh_forever(engine: Any, bands: HpaBands, interval: float = REFRESH) -> None:
    """Cluster mode: keep `bands` fresh while any VirtualMetric uses stepPastTolerance."""
    engine.tolerance_steps.lookup = bands.lookup
    while True:
        namespaces = stepping_namespaces(engine)
        if namespaces:
            try:
                await asyncio.to_thread(bands.refresh, namespaces)
            except Exception:  # noqa: BLE001 - a bug here must not stop serving; values go unchanged
                log.exception("stepPastTolerance: reading HPAs failed")
        await asyncio.sleep(interval)


__all__ = ["HpaBands", "bands_from_hpas", "refresh_forever", "stepping_namespaces"]
