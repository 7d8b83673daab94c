"""What `stepPastTolerance` needs to know about an HPA (adapter.pipeline.deadband.HpaBand), from a parsed
HorizontalPodAutoscaler and the scale target's replica counts.

Shared by the cluster's reader (adapter.store.hpa_bands: the HPA from the API, replicas from its
status) and the simulator (the scenario's HPA, replicas from the workload model), so both step the
value by the same rule with the same inputs.
"""

from __future__ import annotations

from adapter.pipeline.deadband import TARGET_TYPES, HpaBand
from adapter.sim.hpa_spec import HpaSpec


def band_for(
    hpa: HpaSpec, metric: str, resource: str, replicas: int, spec: int | None = None, ready: int | None = None
) -> HpaBand | None:
    """The band of the HPA's External metric `metric` that selects `resource=<resource>`, or None.

    None when the HPA has no such metric (it does not read this target) or its target is not a
    Value/AverageValue. The scale-up tolerance is the HPA's own `behavior.scaleUp.tolerance` when
    set; otherwise None, and the rule uses the controller flag it is told to assume (prescaler
    cannot read kube-controller-manager's flags, nor whether HPAConfigurableTolerance is on)."""
    for m in hpa.metrics:
        if m.type == "External" and m.name == metric and m.resource_label == resource:
            if m.target_type not in TARGET_TYPES or m.target_milli <= 0:
                return None
            tolerance = hpa.behavior.scale_up.tolerance if hpa.behavior is not None else None
            return HpaBand(
                m.target_type,
                m.target_milli,
                tolerance,
                max(replicas, 0),
                spec,
                ready,
                f"{hpa.namespace}/{hpa.name}",
            )
    return None


__all__ = ["band_for"]
