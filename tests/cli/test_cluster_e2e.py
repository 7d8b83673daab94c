"""Cluster mode end to end against the in-process fake Kubernetes API: the real `prescaler serve`
watches the CRDs, authenticates callers by TokenReview, authorizes by SubjectAccessReview, serves
values that follow watch events, and writes status through the status subresource."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.fakekube import FakeKube
from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
V1 = "/apis/external.metrics.k8s.io/v1beta1"
HPA_TOKEN = "hpa-token"
HPA_USER = {
    "username": "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
    "uid": "u1",
    "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system"],
}


def vm(**spec):
    return {
        "apiVersion": "prescaler.pingpong.ai/v1",
        "kind": "VirtualMetric",
        "metadata": {"name": "rps"},
        "spec": {"name": "rps", "defaultValue": 0, "mergeStrategy": "Sum", **spec},
    }


def vme(value: int, now: float):
    return {
        "apiVersion": "prescaler.pingpong.ai/v1",
        "kind": "VirtualMetricEvent",
        "metadata": {"name": "campaign"},
        "spec": {
            "source": {
                "schedule": {"items": [{"start": int(now) - 60, "end": int(now) + 3600, "values": {"users": value}}]}
            },
            "metrics": [
                {
                    "name": "rps",
                    "resource": {"name": "service-a", "namespace": "service-a"},
                    "value": {"expression": "users * 2"},
                }
            ],
        },
    }


@pytest.fixture()
def cluster(tmp_path: Path):
    with FakeKube() as fake:
        fake.tokens[HPA_TOKEN] = HPA_USER
        fake.tokens["intruder"] = {"username": "mallory", "groups": []}
        fake.sar_policy = lambda spec: ((spec.get("user") == HPA_USER["username"]), "RBAC: test policy")
        fake.set_auth_configmap({})
        kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig")
        port = free_port()
        log = (tmp_path / "serve.log").open("w")
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
                "--tls-san",
                "127.0.0.1",
            ],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base = f"https://127.0.0.1:{port}"
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if httpx.get(f"{base}/readyz", verify=False, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None:
                break
            time.sleep(0.2)
        else:
            proc.kill()
        try:
            if proc.poll() is not None:
                raise RuntimeError((tmp_path / "serve.log").read_text()[-3000:])
            yield fake, base, tmp_path
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()


def get(base: str, path: str, token: str | None = HPA_TOKEN, **kw) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(f"{base}{path}", headers=headers, verify=False, timeout=5, **kw)


def served(base: str) -> list[str] | int:
    r = get(base, f"{V1}/namespaces/service-a/rps", params={"labelSelector": "resource=service-a"})
    return [i["value"] for i in r.json()["items"]] if r.status_code == 200 else r.status_code


def test_watch_driven_values_auth_and_status(cluster) -> None:
    fake, base, _ = cluster
    now = time.time()
    fake.apply(vm())
    fake.apply(vme(10, now))
    deadline = time.time() + 20
    while served(base) != ["20"] and time.time() < deadline:
        time.sleep(0.05)
    assert served(base) == ["20"]

    # A watch-driven change shows up in served values (the goal is within one second).
    fake.apply(vme(30, now))
    changed_at = time.perf_counter()
    while served(base) != ["60"] and time.perf_counter() - changed_at < 10:
        time.sleep(0.01)
    latency = time.perf_counter() - changed_at
    print(f"watch -> served value latency: {latency * 1000:.0f} ms")
    assert served(base) == ["60"]

    # The SAR carried the exact attributes of docs/api.md §6.3.
    sar = next(
        s
        for s in reversed(fake.subject_access_reviews)
        if s["spec"].get("resourceAttributes", {}).get("resource") == "rps"
    )
    attrs = sar["spec"]["resourceAttributes"]
    assert (attrs["verb"], attrs["group"], attrs["version"], attrs["namespace"]) == (
        "list",
        "external.metrics.k8s.io",
        "v1beta1",
        "service-a",
    )
    assert sar["spec"]["user"] == HPA_USER["username"]

    # Someone the SAR denies gets the exact 403 Status; no credentials at all is anonymous -> 403 too.
    denied = get(base, f"{V1}/namespaces/service-a/rps", token="intruder")
    assert denied.status_code == 403
    assert denied.json()["message"].startswith(
        'rps.external.metrics.k8s.io is forbidden: User "mallory" cannot list resource "rps" in API group '
        '"external.metrics.k8s.io" in the namespace "service-a"'
    )
    assert get(base, f"{V1}/namespaces/service-a/rps", token="bogus").status_code == 401
    assert get(base, "/healthz", token=None).status_code == 200

    # Status written through the status subresource by the Lease holder.
    deadline = time.time() + 20
    status = {}
    while time.time() < deadline:
        status = (fake.get("VirtualMetricEvent", "campaign") or {}).get("status") or {}
        if any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", [])):
            break
        time.sleep(0.1)
    assert status.get("sourceKind") == "schedule" and status.get("itemCount") == 1
    assert {c["type"] for c in status["conditions"]} == {"Ready", "SourceHealthy", "ExpressionsValid"}
    vm_status = (fake.get("VirtualMetric", "rps") or {}).get("status") or {}
    deadline = time.time() + 10
    while vm_status.get("targets") != 1 and time.time() < deadline:
        time.sleep(0.1)
        vm_status = (fake.get("VirtualMetric", "rps") or {}).get("status") or {}
    assert vm_status.get("targets") == 1

    # An invalid object is reported in its status and breaks nothing else.
    bad = vme(1, now)
    bad["metadata"]["name"] = "broken"
    bad["spec"]["metrics"][0]["value"]["expression"] = "users +"
    fake.apply(bad)
    deadline = time.time() + 20
    ready = {}
    while time.time() < deadline:
        conditions = ((fake.get("VirtualMetricEvent", "broken") or {}).get("status") or {}).get("conditions", [])
        ready = next((c for c in conditions if c["type"] == "Ready"), {})
        if ready:
            break
        time.sleep(0.1)
    assert ready.get("status") == "False" and "spec.metrics[0].value.expression" in ready.get("message", "")
    assert served(base) == ["60"]
    # ... and as a Kubernetes Event on the object (the status writer's, cluster mode).
    deadline = time.time() + 10
    events: list = []
    while len(events) < 2 and time.time() < deadline:  # Ready and ExpressionsValid
        events = [e for e in fake.list_objects("Event") if e["involvedObject"]["name"] == "broken"]
        time.sleep(0.05)
    assert events and {(e["reason"], e["type"]) for e in events} == {("InvalidSpec", "Warning")}

    # Deleting the event falls back to the default value.
    fake.delete("VirtualMetricEvent", "campaign")
    deadline = time.time() + 10
    while served(base) != ["0"] and time.time() < deadline:
        time.sleep(0.05)
    assert served(base) == ["0"]


def test_kubectl_through_token_auth(cluster) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (make test installs it with scripts/install-kubectl.sh)")
    fake, base, tmp_path = cluster
    fake.apply(vm(defaultValue=5))
    kubeconfig = tmp_path / "prescaler.kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "p",
                "clusters": [{"name": "p", "cluster": {"server": base, "insecure-skip-tls-verify": True}}],
                "users": [{"name": "p", "user": {"token": HPA_TOKEN}}],
                "contexts": [{"name": "p", "context": {"cluster": "p", "user": "p"}}],
            }
        )
    )
    deadline = time.time() + 20
    out = None
    while time.time() < deadline:
        out = subprocess.run(
            [
                kubectl,
                "--kubeconfig",
                str(kubeconfig),
                "get",
                "--raw",
                f"{V1}/namespaces/service-a/rps?labelSelector=resource%3Dservice-a",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if out.returncode == 0:
            break
        time.sleep(0.2)
    assert out is not None and out.returncode == 0, out.stderr if out else ""
    assert json.loads(out.stdout)["items"][0]["value"] == "5"
