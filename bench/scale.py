"""Scale benchmark: 100 000 targets against 10, in steady state and while the sources deliver.

    .venv/bin/python bench/scale.py [--targets 100000] [--duration 10] [--connections 32]

One run, side by side, over TLS with wrk at 32 connections (the README's performance table):
  * a bare ASGI app on the same uvicorn + TLS stack returning the same bytes (the ceiling);
  * `prescaler serve --manifests` with 10 targets, then with --targets targets: VirtualMetricEvents of
    1 000 targets each, one `api` source each, one JSON-shaped YAML file each, every target in one
    namespace. The sources poll a local items server (a separate process) every --interval seconds.
    - steady: every source delivered, the items do not change (polls find the same snapshot);
    - delivering: the items server changes every source's values on every poll, so snapshots keep
      arriving (targets/1000 new snapshots per interval) while wrk runs;
  * first value: seconds from process start to the first served non-default value, and until the
    last target serves its value.
Ratios are time per request relative to the 10-target server in the same phase (goal <= 1.2) and
to the bare app; p99 goal <= 10 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve import free_port, stop, wrk  # noqa: E402  (bench/ is not a package)

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "bench"
PER_EVENT = 1000


def value_path(resource: str) -> str:
    return f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{NAMESPACE}/rps?labelSelector=resource%3D{resource}"


# ---------------------------------------------------------------- the items server (own process)


def run_items_server(port: int) -> None:
    """GET /items/<k>: one item {n: base}; after POST /mode/changing, n changes on every request."""
    state = {"changing": False, "counter": 0, "inflight": 0, "max_inflight": 0}
    log: list[float] = []
    lock = threading.Lock()
    now = int(time.time())

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _send(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:  # noqa: N802
            with lock:
                state["changing"] = self.path.endswith("/changing")
            self._send(b"{}")

        def do_GET(self) -> None:  # noqa: N802
            if self.path.startswith("/stats"):
                with lock:
                    self._send(json.dumps({"requests": log, "max_inflight": state["max_inflight"]}).encode())
                return
            with lock:
                state["inflight"] += 1
                state["max_inflight"] = max(state["max_inflight"], state["inflight"])
                log.append(time.time())
                state["counter"] += 1
                n = 10 + (state["counter"] % 7 if state["changing"] else 0)
            body = json.dumps({"items": [{"start": now - 60, "end": now + 86400, "values": {"n": n}}]}).encode()
            self._send(body)
            with lock:
                state["inflight"] -= 1

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def start_items_server() -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--items-server", str(port)])
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/stats", timeout=1)
            return proc, port
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("items server did not start")


def set_mode(items_port: int, mode: str) -> None:
    httpx.post(f"http://127.0.0.1:{items_port}/mode/{mode}", timeout=5)


# ---------------------------------------------------------------- manifests


def write_manifests(directory: Path, targets: int, items_port: int, interval: float) -> None:
    """One JSON-shaped YAML file per object: the VirtualMetric, then one VME per 1 000 targets."""
    docs: list[dict] = [{"apiVersion": "prescaler.pingpong.ai/v1", "kind": "VirtualMetric",
                         "metadata": {"name": "rps"},
                         "spec": {"name": "rps", "defaultValue": 0, "mergeStrategy": "Sum", "leadTime": "5m"}}]
    for start in range(0, targets, PER_EVENT):
        event = start // PER_EVENT
        entries = [{"name": "rps", "resource": {"name": f"svc-{i}", "namespace": NAMESPACE},
                    "value": {"expression": f"n * {1 + i % 7}"}} for i in range(start, min(targets, start + PER_EVENT))]
        docs.append({"apiVersion": "prescaler.pingpong.ai/v1", "kind": "VirtualMetricEvent",
                     "metadata": {"name": f"ev-{event}"},
                     "spec": {"source": {"api": {"url": f"http://127.0.0.1:{items_port}/items/{event}"},
                                         "interval": f"{interval:g}s"},
                              "metrics": entries}})
    for index, doc in enumerate(docs):
        (directory / f"{index:05d}.yaml").write_text(json.dumps(doc))


# ---------------------------------------------------------------- running prescaler


def served_value(port: int, resource: str) -> float | None:
    try:
        r = httpx.get(f"https://127.0.0.1:{port}{value_path(resource)}", verify=False, timeout=2)
        if r.status_code == 200:
            text = r.json()["items"][0]["value"]
            return float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    except (httpx.HTTPError, KeyError, IndexError, ValueError):
        pass
    return None


def start_prescaler(manifests: Path, log_file: Path, targets: int, timeout: float = 300) -> tuple[subprocess.Popen, int, float, float]:
    """Start the server; returns (process, port, seconds to first value, seconds until the last target's value)."""
    port = free_port()
    started = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "adapter.cli", "serve", "--manifests", str(manifests),
                             "--secure-port", str(port), "--bind-address", "127.0.0.1", "--v", "0"],
                            cwd=ROOT, stdout=log_file.open("w"), stderr=subprocess.STDOUT)
    first = last = None
    deadline = started + timeout
    while time.time() < deadline and last is None:
        if proc.poll() is not None:
            raise SystemExit(f"prescaler exited: {log_file.read_text()[-2000:]}")
        if first is None:
            value = served_value(port, "svc-0")
            if value:
                first = time.time() - started
        if first is not None:
            value = served_value(port, f"svc-{targets - 1}")
            if value:
                last = time.time() - started
        time.sleep(0.05)
    if first is None or last is None:
        stop(proc)
        raise SystemExit(f"prescaler did not serve values within {timeout}s: {log_file.read_text()[-2000:]}")
    return proc, port, first, last


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(port: int, items_port: int, args: argparse.Namespace, pid: int) -> dict[str, dict[str, float]]:
    url = f"https://127.0.0.1:{port}{value_path('svc-0')}"
    set_mode(items_port, "steady")
    wrk(url, 2, args.connections)  # warm-up
    out = {"steady": wrk(url, args.duration, args.connections)}
    set_mode(items_port, "changing")
    time.sleep(min(args.interval, 5.0))  # every source has delivered a changed snapshot at least once
    cpu0 = cpu_seconds(pid)
    out["delivering"] = wrk(url, args.duration, args.connections)
    out["delivering"]["cpu"] = cpu_seconds(pid) - cpu0
    set_mode(items_port, "steady")
    return out


def run_bare(body: bytes, work: Path, args: argparse.Namespace) -> dict[str, float]:
    body_file = work / "body.json"
    body_file.write_bytes(body)
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "serve.py"), "--bare", str(port), str(body_file)],
                            cwd=ROOT, stdout=(work / "bare.log").open("w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                httpx.get(f"https://127.0.0.1:{port}/", verify=False, timeout=2)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        url = f"https://127.0.0.1:{port}{value_path('svc-0')}"
        wrk(url, 2, args.connections)
        return wrk(url, args.duration, args.connections)
    finally:
        stop(proc)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--targets", type=int, default=100_000)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--interval", type=float, default=5.0, help="source poll interval in the bench")
    parser.add_argument("--items-server", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.items_server:
        run_items_server(args.items_server)
        return
    work = Path(tempfile.mkdtemp(prefix="prescaler-scale-"))
    items_proc, items_port = start_items_server()
    rows: dict[str, dict[str, float]] = {}
    starts: dict[int, tuple[float, float]] = {}
    body = b""
    try:
        for targets in (10, args.targets):
            manifests = work / f"m{targets}"
            manifests.mkdir()
            write_manifests(manifests, targets, items_port, args.interval)
            proc, port, first, last = start_prescaler(manifests, work / f"serve{targets}.log", targets)
            starts[targets] = (first, last)
            try:
                body = httpx.get(f"https://127.0.0.1:{port}{value_path('svc-0')}", verify=False).content
                for phase, result in measure(port, items_port, args, proc.pid).items():
                    rows[f"{targets}/{phase}"] = result
            finally:
                stop(proc)
        rows["bare"] = run_bare(body, work, args)
    finally:
        stop(items_proc)

    bare = rows["bare"]
    print(f"wrk -t1 -c{args.connections} -d{args.duration}s over TLS, GET {value_path('svc-0')}")
    print(f"{args.targets:,} targets = {args.targets // PER_EVENT} VirtualMetricEvents x {PER_EVENT} targets, "
          f"one api source each polled every {args.interval:g}s, one namespace")
    print(f"{'server':<44} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'x bare':>7} {'x 10':>6}")
    print(f"{'bare ASGI (same uvicorn + TLS, same bytes)':<44} {bare['rps']:>8.0f} {bare['p50']:>7.2f} "
          f"{bare['p99']:>7.2f} {1.0:>7.2f} {'':>6}")
    for targets in (10, args.targets):
        for phase in ("steady", "delivering"):
            r = rows[f"{targets}/{phase}"]
            small = rows[f"10/{phase}"]
            print(f"{f'prescaler, {targets:,} targets, {phase}':<44} {r['rps']:>8.0f} {r['p50']:>7.2f} "
                  f"{r['p99']:>7.2f} {bare['rps'] / r['rps']:>7.2f} {small['rps'] / r['rps']:>6.2f}"
                  + (f"  non-2xx {r['non2xx']:.0f}" if r["non2xx"] else ""))
    for targets, (first, last) in starts.items():
        print(f"start with {targets:,} targets: first value {first:.1f} s, last target's value {last:.1f} s")
    large = args.targets
    print(f"goals: cost {large:,} vs 10 targets <= 1.2x: steady "
          f"{rows['10/steady']['rps'] / rows[f'{large}/steady']['rps']:.2f}x, delivering "
          f"{rows['10/delivering']['rps'] / rows[f'{large}/delivering']['rps']:.2f}x; p99 <= 10 ms: "
          f"{max(rows[f'{t}/{p}']['p99'] for t in (10, large) for p in ('steady', 'delivering')):.2f} ms worst; "
          f"first value <= 5 s: {starts[large][0]:.1f} s")


if __name__ == "__main__":
    main()
