"""Fast start in cluster mode: 100 000 targets from the initial list of a real control plane.

    .venv/bin/python bench/cluster_start.py [--targets 100000] [--runs 2]

Starts the real control plane `make e2e` builds (etcd, kube-apiserver with its aggregator,
kube-controller-manager; built once and cached), installs prescaler as the end-to-end tests do (CRDs,
RBAC, the APIService with the caBundle `prescaler certs` writes), applies the VirtualMetric and the
VirtualMetricEvents of bench/scale.py (100 events of 1 000 targets, one `api` source each, a local
items server), then starts `prescaler serve` in cluster mode (a local process with a ServiceAccount
token) and prints how long after the process started its first value and the last target's value
were served: by prescaler itself (its port, with the admin's client certificate) and through the
aggregator (the HPA controller's path), each polled every 50 ms by one keep-alive HTTPS client, then
checked once with `kubectl get --raw`. The aggregator's figure also holds how long kube-aggregator
takes to find a restarted server available again (seconds at times), which is not prescaler's. Goal: <= 5 s,
as from manifests (bench/scale.py).
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from scale import PER_EVENT, set_mode, start_items_server, stop, write_manifests  # noqa: E402

from tests.e2e.controlplane import ControlPlane, build_binaries  # noqa: E402
from tests.e2e.support import (  # noqa: E402
    NAMESPACE,
    V1,
    PrescalerProcess,
    apiservice_available,
    install,
    wait_for,
    write_certs,
)


def aggregator_client(plane: ControlPlane) -> httpx.Client:
    """One keep-alive HTTPS client with the admin's certificate, for polling. A kubectl process every
    50 ms (about 20 starts of a Go binary a second) took roughly half a core of this 2-core machine
    from the server being measured; the request path through the aggregator is the same."""
    verify = ssl.create_default_context(cafile=str(plane.pki.path("ca.crt")))
    verify.load_cert_chain(str(plane.pki.path("admin.crt")), str(plane.pki.path("admin.key")))
    return httpx.Client(base_url=plane.server, verify=verify, timeout=10)


def direct_client(plane: ControlPlane, server: PrescalerProcess) -> httpx.Client:
    """prescaler's own port, with the admin's client certificate (prescaler trusts the cluster's client
    CA, as the API server does): when prescaler serves, apart from when the aggregator proxies to it."""
    verify = server.ssl
    verify.load_cert_chain(str(plane.pki.path("admin.crt")), str(plane.pki.path("admin.key")))
    return httpx.Client(base_url=f"https://127.0.0.1:{server.port}", verify=verify, timeout=10)


def served(http: httpx.Client, resource: str) -> bool:
    try:
        response = http.get(f"{V1}/namespaces/bench/rps", params={"labelSelector": f"resource={resource}"})
    except httpx.HTTPError:
        return False
    if response.status_code != 200:
        return False
    items = response.json()["items"]
    return bool(items) and items[0]["value"] not in ("0", "0m")


def served_to_kubectl(plane: ControlPlane, resource: str) -> bool:
    result = plane.kubectl(
        "get", "--raw", f"{V1}/namespaces/bench/rps?labelSelector=resource%3D{resource}", check=False, timeout=10
    )
    return result.returncode == 0 and json.loads(result.stdout)["items"][0]["value"] not in ("0", "0m")


def seconds_until(check: Callable[[], bool], since: float, what: str) -> float:
    wait_for(check, 120, what, interval=0.05)
    return time.monotonic() - since


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--targets", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=2, help="prescaler starts, one after the other")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="prescaler-cluster-start-"))
    plane = ControlPlane(build_binaries(), work).start()
    items_proc, items_port = start_items_server()
    try:
        certs = write_certs(plane)
        port = install(plane, certs)
        manifests = work / "manifests"
        manifests.mkdir()
        write_manifests(manifests, args.targets, items_port, 5.0)
        set_mode(items_port, "steady")
        started = time.monotonic()
        plane.kubectl("apply", "--server-side", "-f", str(manifests), timeout=600)
        print(
            f"{args.targets:,} targets = {args.targets // PER_EVENT} VirtualMetricEvents applied to the real "
            f"kube-apiserver in {time.monotonic() - started:.1f} s"
        )
        token = plane.service_account_token(NAMESPACE, "prescaler")
        for run in range(args.runs):
            server = PrescalerProcess(plane, certs, f"prescaler-{run}", token, port=port)
            t0 = time.monotonic()
            server.process.start()
            # Both paths polled at once, each on its own thread.
            with ThreadPoolExecutor(2) as pool, direct_client(plane, server) as own, aggregator_client(plane) as agg:
                through = pool.submit(seconds_until, lambda: served(agg, "svc-0"), t0, "the aggregator's")
                first = seconds_until(lambda: served(own, "svc-0"), t0, "the first value")
                last = seconds_until(lambda: served(own, f"svc-{args.targets - 1}"), t0, "the last target's value")
                proxied = through.result()
            assert apiservice_available(plane)
            assert served_to_kubectl(plane, f"svc-{args.targets // 2}")
            print(
                f"run {run + 1}: cluster mode, {args.targets:,} targets from the initial list: prescaler serves the "
                f"first value {first:.1f} s after the process started, the last target's {last:.1f} s (goal <= 5 s); "
                f"through the aggregator {proxied:.1f} s (it serves again once it has found the restarted "
                f"server available)"
            )
            server.stop()
            time.sleep(2)
    finally:
        stop(items_proc)
        plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
