"""HorizontalPodPrescaler status in cluster mode (adapter/store/hpp_kube.py) and `prescaler migrate
--kubeconfig`, against the fake API server (real HTTPS, the real kubernetes client). HPAs are only read.
A real kube-apiserver test belongs to the control-plane e2e suite (not written yet)."""

from __future__ import annotations

import copy
import io
import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapter.cli import build_parser
from adapter.migrate import run
from adapter.store.hpp_kube import HPPStatusController
from tests.fakekube import FakeKube, ResourceType, json_patch

ROOT = Path(__file__).resolve().parents[2]
SEED_HPP = ROOT / "examples" / "seed" / "horizontalpodprescaler.yaml"
SEED_HPA = ROOT / "examples" / "hpa" / "service-a-hpa.yaml"
HPP_TYPE = ResourceType(
    "prescaler.pingpong.ai", "v1", "horizontalpodprescalers", "HorizontalPodPrescaler", True, status_subresource=True
)
HPA_TYPE = ResourceType(
    "autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", True, status_subresource=True
)
HPP = ("HorizontalPodPrescaler", "service-a", "service-a")


@pytest.fixture()
def fake() -> Iterator[FakeKube]:
    with FakeKube() as server:
        server.register_type(HPP_TYPE)
        server.register_type(HPA_TYPE)
        server.apply(yaml.safe_load(SEED_HPP.read_text()))
        yield server


def condition(fake: FakeKube) -> dict[str, Any]:
    obj = fake.get(*HPP)
    [cond] = (obj.get("status") or {}).get("conditions") or [{}]
    return cond


def hpa_without_prescaler_metric() -> dict[str, Any]:
    doc = yaml.safe_load(SEED_HPA.read_text())
    doc["spec"]["metrics"] = [m for m in doc["spec"]["metrics"] if m["type"] != "External"]
    return doc


def hpa_writes(fake: FakeKube) -> list[Any]:
    return [r for r in fake.requests if "horizontalpodautoscalers" in r.path and r.method != "GET"]


def test_status_follows_the_hpa_and_hpas_are_never_written(fake: FakeKube) -> None:
    controller = HPPStatusController(fake.api_client(), now=lambda: "2026-01-01T00:00:00Z")
    assert controller.reconcile_once() == 1
    cond = condition(fake)
    assert (cond["type"], cond["status"], cond["reason"]) == ("HPAConfigured", "False", "HPANotFound")

    fake.apply(hpa_without_prescaler_metric())
    controller.reconcile_once()
    cond = condition(fake)
    assert (cond["status"], cond["reason"]) == ("False", "MetricMissing")
    command = cond["message"].split("apply: ", 1)[1]
    argv = shlex.split(command)
    assert argv[:6] == ["kubectl", "-n", "service-a", "patch", "hpa", "service-a-hpa"]
    # The exact patch, applied (by the user; here by the fake's RFC 6902 code), configures the HPA.
    hpa = fake.get("HorizontalPodAutoscaler", "service-a-hpa", "service-a")
    fake.apply(json_patch(hpa, json.loads(argv[8])))
    controller.reconcile_once()
    cond = condition(fake)
    assert (cond["status"], cond["reason"]) == ("True", "HPAConfigured")
    assert fake.get(*HPP)["status"]["observedGeneration"] == 1

    writes = controller.writes
    assert controller.reconcile_once() == 0 and controller.writes == writes  # unchanged: no request
    assert hpa_writes(fake) == []


def test_invalid_hpp_gets_a_clear_condition_and_others_still_work(fake: FakeKube) -> None:
    bad = yaml.safe_load(SEED_HPP.read_text())
    bad["metadata"]["name"] = "broken"
    bad["spec"]["metrics"][0]["target"]["averageValue"] = "-3"
    fake.apply(bad)
    fake.apply(yaml.safe_load(SEED_HPA.read_text()))
    HPPStatusController(fake.api_client()).reconcile_once()
    broken = fake.get("HorizontalPodPrescaler", "broken", "service-a")["status"]["conditions"][0]
    assert broken["reason"] == "InvalidSpec" and "spec.metrics[0].target.averageValue" in broken["message"]
    assert condition(fake)["status"] == "True"


def test_only_the_lease_holder_writes(fake: FakeKube) -> None:
    controller = HPPStatusController(fake.api_client(), is_leader=lambda: False)
    assert controller.reconcile_once() == 0
    assert fake.get(*HPP).get("status") in (None, {})


def test_missing_crd_is_harmless(fake: FakeKube) -> None:
    fake._types.pop(("prescaler.pingpong.ai", "v1", "horizontalpodprescalers"))
    assert HPPStatusController(fake.api_client()).reconcile_once() == 0


def test_watch_reacts_to_hpa_changes(fake: FakeKube) -> None:
    fake.apply(hpa_without_prescaler_metric())
    controller = HPPStatusController(fake.api_client(), resync_interval=3600, debounce=0.05)
    controller.start()
    try:
        fake.wait_for(lambda: condition(fake).get("reason") == "MetricMissing", timeout=15)
        fake.apply(yaml.safe_load(SEED_HPA.read_text()))  # the user adds the External metric
        fake.wait_for(lambda: condition(fake).get("status") == "True", timeout=15)
        fake.delete("HorizontalPodAutoscaler", "service-a-hpa", "service-a")
        fake.wait_for(lambda: condition(fake).get("reason") == "HPANotFound", timeout=15)
    finally:
        controller.stop()
    assert hpa_writes(fake) == []


def test_migrate_reads_the_hpa_from_the_cluster_and_applies_nothing(fake: FakeKube, tmp_path: Path) -> None:
    fake.apply(hpa_without_prescaler_metric())
    kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig")
    before = copy.deepcopy(fake.get("HorizontalPodAutoscaler", "service-a-hpa", "service-a"))
    fake.requests.clear()
    out = io.StringIO()
    assert (
        run(build_parser().parse_args(["migrate", "--hpp", str(SEED_HPP), "--kubeconfig", str(kubeconfig)]), out) == 0
    )
    text = out.getvalue()
    manifest = yaml.safe_load(text.split("\n---\n", 1)[1])
    assert manifest["spec"]["metrics"][-1]["external"]["metric"]["name"] == "rps"
    assert manifest["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 70  # the HPA's own
    assert {r.method for r in fake.requests} == {"GET"}
    assert fake.get("HorizontalPodAutoscaler", "service-a-hpa", "service-a") == before
