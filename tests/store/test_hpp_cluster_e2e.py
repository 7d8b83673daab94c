"""Cluster mode end to end with the fake API server: the real `prescaler serve --kubeconfig` with an
upstream adapter writes HorizontalPodPrescaler status (HPAConfigured) from the HPAs it only reads, and
marks a VirtualMetric that shadows an upstream metric (ShadowsUpstream). A test against a real
kube-apiserver belongs to the control-plane e2e suite (not written yet)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.fakekube import FakeKube, ResourceType
from tests.helpers import free_port
from tests.pki import TestPKI
from tests.upstream_server import TOKEN, UpstreamServer

ROOT = Path(__file__).resolve().parents[2]
HPP_TYPE = ResourceType(
    "prescaler.pingpong.ai", "v1", "horizontalpodprescalers", "HorizontalPodPrescaler", True, status_subresource=True
)
HPA_TYPE = ResourceType(
    "autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", True, status_subresource=True
)


def hpa(with_prescaler_metric: bool) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "examples/hpa/service-a-hpa.yaml").read_text())
    if not with_prescaler_metric:
        doc["spec"]["metrics"] = [m for m in doc["spec"]["metrics"] if m["type"] != "External"]
    return doc


def conditions(fake: FakeKube, kind: str, name: str, namespace: str | None = None) -> dict[str, dict[str, Any]]:
    obj = fake.get(kind, name, namespace) or {}
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[tuple[FakeKube, subprocess.Popen[bytes], Path, UpstreamServer, int]]:
    pki = TestPKI(tmp_path / "pki")
    upstream = UpstreamServer(pki, names=["keda-metric", "rps"]).start()
    (tmp_path / "upstream-token").write_text(TOKEN)
    with FakeKube() as fake:
        fake.register_type(HPP_TYPE)
        fake.register_type(HPA_TYPE)
        fake.set_auth_configmap({})
        fake.tokens["hpa-token"] = {
            "username": "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
            "groups": ["system:serviceaccounts"],
            "uid": "u1",
        }
        fake.tokens["intruder"] = {"username": "mallory", "groups": [], "uid": "u2"}
        fake.sar_policy = lambda spec: (spec.get("user") != "mallory", "RBAC: test policy")
        fake.apply(
            {
                "apiVersion": "prescaler.pingpong.ai/v1",
                "kind": "VirtualMetric",
                "metadata": {"name": "rps"},
                "spec": {"defaultValue": 0},
            }
        )
        fake.apply(yaml.safe_load((ROOT / "examples/seed/horizontalpodprescaler.yaml").read_text()))
        fake.apply(hpa(with_prescaler_metric=False))
        kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig")
        port = free_port()
        log_path = tmp_path / "serve.log"
        with log_path.open("w") as log:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "adapter.cli",
                    "serve",
                    "--kubeconfig",
                    str(kubeconfig),
                    "--secure-port",
                    str(port),
                    "--bind-address",
                    "127.0.0.1",
                    "--status-namespace",
                    "prescaler",
                    "--upstream-external-metrics-url",
                    upstream.url,
                    "--upstream-ca-file",
                    str(pki.serving_ca_file),
                    "--upstream-token-file",
                    str(tmp_path / "upstream-token"),
                    "--upstream-discovery-interval",
                    "1",
                ],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            try:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    try:
                        if httpx.get(f"https://127.0.0.1:{port}/readyz", verify=False, timeout=2).status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    time.sleep(0.2)
                yield fake, proc, log_path, upstream, port
            finally:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                upstream.stop()


def wait_for(fake: FakeKube, predicate: Any, log_path: Path, what: str) -> None:
    try:
        fake.wait_for(predicate, timeout=30)
    except Exception as exc:
        raise AssertionError(f"{what}: {exc}\n" + log_path.read_text()[-3000:]) from None


def test_hpp_status_and_shadowing_in_cluster_mode(cluster) -> None:
    fake, _proc, log_path, _upstream, _port = cluster
    wait_for(
        fake,
        lambda: (
            conditions(fake, "HorizontalPodPrescaler", "service-a", "service-a").get("HPAConfigured", {}).get("reason")
            == "MetricMissing"
        ),
        log_path,
        "HPP status MetricMissing",
    )
    message = conditions(fake, "HorizontalPodPrescaler", "service-a", "service-a")["HPAConfigured"]["message"]
    assert "kubectl -n service-a patch hpa service-a-hpa --type=json" in message

    fake.apply(hpa(with_prescaler_metric=True))  # the user applies the change
    wait_for(
        fake,
        lambda: (
            conditions(fake, "HorizontalPodPrescaler", "service-a", "service-a").get("HPAConfigured", {}).get("status")
            == "True"
        ),
        log_path,
        "HPP status True",
    )

    wait_for(
        fake,
        lambda: "ShadowsUpstream" in conditions(fake, "VirtualMetric", "rps"),
        log_path,
        "ShadowsUpstream on the VirtualMetric",
    )
    assert conditions(fake, "VirtualMetric", "rps")["Ready"]["status"] == "True"
    assert [r for r in fake.requests if "horizontalpodautoscalers" in r.path and r.method != "GET"] == []


def test_callers_are_authorized_by_prescaler_before_anything_is_forwarded(cluster) -> None:
    fake, _proc, _log, upstream, port = cluster
    path = "/apis/external.metrics.k8s.io/v1beta1/namespaces/service-a/keda-metric"

    def get(token: str) -> httpx.Response:
        return httpx.get(
            f"https://127.0.0.1:{port}{path}", headers={"Authorization": f"Bearer {token}"}, verify=False, timeout=10
        )

    denied = get("intruder")
    assert denied.status_code == 403 and denied.json()["reason"] == "Forbidden"
    assert upstream.requests_for("keda-metric") == []
    allowed = get("hpa-token")
    assert allowed.status_code == 200 and allowed.json()["items"][0]["value"] == "42"
    [seen] = upstream.requests_for("keda-metric")
    assert seen.headers["authorization"] == f"Bearer {TOKEN}"  # prescaler's identity, not the HPA's
    sar = [r for r in fake.subject_access_reviews if r["spec"]["resourceAttributes"].get("resource") == "keda-metric"]
    assert {r["spec"]["user"] for r in sar} == {
        "mallory",
        "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
    }
