"""The real HPA controller scales a Deployment on prescaler's values: up *before* an announced window
starts (leadTime), down after it ends and the HPA's stabilization window has passed; a VME edit is
served within 2 s; with prescaler stopped the HPA keeps its replicas and resumes afterwards.

No kubelet runs, so the pods never start; for an External metric that changes nothing: the HPA reads
the scale subresource's replicas and the metric value and wants ceil(value / averageValue) replicas
(readiness only matters for Resource/Pods metrics). Each test writes its timeline to the test log
and to .e2e/<run>/logs/."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, config, watch

from tests.announcer_server import Announcer
from tests.e2e.controlplane import ControlPlane
from tests.e2e.support import PrescalerProcess, served, wait_for

log = logging.getLogger("e2e.hpa")

LEAD_TIME = 60  # VirtualMetric rps leadTime (seconds)
WINDOW = 30  # the announced window's length (seconds)
SCALE_DOWN_STABILIZATION = 20  # the test HPA's behavior.scaleDown.stabilizationWindowSeconds


def deployment(namespace: str, name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]},
            },
        },
    }


def hpa(namespace: str, name: str, resource: str) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": 1,
            "maxReplicas": 20,
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {"name": "rps", "selector": {"matchLabels": {"resource": resource}}},
                        "target": {"type": "AverageValue", "averageValue": "10"},
                    },
                }
            ],
            # Scale-up keeps the defaults (no stabilization; +100 % or +4 pods per 15 s);
            # only the 5-minute scale-down stabilization is shortened to fit a bounded test.
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": SCALE_DOWN_STABILIZATION}},
        },
    }


def workload(plane: ControlPlane, namespace: str, name: str, resource: str) -> None:
    plane.apply(
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            deployment(namespace, name),
            hpa(namespace, name, resource),
        ]
    )


def hpa_condition(plane: ControlPlane, namespace: str, name: str, kind: str) -> dict[str, Any]:
    doc = plane.get_json("hpa", name, "-n", namespace)
    return next((c for c in doc.get("status", {}).get("conditions", []) if c["type"] == kind), {})


class ReplicaRecorder:
    """Watches a Deployment (a real watch, not polling) and records (time, spec.replicas) changes."""

    def __init__(self, plane: ControlPlane, namespace: str, name: str):
        api_client = config.new_client_from_config(str(plane.admin_kubeconfig))
        self.apps = client.AppsV1Api(api_client)
        self.namespace, self.name = namespace, name
        self.changes: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            w = watch.Watch()
            try:
                for event in w.stream(
                    self.apps.list_namespaced_deployment,
                    self.namespace,
                    field_selector=f"metadata.name={self.name}",
                    timeout_seconds=5,
                ):
                    replicas = event["object"].spec.replicas
                    with self._cond:
                        if not self.changes or self.changes[-1][1] != replicas:
                            self.changes.append((time.time(), replicas))
                            self._cond.notify_all()
                    if self._stop.is_set():
                        break
            except Exception as exc:  # noqa: BLE001 - a dropped watch is restarted
                log.warning("watch %s/%s: %s", self.namespace, self.name, exc)
                time.sleep(0.5)

    @property
    def replicas(self) -> int | None:
        return self.changes[-1][1] if self.changes else None

    def wait(self, predicate: Any, timeout: float, what: str) -> float:
        """Block until the current replicas satisfy ``predicate``; returns the time of that change."""
        deadline = time.time() + timeout
        with self._cond:
            while not (self.changes and predicate(self.changes[-1][1])):
                left = deadline - time.time()
                if left <= 0:
                    raise AssertionError(
                        f"{self.namespace}/{self.name}: timed out waiting for {what}; changes {self.changes}"
                    )
                self._cond.wait(left)
            return self.changes[-1][0]

    def since(self, start: float) -> list[tuple[float, int]]:
        """Changes after ``start``, preceded by the value in force at ``start``."""
        before = [c for c in self.changes if c[0] <= start]
        return ([(start, before[-1][1])] if before else []) + [c for c in self.changes if c[0] > start]

    def stop(self) -> None:
        self._stop.set()


@pytest.fixture()
def recorder_factory(plane: ControlPlane) -> Iterator[Any]:
    recorders: list[ReplicaRecorder] = []

    def make(namespace: str, name: str) -> ReplicaRecorder:
        recorders.append(ReplicaRecorder(plane, namespace, name))
        return recorders[-1]

    yield make
    for r in recorders:
        r.stop()


def write_timeline(plane: ControlPlane, name: str, lines: list[str]) -> None:
    for line in lines:
        log.info("%s", line)
    (plane.logs / f"{name}.txt").write_text("\n".join(lines) + "\n")


@pytest.mark.timeout(600)
def test_hpa_scales_up_before_the_window_and_down_after(
    plane: ControlPlane, seed: dict[str, str], recorder_factory: Any
) -> None:
    ns, name = "scale-ahead", "web"
    announcer = Announcer()
    try:
        plane.kubectl(
            "patch", "virtualmetric", "rps", "--type=merge", "-p", f'{{"spec":{{"leadTime":"{LEAD_TIME}s"}}}}'
        )
        plane.apply(
            {
                "apiVersion": "prescaler.pingpong.ai/v1",
                "kind": "VirtualMetricEvent",
                "metadata": {"name": "scale-ahead"},
                "spec": {
                    "source": {"api": {"url": announcer.url}, "interval": "5s"},
                    "metrics": [
                        {
                            "name": "rps",
                            "resource": {"name": name, "namespace": ns},
                            "value": {"expression": "scheduledMessage * 2"},
                        }
                    ],
                },
            }
        )
        workload(plane, ns, name, name)
        recorder = recorder_factory(ns, name)
        # The HPA reads the metric (0 now: nothing announced) before the announcement is made.
        wait_for(
            lambda: hpa_condition(plane, ns, name, "ScalingActive").get("status") == "True",
            60,
            "the HPA to read the external metric (ScalingActive=True)",
        )
        assert recorder.wait(lambda r: r == 1, 30, "1 replica") > 0

        window_start = int(time.time()) + LEAD_TIME + 30
        window_end = window_start + WINDOW
        announced_at = time.time()
        announcer.set_items([{"start": window_start, "end": window_end, "values": {"scheduledMessage": 50}}])
        log.info(
            "announced 50 messages for [%d, %d), %.1fs ahead", window_start, window_end, window_start - announced_at
        )

        t_ten = recorder.wait(lambda r: r >= 10, window_start - time.time() + 30, "10 replicas")
        t_down = recorder.wait(
            lambda r: r == 1, window_end - time.time() + SCALE_DOWN_STABILIZATION + 60, "the scale-down to 1 replica"
        )
        changes = recorder.since(announced_at)
        lines = [
            f"window [{window_start}, {window_end}) announced at {announced_at:.1f}; leadTime {LEAD_TIME}s, "
            f"scale-down stabilization {SCALE_DOWN_STABILIZATION}s, HPA sync period {plane.hpa_sync_period}"
        ]
        lines += [f"  t = window start {t - window_start:+7.1f}s  replicas {r}" for t, r in changes]
        lines.append(
            f"reached 10 replicas {window_start - t_ten:.1f}s BEFORE the window started; back to 1 "
            f"{t_down - window_end:.1f}s after it ended"
        )
        write_timeline(plane, "hpa-timeline", lines)

        t_first_up = next(t for t, r in changes if r > 1)
        # Up because of leadTime: not before the value rose (window start - leadTime), and in time.
        assert t_first_up >= window_start - LEAD_TIME - 1, lines
        assert t_ten < window_start, lines
        assert max(r for _, r in changes) == 10, lines  # ceil(100 / 10), never more
        during = [r for t, r in changes if window_start <= t < window_end]
        assert all(r == 10 for r in during), lines
        # Down only once the value fell (window end) and the stabilization window has passed.
        assert t_down >= window_end + SCALE_DOWN_STABILIZATION - 2, lines
    finally:
        announcer.close()
        plane.kubectl("delete", "virtualmetricevent", "scale-ahead", "--wait=false", check=False)


def test_vme_edit_is_served_within_two_seconds(plane: ControlPlane, seed: dict[str, str]) -> None:
    now = int(time.time())

    def vme(users: int) -> dict[str, Any]:
        return {
            "apiVersion": "prescaler.pingpong.ai/v1",
            "kind": "VirtualMetricEvent",
            "metadata": {"name": "edited"},
            "spec": {
                "source": {"schedule": {"items": [{"start": now - 60, "end": now + 3600, "values": {"users": users}}]}},
                "metrics": [
                    {
                        "name": "rps",
                        "resource": {"name": "edited", "namespace": "edits"},
                        "value": {"expression": "users"},
                    }
                ],
            },
        }

    def serves(value: int) -> Callable[[], bool]:
        return lambda: served(plane, "edits", "edited") == [str(value)]

    plane.apply(vme(3))
    wait_for(serves(3), 30, "the first value")
    delays = []
    for users in (7, 11, 19):
        plane.apply(vme(users))
        applied = time.monotonic()
        wait_for(serves(users), 10, f"value {users}", interval=0.05)
        delays.append(time.monotonic() - applied)
    log.info("VME edit -> served value through the aggregator: %s s", ", ".join(f"{d:.2f}" for d in delays))
    assert max(delays) < 2.0, delays
    plane.kubectl("delete", "virtualmetricevent", "edited", "--wait=false")


@pytest.mark.timeout(600)
def test_hpa_keeps_replicas_while_prescaler_is_down(
    plane: ControlPlane, prescaler: PrescalerProcess, seed: dict[str, str], recorder_factory: Any
) -> None:
    ns, name = "steady", "api"
    now = int(time.time())

    def vme(users: int) -> dict[str, Any]:
        return {
            "apiVersion": "prescaler.pingpong.ai/v1",
            "kind": "VirtualMetricEvent",
            "metadata": {"name": "steady"},
            "spec": {
                "source": {"schedule": {"items": [{"start": now - 60, "end": now + 3600, "values": {"users": users}}]}},
                "metrics": [
                    {"name": "rps", "resource": {"name": name, "namespace": ns}, "value": {"expression": "users"}}
                ],
            },
        }

    plane.apply(vme(40))
    workload(plane, ns, name, name)
    recorder = recorder_factory(ns, name)
    recorder.wait(lambda r: r == 4, 90, "4 replicas (40 / 10)")
    lines = [f"4 replicas at {time.time():.1f}; stopping prescaler for 60 s"]
    prescaler.stop()
    stopped = time.time()
    try:
        wait_for(
            lambda: hpa_condition(plane, ns, name, "ScalingActive").get("reason") == "FailedGetExternalMetric",
            30,
            "the HPA to see the metric fail",
        )
        plane.apply(vme(70))  # changed while prescaler is down: cannot be served yet
        while time.time() < stopped + 60:
            assert prescaler.process.proc and not prescaler.running()
            time.sleep(min(1.0, max(0.0, stopped + 60 - time.time())))
        held = recorder.since(stopped)
        lines += [f"  t = stop {t - stopped:+6.1f}s  replicas {r}" for t, r in held]
        assert [r for _, r in held] == [4], lines  # a failing metric never scales down (nor up)
    finally:
        prescaler.start()
    restarted = time.time()
    t_seven = recorder.wait(lambda r: r == 7, 90, "7 replicas (70 / 10) after prescaler is back")
    lines.append(f"prescaler back at stop {restarted - stopped:+.1f}s; 7 replicas {t_seven - restarted:.1f}s later")
    write_timeline(plane, "resilience-timeline", lines)
    wait_for(lambda: hpa_condition(plane, ns, name, "ScalingActive").get("status") == "True", 30, "ScalingActive")
    plane.kubectl("delete", "virtualmetricevent", "steady", "--wait=false")
