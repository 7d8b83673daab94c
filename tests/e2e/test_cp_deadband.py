"""`stepPastTolerance` against the real HPA controller.

A Deployment runs 20 replicas under an HPA with an External AverageValue target of 10 per pod, and
prescaler serves 205 for it: 21 pods are needed, but the usage ratio 205 / (10 x 20) = 1.025 is inside
the controller's tolerance (0.1), so the real HPA keeps 20. With `stepPastTolerance: {}` on the
VirtualMetric, prescaler reads that HPA (list only: its target, its tolerance, its currentReplicas),
answers the smallest value past the band (220.001), and the real controller adds the pods: the
smallest whole number above 1.1 x 20, 23. There is no kubelet: for an AverageValue External metric
the controller divides by the scale target's replicas, not by ready pods, so none need to run.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from tests.e2e.controlplane import ControlPlane
from tests.e2e.support import PrescalerProcess, namespace_and_deployment, served, wait_for

log = logging.getLogger("e2e.deadband")

NS, APP, METRIC, VM = "dead-band", "web", "dead-band-rps", "dead-band"
REPLICAS = 20
VALUE = 205  # 21 pods at 10 each, ratio 1.025 against 20: inside the band
STEPPED = 23  # ceil(20 * 220.001 / 200)


def metric(step: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": METRIC, "defaultValue": 0, "mergeStrategy": "Sum"}
    if step:
        spec["stepPastTolerance"] = {}
    return {"apiVersion": "prescaler.pingpong.ai/v1", "kind": "VirtualMetric", "metadata": {"name": VM}, "spec": spec}


def hpa_status(plane: ControlPlane) -> dict[str, Any]:
    return plane.get_json("hpa", APP, "-n", NS).get("status", {})


def seen_value(plane: ControlPlane) -> str | None:
    """The value of our metric the HPA controller last read (status.currentMetrics)."""
    for current in hpa_status(plane).get("currentMetrics") or []:
        external = current.get("external") or {}
        if external.get("metric", {}).get("name") == METRIC:
            return (external.get("current") or {}).get("averageValue")
    return None


@pytest.mark.timeout(300)
def test_a_scale_up_inside_the_dead_band_happens_only_with_step_past_tolerance(
    plane: ControlPlane, prescaler: PrescalerProcess
) -> None:
    now = int(time.time())
    plane.apply(
        [
            *namespace_and_deployment(NS, APP, REPLICAS),
            metric(step=False),
            {
                "apiVersion": "prescaler.pingpong.ai/v1",
                "kind": "VirtualMetricEvent",
                "metadata": {"name": VM},
                "spec": {
                    "source": {
                        "schedule": {"items": [{"start": now - 60, "end": now + 3600, "values": {"load": VALUE}}]}
                    },
                    "metrics": [
                        {"name": METRIC, "resource": {"name": APP, "namespace": NS}, "value": {"expression": "load"}}
                    ],
                },
            },
            {
                "apiVersion": "autoscaling/v2",
                "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": APP, "namespace": NS},
                "spec": {
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": APP},
                    "minReplicas": 1,
                    "maxReplicas": 40,
                    "metrics": [
                        {
                            "type": "External",
                            "external": {
                                "metric": {"name": METRIC, "selector": {"matchLabels": {"resource": APP}}},
                                "target": {"type": "AverageValue", "averageValue": "10"},
                            },
                        }
                    ],
                },
            },
        ]
    )
    wait_for(lambda: served(plane, NS, APP, METRIC) == [str(VALUE)], 60, "the value in the band, served")

    # Without the option the real controller reads the value and, inside its band, keeps 20 replicas.
    wait_for(lambda: seen_value(plane) is not None, 60, "the HPA to read the metric")
    for _ in range(5):  # several 2 s sync periods
        status = hpa_status(plane)
        assert status.get("desiredReplicas") == REPLICAS, status
        time.sleep(2)
    log.info("without stepPastTolerance: the HPA read %s and kept %d replicas", seen_value(plane), REPLICAS)

    # With it: prescaler learns the HPA's band (refreshed every 15 s) and steps the answer past it.
    plane.apply([metric(step=True)])
    asked = time.monotonic()
    row = wait_for(
        lambda: next(
            (
                r
                for r in (plane.get_json("virtualmetric", VM).get("status", {}).get("toleranceStep") or {}).get(
                    "targets", []
                )
                if r.get("target") == f"{NS}/{APP}" and r.get("reason") == "Stepped"
            ),
            None,
        ),
        90,
        "status.toleranceStep to show the target Stepped",
    )
    log.info("toleranceStep after %.1fs: %s", time.monotonic() - asked, row)
    assert row["hpa"].endswith(APP), row
    assert float(row["value"]) == VALUE and 220 < float(row["served"]) <= 220.001, row
    scaled = wait_for(
        lambda: (s := hpa_status(plane)).get("desiredReplicas", 0) > REPLICAS and s, 60, "the HPA to scale up"
    )
    log.info("with stepPastTolerance: the HPA read %s and wants %s replicas", seen_value(plane), scaled)
    assert scaled["desiredReplicas"] == STEPPED, scaled
    # prescaler asked for the HPAs and never wrote one (its RBAC cannot): the HPA is the user's.
    assert plane.get_json("hpa", APP, "-n", NS)["spec"]["maxReplicas"] == 40
    for kind, name in (("virtualmetricevent", VM), ("virtualmetric", VM), ("namespace", NS)):
        plane.kubectl("delete", kind, name, "--wait=false")
