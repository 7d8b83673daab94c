"""Latency that the upstream passthrough adds, side by side with calling the upstream directly.

    .venv/bin/python bench/upstream.py [--requests 2000] [--warmup 200]

Loopback only, bounded (a few thousand sequential requests, ~1 minute at most). Starts the test
upstream (tests/upstream_server.py: a threaded Python external-metrics server over TLS with token auth)
and the real `prescaler serve --upstream-external-metrics-url ...` over TLS with caller token auth, then
sends the same value request alternately (one keep-alive HTTPS client each):

  direct   client -> upstream
  through  client -> prescaler (authn, authz, forward over its pooled TLS connection) -> upstream

and prints p50/p99 of each and the difference, plus prescaler's own metric for reference.
"""

from __future__ import annotations

import argparse
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers import free_port  # noqa: E402
from tests.pki import TestPKI  # noqa: E402
from tests.upstream_server import TOKEN, UpstreamServer  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from serve import serve_command  # noqa: E402  (bench/ is not a package)

V1 = "/apis/external.metrics.k8s.io/v1beta1"
UPSTREAM_PATH = f"{V1}/namespaces/service-a/keda-metric?labelSelector=scaledobject.keda.sh%2Fname%3Dworker"
OWN_PATH = f"{V1}/namespaces/service-a/rps?labelSelector=resource%3Dservice-a"
CALLER = "bench-caller"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def start_prescaler(tmp: Path, pki: TestPKI, upstream_url: str) -> tuple[subprocess.Popen[bytes], int]:
    now = int(time.time())
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
                "source": {"schedule": {"items": [{"start": now - 60, "end": now + 7200, "values": {"m": 7}}]}},
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
    (tmp / "objects.yaml").write_text(yaml.safe_dump_all(docs))
    (tmp / "callers.csv").write_text(f"{CALLER},bench,uid-1\n")
    (tmp / "upstream-token").write_text(TOKEN)
    port = free_port()
    proc = subprocess.Popen(
        serve_command(
            tmp / "objects.yaml",
            port,
            "--v",
            "0",
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
        ),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=(tmp / "serve.log").open("w"),
    )
    return proc, port


def serve_upstream(pki_dir: str) -> int:
    """Child process: the upstream in its own interpreter, so it does not share a GIL with the client."""
    upstream = UpstreamServer(TestPKI.__new__(TestPKI), names=["keda-metric"], pki_dir=Path(pki_dir)).start()
    print(upstream.port, flush=True)
    sys.stdin.read()  # until the parent closes the pipe
    upstream.stop()
    return 0


def start_upstream(pki: TestPKI) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve-upstream", str(pki.dir)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    return proc, f"https://127.0.0.1:{port}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--serve-upstream", metavar="PKI_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_upstream:
        return serve_upstream(args.serve_upstream)
    with tempfile.TemporaryDirectory(prefix="bench-upstream-") as tmpdir:
        tmp = Path(tmpdir)
        pki = TestPKI(tmp / "pki")
        upstream_proc, upstream_url = start_upstream(pki)
        proc, port = start_prescaler(tmp, pki, upstream_url)
        verify = ssl.create_default_context(cafile=str(pki.serving_ca_file))
        direct = httpx.Client(
            base_url=upstream_url, verify=verify, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
        )
        through = httpx.Client(
            base_url=f"https://127.0.0.1:{port}",
            verify=verify,
            headers={"Authorization": f"Bearer {CALLER}"},
            timeout=10,
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if through.get("/readyz").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline or proc.poll() is not None:
                    print("prescaler did not start:\n" + (tmp / "serve.log").read_text()[-2000:], file=sys.stderr)
                    return 1
                time.sleep(0.2)
            samples: dict[str, list[float]] = {"direct": [], "through": [], "own": []}
            requests = {
                "direct": (direct, UPSTREAM_PATH),
                "through": (through, UPSTREAM_PATH),
                "own": (through, OWN_PATH),
            }
            for i in range(args.warmup + args.requests):
                for name, (client, path) in requests.items():  # alternate: same conditions for each
                    started = time.perf_counter()
                    response = client.get(path)
                    elapsed = time.perf_counter() - started
                    if response.status_code != 200:
                        print(f"{name}: HTTP {response.status_code} {response.text[:200]}", file=sys.stderr)
                        return 1
                    if i >= args.warmup:
                        samples[name].append(elapsed * 1000)
            print(
                f"upstream passthrough latency, {args.requests} sequential keep-alive HTTPS requests each "
                "(loopback; ms)"
            )
            print(f"{'path':<40} {'p50':>8} {'p99':>8} {'mean':>8}")
            labels = {
                "direct": "direct to upstream",
                "through": "through prescaler to upstream",
                "own": "prescaler's own metric (reference)",
            }
            for name, values in samples.items():
                print(
                    f"{labels[name]:<40} {percentile(values, 0.5):8.2f} {percentile(values, 0.99):8.2f} "
                    f"{statistics.fmean(values):8.2f}"
                )
            d, t = samples["direct"], samples["through"]
            print(
                f"{'added by passthrough':<40} {percentile(t, 0.5) - percentile(d, 0.5):8.2f} "
                f"{percentile(t, 0.99) - percentile(d, 0.99):8.2f} {statistics.fmean(t) - statistics.fmean(d):8.2f}"
            )
        finally:
            direct.close()
            through.close()
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
            upstream_proc.communicate("", timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
