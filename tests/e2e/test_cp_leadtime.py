"""`leadTime: Auto` in cluster mode against the real API server.

There is no kubelet, so nothing ever makes a pod Ready by itself. The real Deployment and ReplicaSet
controllers create the scale target's pods; the test then does what a kubelet does, through the
pods/status subresource: a Ready condition whose lastTransitionTime is the pod's creationTimestamp
plus a start-up time the test chose. prescaler (read-only RBAC on deployments and pods) must read
exactly that, learn  p90(start-up) + HPA sync period + the ramp the target's real HPA scale-up policy
needs, show it in the VirtualMetric's status.learnedLeadTime, and serve an announced window that much
ahead - not with the 5-minute fallback.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from typing import Any

import pytest

from tests.e2e.controlplane import ControlPlane
from tests.e2e.support import PrescalerProcess, namespace_and_deployment, served, wait_for

log = logging.getLogger("e2e.leadtime")

NS, APP, METRIC, VM = "lead-auto", "web", "lead-auto-rps", "lead-auto"
REPLICAS = 5
STARTUPS = [20, 30, 40, 50, 100]  # seconds from creation to Ready, one per pod
# p90 by linear interpolation over the 5 sorted start-ups: rank 0.9 * 4 = 3.6 -> 50 + 0.6 * (100 - 50)
P90 = 80.0
SYNC_PERIOD = 15.0  # prescaler assumes the HPA controller's default period
# The HPA below adds at most 2 pods per 15 s; the expected step doubles the 5 replicas: 5 -> 7 at
# once, 9 one period later, 10 two periods later -> 30 s of ramp.
RAMP = 30.0
LEAD = P90 + SYNC_PERIOD + RAMP
FALLBACK = 300.0


def rfc3339(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def vme(start: int) -> dict[str, Any]:
    return {
        "apiVersion": "prescaler.pingpong.ai/v1",
        "kind": "VirtualMetricEvent",
        "metadata": {"name": VM},
        "spec": {
            "source": {"schedule": {"items": [{"start": start, "end": start + 600, "values": {"users": 7}}]}},
            "metrics": [{"name": METRIC, "resource": {"name": APP, "namespace": NS}, "value": {"expression": "users"}}],
        },
    }


def learned(plane: ControlPlane) -> dict[str, Any]:
    return plane.get_json("virtualmetric", VM).get("status", {}).get("learnedLeadTime") or {}


@pytest.mark.timeout(600)
def test_auto_lead_time_is_learnt_from_real_pods_and_served(plane: ControlPlane, prescaler: PrescalerProcess) -> None:
    plane.apply(
        [
            *namespace_and_deployment(NS, APP, REPLICAS),
            # The HPA that scales the target: its scale-up policy sets the ramp. The metric's target is far
            # above the values served here, so it keeps the Deployment at minReplicas.
            {
                "apiVersion": "autoscaling/v2",
                "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": APP, "namespace": NS},
                "spec": {
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": APP},
                    "minReplicas": REPLICAS,
                    "maxReplicas": 20,
                    "metrics": [
                        {
                            "type": "External",
                            "external": {
                                "metric": {"name": METRIC, "selector": {"matchLabels": {"resource": APP}}},
                                "target": {"type": "AverageValue", "averageValue": "1000"},
                            },
                        }
                    ],
                    "behavior": {
                        "scaleUp": {
                            "stabilizationWindowSeconds": 0,
                            "selectPolicy": "Max",
                            "policies": [{"type": "Pods", "value": 2, "periodSeconds": 15}],
                        }
                    },
                },
            },
        ]
    )

    # The real ReplicaSet controller's pods, made Ready the way a kubelet reports it.
    def pods() -> list[dict[str, Any]]:
        items = plane.get_json("pods", "-n", NS, "-l", f"app={APP}")["items"]
        return items if len(items) == REPLICAS else []

    created = sorted(
        wait_for(pods, 60, f"the ReplicaSet controller to create {REPLICAS} pods"), key=lambda p: p["metadata"]["name"]
    )
    startups: dict[str, int] = {}
    for pod, startup in zip(created, STARTUPS, strict=True):
        name = pod["metadata"]["name"]
        ready_at = parse_time(pod["metadata"]["creationTimestamp"]) + startup
        status = {
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "True",
                        "lastTransitionTime": pod["metadata"]["creationTimestamp"],
                    },
                    {"type": "Ready", "status": "True", "lastTransitionTime": rfc3339(ready_at)},
                ]
            }
        }
        plane.kubectl("patch", "pod", name, "-n", NS, "--subresource=status", "--type=merge", "-p", json.dumps(status))
        startups[name] = startup
    log.info("pods and their start-ups: %s", startups)

    # A leadTime: Auto metric whose only target is that Deployment; the window is far out for now.
    plane.apply(
        [
            {
                "apiVersion": "prescaler.pingpong.ai/v1",
                "kind": "VirtualMetric",
                "metadata": {"name": VM},
                "spec": {"name": METRIC, "defaultValue": 0, "mergeStrategy": "Sum", "leadTime": "Auto"},
            },
            vme(int(time.time()) + 3000),
        ]
    )
    asked = time.monotonic()
    status = wait_for(
        lambda: (s := learned(plane)).get("reason") == "Measured" and s,
        60,
        "status.learnedLeadTime with reason Measured",
    )
    log.info("learnedLeadTime after %.1fs: %s", time.monotonic() - asked, status)
    assert status["startupSeconds"] == pytest.approx(P90), status
    assert status["percentile"] == 0.9, status
    assert status["syncPeriodSeconds"] == SYNC_PERIOD, status
    assert status["rampSeconds"] == pytest.approx(RAMP), status
    assert status["seconds"] == pytest.approx(LEAD), status
    assert sorted(status["pods"]) == sorted(startups), status
    columns = plane.kubectl("get", "virtualmetric", VM).stdout
    assert "Auto" in columns, columns

    # Served with the learnt lead: a window LEAD + 20 s ahead is not served yet (the fallback would
    # serve it already), and is served from window start - LEAD on.
    start = int(time.time() + LEAD + 20)
    plane.apply(vme(start))
    wait_for(lambda: served(plane, NS, APP, METRIC) == ["0"], 30, "the edited window, not served yet")
    assert start - time.time() < FALLBACK
    seen = wait_for(
        lambda: served(plane, NS, APP, METRIC) == ["7"] and time.time(),
        60,
        "the window's value, served LEAD seconds ahead",
        interval=0.1,
    )
    early = start - seen
    log.info("window starting at %d served %.1fs ahead (learnt lead %.0fs)", start, early, LEAD)
    assert LEAD - 3 <= early <= LEAD + 0.5, (early, LEAD)
    for kind, name in (("virtualmetricevent", VM), ("virtualmetric", VM), ("namespace", NS)):
        plane.kubectl("delete", kind, name, "--wait=false")
