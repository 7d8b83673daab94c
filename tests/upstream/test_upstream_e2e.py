"""Upstream passthrough end to end: the real `prescaler serve` over HTTPS with token auth for its
callers, in front of a second external-metrics server over HTTPS with its own token auth."""

from __future__ import annotations

import concurrent.futures
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.helpers import free_port
from tests.pki import TestPKI
from tests.upstream_server import TOKEN, UpstreamServer

ROOT = Path(__file__).resolve().parents[2]
V1 = "/apis/external.metrics.k8s.io/v1beta1"
CALLER = "caller-token-7"
OWN_PATH = f"{V1}/namespaces/service-a/rps?labelSelector=resource%3Dservice-a"
KEDA_PATH = f"{V1}/namespaces/service-a/keda-metric?labelSelector=scaledobject.keda.sh%2Fname%3Dworker"


class Prescaler:
    def __init__(self, tmp: Path, pki: TestPKI, upstream_url: str, timeout: float):
        now = int(time.time())
        manifests = tmp / "manifests"
        manifests.mkdir()
        docs = [
            {
                "apiVersion": "prescaler.pingpong.ai/v1",
                "kind": "VirtualMetric",
                "metadata": {"name": "rps"},
                "spec": {"defaultValue": 0},
            },
            {
                "apiVersion": "prescaler.pingpong.ai/v1",
                "kind": "VirtualMetricEvent",
                "metadata": {"name": "cal"},
                "spec": {
                    "source": {"schedule": {"items": [{"start": now - 60, "end": now + 3600, "values": {"m": 7}}]}},
                    "metrics": [
                        {
                            "name": "rps",
                            "resource": {"name": "service-a", "namespace": "service-a"},
                            "value": {"expression": "m"},
                        }
                    ],
                },
            },
        ]
        (manifests / "objects.yaml").write_text(yaml.safe_dump_all(docs))
        (tmp / "callers.csv").write_text(f'{CALLER},hpa-controller,uid-1,"system:serviceaccounts"\n')
        (tmp / "upstream-token").write_text(TOKEN)
        self.port = free_port()
        self.pki = pki
        self.log_path = tmp / "serve.log"
        self.log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "adapter.cli",
                "serve",
                "--manifests",
                str(manifests),
                "--secure-port",
                str(self.port),
                "--bind-address",
                "127.0.0.1",
                "--tls-cert-file",
                str(pki.serving_cert_file),
                "--tls-private-key-file",
                str(pki.serving_key_file),
                "--token-auth-file",
                str(tmp / "callers.csv"),
                "--upstream-external-metrics-url",
                upstream_url,
                "--upstream-ca-file",
                str(pki.serving_ca_file),
                "--upstream-token-file",
                str(tmp / "upstream-token"),
                "--upstream-timeout",
                str(timeout),
                "--upstream-max-connections",
                "2",
                "--upstream-discovery-interval",
                "1",
            ],
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.wait_for(lambda: self.get("/readyz").status_code == 200, "ready")

    def get(self, path: str, token: str | None = CALLER, timeout: float = 30) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.get(
            f"https://127.0.0.1:{self.port}{path}",
            headers=headers,
            timeout=timeout,
            verify=ssl.create_default_context(cafile=str(self.pki.serving_ca_file)),
        )

    def wait_for(self, predicate, what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if predicate():
                    return
            except (httpx.HTTPError, OSError):
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"prescaler not {what}: " + self.log_path.read_text()[-3000:])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture()
def stack(tmp_path: Path) -> Iterator[tuple[Prescaler, UpstreamServer]]:
    pki = TestPKI(tmp_path / "pki")
    upstream = UpstreamServer(pki, names=["keda-metric"], max_hang=60.0).start()
    # A generous upstream deadline: the hang test checks that own answers come while forwarded requests
    # are still pending, which must hold however slowly a loaded CI machine answers them.
    prescaler = Prescaler(tmp_path, pki, upstream.url, timeout=25.0)
    try:
        yield prescaler, upstream
    finally:
        upstream.release.set()
        prescaler.stop()
        upstream.stop()


def test_passthrough_over_https_end_to_end(stack) -> None:
    prescaler, upstream = stack
    prescaler.wait_for(
        lambda: [r["name"] for r in prescaler.get(V1).json()["resources"]] == ["keda-metric", "rps"],
        "listing the upstream's metrics",
    )
    own = prescaler.get(OWN_PATH)
    assert own.status_code == 200 and own.json()["items"][0]["value"] == "7"
    forwarded = prescaler.get(KEDA_PATH)
    assert forwarded.status_code == 200 and forwarded.json()["items"][0]["value"] == "42"
    [seen] = upstream.requests_for("keda-metric")
    assert seen.path == KEDA_PATH and seen.headers["authorization"] == f"Bearer {TOKEN}"
    assert CALLER not in str(seen.headers)

    # prescaler authorizes the caller itself: no valid caller token, nothing reaches the upstream.
    assert prescaler.get(KEDA_PATH, token=None).status_code in (401, 403)
    assert prescaler.get(KEDA_PATH, token="wrong").status_code == 401
    assert len(upstream.requests_for("keda-metric")) == 1

    metrics = prescaler.get("/metrics").text
    assert 'prescaler_upstream_requests_total{code="200",kind="value"} 1.0' in metrics
    assert 'prescaler_upstream_requests_total{code="200",kind="discovery"}' in metrics


def test_hanging_upstream_never_slows_own_metrics(stack) -> None:
    prescaler, upstream = stack
    upstream.mode = "hang"
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        hanging = [pool.submit(prescaler.get, KEDA_PATH) for _ in range(4)]
        deadline = time.monotonic() + 20
        while upstream.in_flight < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert upstream.in_flight >= 2
        for _ in range(5):
            assert prescaler.get(OWN_PATH).json()["items"][0]["value"] == "7"
            assert "rps" in [r["name"] for r in prescaler.get(V1).json()["resources"]]
        assert prescaler.get("/readyz").status_code == 200
        assert not any(f.done() for f in hanging)  # the own answers came while the upstream hung
        codes = [f.result(timeout=60).status_code for f in hanging]
    assert codes == [504] * 4
    upstream.release.set()


def test_upstream_down_gets_503_while_discovery_serves_its_cached_names(stack) -> None:
    prescaler, upstream = stack
    prescaler.wait_for(
        lambda: [r["name"] for r in prescaler.get(V1).json()["resources"]] == ["keda-metric", "rps"],
        "listing the upstream's metrics",
    )
    upstream.stop()
    # Down: 503 for forwarded metrics, discovery still lists the cached upstream names.
    assert prescaler.get(KEDA_PATH).status_code == 503
    assert [r["name"] for r in prescaler.get(V1).json()["resources"]] == ["keda-metric", "rps"]
    assert prescaler.get(OWN_PATH).status_code == 200
