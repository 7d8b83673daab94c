"""Installing beside another external-metrics adapter, against the real aggregator and HPA controller.

A second external-metrics server (tests/upstream_server.py: real TLS, its own CA, accepts the
aggregator's front-proxy certificate or prescaler's bearer token) plays KEDA's metrics server. It holds
the APIService first and a real HPA scales on its metric; then the APIService is re-pointed at a
prescaler started with `--upstream-external-metrics-url`, and the same HPA keeps reading the
upstream's value - now through prescaler, which calls the upstream with its own token and never
forwards the caller's identity. Discovery lists both sides' metrics; an upstream that hangs or is down
gives a 504/503 `Status` for its metric only, while prescaler's own metric keeps answering.

The upstream is reached like prescaler is (see conftest.py): an ExternalName Service to 127.0.0.1 and
the APIService port set to the local process's port; its certificate names
keda-metrics-apiserver.keda.svc (what the aggregator verifies) and 127.0.0.1 (what prescaler dials).
"""

from __future__ import annotations

import base64
import concurrent.futures
import json
import logging
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from adapter.serving.certs import make_ca, make_serving_cert
from tests.announcer_server import Announcer
from tests.e2e.controlplane import ControlPlane
from tests.e2e.support import APISERVICE, NAMESPACE, V1, PrescalerProcess, raw, served, wait_for
from tests.upstream_server import TOKEN, UpstreamServer

log = logging.getLogger("e2e.upstream")

UP_NAMESPACE, UP_SERVICE = "keda", "keda-metrics-apiserver"
METRIC = "keda-queue-length"  # defined only by the upstream
APP_NS, APP = "queue-app", "worker"
SELECTOR = f"scaledobject.keda.sh/name={APP}"
HPA_SA = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
UPSTREAM_TIMEOUT = 3.0


@pytest.fixture()
def upstream(plane: ControlPlane) -> Iterator[UpstreamServer]:
    pki = plane.workdir / "upstream-pki"
    pki.mkdir(exist_ok=True)
    ca, ca_key = make_ca("e2e-upstream-ca")
    cert, key = make_serving_cert(ca, ca_key, [f"{UP_SERVICE}.{UP_NAMESPACE}.svc", "127.0.0.1"])
    (pki / "ca.crt").write_bytes(ca)
    (pki / "tls.crt").write_bytes(cert)
    (pki / "tls.key").write_bytes(key)
    (pki / "token").write_text(TOKEN)
    # `rps` too: a name both sides define, which prescaler must keep serving itself.
    server = UpstreamServer(
        None, names=[METRIC, "rps"], pki_dir=pki, front_proxy_ca_file=plane.pki.path("front-proxy-ca.crt")
    ).start()
    server.pki = pki  # type: ignore[attr-defined]
    yield server
    server.stop()


def apiservice_to(plane: ControlPlane, namespace: str, name: str, port: int, ca_pem: bytes) -> None:
    doc = plane.get_json("apiservice", APISERVICE)
    spec = doc["spec"]
    spec["service"] = {"namespace": namespace, "name": name, "port": port}
    spec["caBundle"] = base64.b64encode(ca_pem).decode()
    plane.apply(
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": APISERVICE},
            "spec": spec,
        }
    )


def hpa_state(plane: ControlPlane) -> tuple[str | None, str | None]:
    """(ScalingActive status, the External metric's current value) of the test HPA."""
    status = plane.get_json("hpa", APP, "-n", APP_NS).get("status", {})
    active = next((c["status"] for c in status.get("conditions", []) if c["type"] == "ScalingActive"), None)
    current = next(
        (
            m["external"]["current"].get("value")
            for m in status.get("currentMetrics") or []
            if m.get("type") == "External"
        ),
        None,
    )
    return active, current


def shadows(plane: ControlPlane) -> str | None:
    """Status of the seed VirtualMetric rps's ShadowsUpstream condition (None: not there)."""
    conditions = plane.get_json("virtualmetric", "rps").get("status", {}).get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == "ShadowsUpstream"), None)


def metric_path(metric: str = METRIC) -> str:
    return f"{V1}/namespaces/{APP_NS}/{metric}?labelSelector={quote(SELECTOR)}"


def admin_http(plane: ControlPlane) -> httpx.Client:
    """Straight to kube-apiserver as the admin, to see the aggregator's status code and Status body."""
    verify = ssl.create_default_context(cafile=plane.pki.path("ca.crt"))
    verify.load_cert_chain(plane.pki.path("admin.crt"), plane.pki.path("admin.key"))
    return httpx.Client(base_url=plane.server, verify=verify, timeout=30)


def timed_get(http: httpx.Client, path: str) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = http.get(path)
    return response, time.monotonic() - started


@pytest.mark.timeout(600)
def test_hpa_on_an_upstream_metric_keeps_working_after_prescaler_takes_over(
    plane: ControlPlane,
    certs: Path,
    installed: int,
    prescaler: PrescalerProcess,
    seed: dict[str, str],
    seed_announcer: Announcer,
    upstream: UpstreamServer,
) -> None:
    pki: Path = upstream.pki  # type: ignore[attr-defined]
    taken_over: PrescalerProcess | None = None
    lines: list[str] = []
    t0 = time.monotonic()

    def note(what: str) -> None:
        lines.append(f"{time.monotonic() - t0:6.1f}s  {what}")
        log.info("%s", what)

    try:
        # 1. Before prescaler: the upstream is THE external metrics server, and an HPA scales on it.
        plane.apply(
            [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": UP_NAMESPACE}},
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": UP_SERVICE, "namespace": UP_NAMESPACE},
                    "spec": {"type": "ExternalName", "externalName": "127.0.0.1"},
                },
            ]
        )
        apiservice_to(plane, UP_NAMESPACE, UP_SERVICE, upstream.port, (pki / "ca.crt").read_bytes())
        wait_for(
            lambda: (
                upstream.requests_for(f"{V1}")
                and raw(plane, V1).returncode == 0
                and METRIC in raw(plane, V1).stdout
                and '"rps"' in raw(plane, V1).stdout
            ),
            60,
            "the aggregator to serve the upstream's discovery",
        )
        labels = {"app": APP}
        plane.apply(
            [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": APP_NS}},
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": APP, "namespace": APP_NS},
                    "spec": {
                        "replicas": 1,
                        "selector": {"matchLabels": labels},
                        "template": {
                            "metadata": {"labels": labels},
                            "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]},
                        },
                    },
                },
                {
                    "apiVersion": "autoscaling/v2",
                    "kind": "HorizontalPodAutoscaler",
                    "metadata": {"name": APP, "namespace": APP_NS},
                    "spec": {
                        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": APP},
                        "minReplicas": 1,
                        "maxReplicas": 5,
                        "metrics": [
                            {
                                "type": "External",
                                "external": {
                                    "metric": {
                                        "name": METRIC,
                                        "selector": {"matchLabels": {"scaledobject.keda.sh/name": APP}},
                                    },
                                    "target": {"type": "Value", "value": "1000"},
                                },
                            }
                        ],
                    },
                },
            ]
        )
        wait_for(lambda: hpa_state(plane) == ("True", "42"), 90, "the HPA to read 42 from the upstream directly")
        direct = [s for s in upstream.requests_for(f"/{METRIC}?") if s.headers.get("x-remote-user") == HPA_SA]
        assert direct, "the HPA controller's requests reach the upstream through the aggregator"
        assert all("authorization" not in s.headers for s in direct)
        direct_paths = {s.path for s in direct}
        note("upstream holds the APIService; HPA reads 42 (ScalingActive=True)")

        # 2. prescaler takes over the APIService, with the upstream configured behind it.
        token = plane.service_account_token(NAMESPACE, "prescaler")
        taken_over = PrescalerProcess(
            plane,
            certs,
            "prescaler-upstream",
            token,
            extra_args=[
                "--upstream-external-metrics-url",
                upstream.url,
                "--upstream-ca-file",
                str(pki / "ca.crt"),
                "--upstream-token-file",
                str(pki / "token"),
                "--upstream-timeout",
                str(UPSTREAM_TIMEOUT),
                "--upstream-discovery-interval",
                "2",
            ],
        ).start()
        apiservice_to(plane, NAMESPACE, "prescaler", taken_over.port, (certs / "ca.crt").read_bytes())
        switched = len(upstream.seen)

        def via_prescaler() -> bool:
            return any(
                s.headers.get("authorization") == f"Bearer {TOKEN}"
                for s in upstream.seen[switched:]
                if f"/{METRIC}?" in s.path
            )

        wait_for(via_prescaler, 60, "the HPA's requests to reach the upstream through prescaler")
        upstream.value = "57"  # the HPA must follow the upstream, now through prescaler
        since = len(upstream.seen)
        wait_for(lambda: hpa_state(plane) == ("True", "57"), 60, "the HPA to read 57 through prescaler")
        note("APIService re-pointed at prescaler; HPA reads the upstream's new value 57 through it")
        forwarded = [s for s in upstream.seen[since:] if f"/{METRIC}?" in s.path]
        assert forwarded
        for seen in forwarded:  # prescaler's own identity; the caller's never reaches the upstream
            assert seen.headers.get("authorization") == f"Bearer {TOKEN}", seen
            assert not any(h.startswith("x-remote-") for h in seen.headers), seen
            assert seen.path in direct_paths, seen  # the same path and query as the aggregator's own
        assert plane.get_json("deployment", APP, "-n", APP_NS)["spec"]["replicas"] == 1

        # kubectl through the aggregator: the upstream's metric, prescaler's own, and merged discovery.
        through = json.loads(plane.kubectl("get", "--raw", metric_path()).stdout)
        assert [i["value"] for i in through["items"]] == ["57"], through
        assert served(plane, "service-a", "service-a") == ["100"]  # prescaler's rps wins over the upstream's
        discovery = json.loads(plane.kubectl("get", "--raw", V1).stdout)
        names = [r["name"] for r in discovery["resources"]]
        assert METRIC in names and names.count("rps") == 1, names
        note(f"discovery through the aggregator: {sorted(names)}")

        # The VirtualMetric `rps` hides the upstream's metric of the same name, and its status says so.
        # Only a replica configured with the upstream knows: stop the session's prescaler (it has no
        # upstream and holds the status Lease) so this one takes the Lease and writes status.
        prescaler.stop()
        try:
            wait_for(lambda: shadows(plane) == "True", 90, "VirtualMetric rps to show ShadowsUpstream=True")
        finally:
            prescaler.start()
        note("VirtualMetric rps: ShadowsUpstream=True (written by the replica that has the upstream)")

        # 3. The upstream misbehaves: its metric fails with a Status in bounded time, ours does not.
        with admin_http(plane) as http:
            # The upstream's own errors come back unchanged (code and Status) through the aggregator.
            unknown = http.get(metric_path("no-such-metric"))
            assert unknown.status_code == 404, unknown.text
            assert unknown.json()["message"] == "upstream: no metric no-such-metric", unknown.text
            upstream.mode = "error500"
            failing = http.get(metric_path())
            assert failing.status_code == 500, failing.text
            assert failing.json()["message"] == "upstream exploded on purpose", failing.text
            note("upstream's 404 and 500 Status passed through unchanged")
            upstream.release.clear()
            upstream.mode = "hang"
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                pending = pool.submit(timed_get, http, metric_path())
                wait_for(lambda: upstream.in_flight > 0, 10, "the forwarded request to hang at the upstream")
                # While it hangs, prescaler's own metric answers at once through the same aggregator.
                own, own_took = timed_get(http, f"{V1}/namespaces/service-a/rps?labelSelector=resource%3Dservice-a")
                assert upstream.in_flight > 0
                slow, slow_took = pending.result(30)
            upstream.release.set()
            note(
                f"upstream hanging: its metric {slow.status_code} in {slow_took:.2f}s; own rps "
                f"{own.status_code} in {own_took:.2f}s"
            )
            assert slow.status_code == 504, slow.text
            assert slow.json()["kind"] == "Status" and slow.json()["code"] == 504, slow.text
            assert slow_took < UPSTREAM_TIMEOUT + 5, slow_took
            assert own.status_code == 200 and [i["value"] for i in own.json()["items"]] == ["100"], own.text
            assert own_took < UPSTREAM_TIMEOUT - 1, own_took  # not held up by the hanging upstream

            upstream.stop()  # down: nothing listens any more
            down, down_took = timed_get(http, metric_path())
            own, own_took = timed_get(http, f"{V1}/namespaces/service-a/rps?labelSelector=resource%3Dservice-a")
            note(
                f"upstream down: its metric {down.status_code} in {down_took:.2f}s; own rps "
                f"{own.status_code} in {own_took:.2f}s"
            )
            assert down.status_code == 503, down.text
            assert down.json()["kind"] == "Status" and down.json()["code"] == 503, down.text
            assert down_took < UPSTREAM_TIMEOUT + 5, down_took
            assert own.status_code == 200 and [i["value"] for i in own.json()["items"]] == ["100"], own.text
            cached = [r["name"] for r in http.get(V1).json()["resources"]]
            assert METRIC in cached, cached  # discovery is served from cache while the upstream is down
        # The HPA sees its metric fail and, like for any failing metric, keeps its replicas.
        wait_for(lambda: hpa_state(plane)[0] == "False", 30, "the HPA to see the upstream metric fail")
        assert plane.get_json("deployment", APP, "-n", APP_NS)["spec"]["replicas"] == 1
        note("HPA: ScalingActive=False (FailedGetExternalMetric), replicas kept")
    finally:
        for line in lines:
            log.info("timeline: %s", line)
        (plane.logs / "upstream-timeline.txt").write_text("\n".join(lines) + "\n")
        # Give the APIService back to the session's prescaler, as the install fixture left it.
        apiservice_to(plane, NAMESPACE, "prescaler", installed, (certs / "ca.crt").read_bytes())
        if taken_over is not None:
            taken_over.stop()
        plane.kubectl("delete", "namespace", APP_NS, UP_NAMESPACE, "--wait=false", check=False)
        wait_for(
            lambda: served(plane, "service-a", "service-a") == ["100"],
            60,
            "the session's prescaler to serve through the aggregator again",
        )
