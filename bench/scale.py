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
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve import free_port, serve_command, stop, wrk  # noqa: E402  (bench/ is not a package)

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "bench"
PER_EVENT = 1000


def value_path(resource: str) -> str:
    return f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{NAMESPACE}/rps?labelSelector=resource%3D{resource}"


# ---------------------------------------------------------------- the items server (own process)


def run_items_server(port: int, change_every: int = 1) -> None:
    """GET /items/<k>: one item {n: 10}; after POST /mode/changing, n changes on every
    `change_every`-th request for the same k (so each source delivers a new snapshot that often)."""
    state = {"changing": False, "counter": 0, "inflight": 0, "max_inflight": 0}
    per_path: dict[str, int] = {}
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
                seen = per_path[self.path] = per_path.get(self.path, 0) + 1
                # Offset by the source's number: the sources change on different polls, not all at once.
                offset = int(self.path.rsplit("/", 1)[-1]) if self.path.rsplit("/", 1)[-1].isdigit() else 0
                n = 10 + (((seen + offset) // change_every) % 7 if state["changing"] else 0)
            body = json.dumps({"items": [{"start": now - 60, "end": now + 86400, "values": {"n": n}}]}).encode()
            self._send(body)
            with lock:
                state["inflight"] -= 1

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        # socketserver's default listen backlog is 5: 100 sources connecting at once overflowed it,
        # and a dropped SYN is retried only after 1 s, then 3 s (a first value 3 s late, fetches
        # timing out now and then).
        request_queue_size = 1024

        def handle_error(self, request: object, client_address: object) -> None:
            pass  # clients that hang up (a stopped prescaler) are not news

    Server(("127.0.0.1", port), Handler).serve_forever()


def start_items_server(change_every: int = 1) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--items-server",
            str(port),
            "--change-every",
            str(change_every),
        ]
    )
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
    docs: list[dict] = [
        {
            "apiVersion": "prescaler.pingpong.ai/v1",
            "kind": "VirtualMetric",
            "metadata": {"name": "rps"},
            "spec": {"name": "rps", "defaultValue": 0, "mergeStrategy": "Sum", "leadTime": "5m"},
        }
    ]
    for start in range(0, targets, PER_EVENT):
        event = start // PER_EVENT
        entries = [
            {
                "name": "rps",
                "resource": {"name": f"svc-{i}", "namespace": NAMESPACE},
                "value": {"expression": f"n * {1 + i % 7}"},
            }
            for i in range(start, min(targets, start + PER_EVENT))
        ]
        docs.append(
            {
                "apiVersion": "prescaler.pingpong.ai/v1",
                "kind": "VirtualMetricEvent",
                "metadata": {"name": f"ev-{event}"},
                "spec": {
                    "source": {
                        "api": {"url": f"http://127.0.0.1:{items_port}/items/{event}"},
                        "interval": f"{interval:g}s",
                    },
                    "metrics": entries,
                },
            }
        )
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


def start_prescaler(
    manifests: Path, log_file: Path, targets: int, timeout: float = 300
) -> tuple[subprocess.Popen, int, float, float]:
    """Start the server; returns (process, port, seconds to first value, seconds until the last target's value)."""
    port = free_port()
    started = time.time()
    proc = subprocess.Popen(
        serve_command(manifests, port, "--v", "0"),
        cwd=ROOT,
        stdout=log_file.open("w"),
        stderr=subprocess.STDOUT,
    )
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


def start_bare(body: bytes, work: Path) -> tuple[subprocess.Popen, int]:
    body_file = work / "body.json"
    body_file.write_bytes(body)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "serve.py"), "--bare", str(port), str(body_file)],
        cwd=ROOT,
        stdout=(work / "bare.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            httpx.get(f"https://127.0.0.1:{port}/", verify=False, timeout=2)
            return proc, port
        except httpx.HTTPError:
            time.sleep(0.2)
    stop(proc)
    raise SystemExit("the bare app did not start")


def steal_jiffies() -> tuple[int, int]:
    """(stolen, total) CPU jiffies of the machine so far: time the hypervisor gave to someone else."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return fields[7] if len(fields) > 7 else 0, sum(fields)


def load(port: int, args: argparse.Namespace, pid: int) -> dict[str, float]:
    """wrk's figures, plus the server's CPU time per request (user + system, all its threads: what a
    request costs it, whatever else the machine did meanwhile) and the share of the machine's time
    stolen by the hypervisor during the run."""
    url = f"https://127.0.0.1:{port}{value_path('svc-0')}"
    wrk(url, 1, args.connections)  # warm-up: TLS sessions, caches
    cpu0, (stolen0, total0) = cpu_seconds(pid), steal_jiffies()
    result = wrk(url, args.duration, args.connections)
    stolen1, total1 = steal_jiffies()
    result["cpu_us"] = (cpu_seconds(pid) - cpu0) / max(1.0, result["rps"] * args.duration) * 1e6
    result["steal"] = (stolen1 - stolen0) / max(1, total1 - total0)
    return result


def median(values: list[float]) -> float:
    return statistics.median(values)


def write_polling_manifests(directory: Path, sources: int, items_port: int, interval: float) -> None:
    """`sources` VirtualMetricEvents, one api source and one target each (the polling load alone)."""
    docs: list[dict] = [
        {
            "apiVersion": "prescaler.pingpong.ai/v1",
            "kind": "VirtualMetric",
            "metadata": {"name": "rps"},
            "spec": {"name": "rps", "defaultValue": 0},
        }
    ]
    docs += [
        {
            "apiVersion": "prescaler.pingpong.ai/v1",
            "kind": "VirtualMetricEvent",
            "metadata": {"name": f"poll-{k}"},
            "spec": {
                "source": {"api": {"url": f"http://127.0.0.1:{items_port}/items/{k}"}, "interval": f"{interval:g}s"},
                "metrics": [
                    {
                        "name": "rps",
                        "resource": {"name": f"svc-{k}", "namespace": NAMESPACE},
                        "value": {"expression": "n"},
                    }
                ],
            },
        }
        for k in range(sources)
    ]
    (directory / "objects.yaml").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))


def bench_polling(args: argparse.Namespace) -> None:
    """Many sources: how polls spread over the interval, how many run at once, and the CPU they cost."""
    work = Path(tempfile.mkdtemp(prefix="prescaler-polling-"))
    items_proc, items_port = start_items_server()
    manifests = work / "m"
    manifests.mkdir()
    write_polling_manifests(manifests, args.sources, items_port, args.poll_interval)
    try:
        started = time.time()
        proc, _, _, _ = start_prescaler(manifests, work / "serve.log", args.sources)
        # Skip the first interval (every source's first fetch), then watch two whole intervals.
        time.sleep(max(0.0, started + args.poll_interval + 2 - time.time()))
        cpu0, wall0 = cpu_seconds(proc.pid), time.time()
        time.sleep(2 * args.poll_interval)
        cpu, wall = cpu_seconds(proc.pid) - cpu0, time.time() - wall0
        stats = httpx.get(f"http://127.0.0.1:{items_port}/stats", timeout=10).json()
        stop(proc)
    finally:
        stop(items_proc)
    times = [t for t in stats["requests"] if t >= started]
    first_seconds = [t - started for t in times]
    window = [t for t in times if wall0 <= t < wall0 + wall]
    per_second: dict[int, int] = {}
    for t in window:
        per_second[int(t - wall0)] = per_second.get(int(t - wall0), 0) + 1
    mean = len(window) / wall
    busiest = max(per_second.values()) if per_second else 0
    first_fetches = sorted(first_seconds)[: args.sources]
    print(
        f"polling: {args.sources:,} VirtualMetricEvents, api sources every {args.poll_interval:g}s, local HTTP server"
    )
    print(f"  first fetches after start: from {first_fetches[0]:.1f} s to {first_fetches[-1]:.1f} s")
    print(
        f"  steady polls over {wall:.0f} s: {len(window)} requests, mean {mean:.1f}/s, busiest second {busiest} "
        f"({busiest / mean if mean else 0:.1f}x the mean); most requests in flight at once: {stats['max_inflight']}"
    )
    print(f"  CPU spent by prescaler (polling only, no queries): {cpu / wall * 100:.1f}% of one core")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--targets", type=int, default=100_000)
    # Nine rounds of 3 s rather than three of 5 s: this machine's slow spells last seconds, and more,
    # shorter interleaved rounds keep one of them from deciding a ratio.
    parser.add_argument("--duration", type=int, default=3, help="seconds per wrk run")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds (medians are reported)")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--interval", type=float, default=5.0, help="source poll interval in the bench")
    parser.add_argument("--sources", type=int, default=1000, help="VirtualMetricEvents in the polling bench")
    parser.add_argument("--poll-interval", type=float, default=30.0, help="source interval in the polling bench")
    parser.add_argument("--only", choices=("serving", "polling"), help="run one part")
    parser.add_argument(
        "--change-every",
        type=int,
        default=6,
        help="while delivering, a source's items change on every N-th poll (6 with 5s polls: "
        "one new snapshot per source every 30 s, as when 100 sources first deliver)",
    )
    parser.add_argument("--items-server", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.items_server:
        run_items_server(args.items_server, args.change_every)
        return
    if args.only != "serving":
        bench_polling(args)
    if args.only == "polling":
        return
    work = Path(tempfile.mkdtemp(prefix="prescaler-scale-"))
    items_proc, items_port = start_items_server(args.change_every)
    procs: list[subprocess.Popen] = [items_proc]
    ports: dict[str, int] = {}
    pids: dict[str, int] = {}
    starts: dict[int, tuple[float, float]] = {}
    # rows[name] -> one result per round
    rows: dict[str, list[dict[str, float]]] = {}
    cpu_share: list[float] = []
    try:
        for targets in (10, args.targets):
            manifests = work / f"m{targets}"
            manifests.mkdir()
            write_manifests(manifests, targets, items_port, args.interval)
            set_mode(items_port, "steady")
            proc, port, first, last = start_prescaler(manifests, work / f"serve{targets}.log", targets)
            procs.append(proc)
            large_proc = proc
            ports[f"prescaler, {targets:,} targets"] = port
            pids[f"prescaler, {targets:,} targets"] = proc.pid
            starts[targets] = (first, last)
            if targets == 10:
                body = httpx.get(f"https://127.0.0.1:{port}{value_path('svc-0')}", verify=False).content
                bare_proc, ports["bare"] = start_bare(body, work)
                pids["bare"] = bare_proc.pid
                procs.append(bare_proc)
        small, large = "prescaler, 10 targets", f"prescaler, {args.targets:,} targets"
        for _ in range(args.rounds):
            # Steady: every source delivered, polls find the same items. The three servers take turns.
            set_mode(items_port, "steady")
            time.sleep(args.interval + 1.0)  # the last changed snapshot is published
            for name in ("bare", small, large):
                rows.setdefault(f"{name}, steady", []).append(load(ports[name], args, pids[name]))
            # Delivering: every poll of every source brings changed values.
            set_mode(items_port, "changing")
            time.sleep(args.interval + 1.0)  # past the switch (every source changes once then)
            cpu0, wall0 = cpu_seconds(large_proc.pid), time.time()
            rows.setdefault(f"{large}, delivering", []).append(load(ports[large], args, pids[large]))
            cpu_share.append((cpu_seconds(large_proc.pid) - cpu0) / (time.time() - wall0))
    finally:
        for proc in reversed(procs):
            stop(proc)

    def summary(name: str) -> dict[str, float]:
        runs = rows[name]
        return {
            "rps": median([r["rps"] for r in runs]),
            "p50": median([r["p50"] for r in runs]),
            "p99": median([r["p99"] for r in runs]),
            "p99 worst": max(r["p99"] for r in runs),
            "non2xx": sum(r["non2xx"] for r in runs),
            "cpu_us": median([r["cpu_us"] for r in runs]),
            "steal": max(r["steal"] for r in runs),
        }

    def ratio(name: str, reference: str) -> float:
        """Median over rounds of time per request relative to `reference` in the same round."""
        return median([ref["rps"] / r["rps"] for r, ref in zip(rows[name], rows[reference])])

    def cpu_ratio(name: str, reference: str) -> float:
        """Median over rounds of the server's CPU time per request relative to `reference`'s."""
        return median([r["cpu_us"] / ref["cpu_us"] for r, ref in zip(rows[name], rows[reference])])

    print(
        f"wrk -t1 -c{args.connections} -d{args.duration}s over TLS, GET {value_path('svc-0')}; "
        f"{args.rounds} interleaved rounds: req/s, p50 and p99 medians over the rounds, and the worst round's p99"
    )
    print(
        f"{args.targets:,} targets = {args.targets // PER_EVENT} VirtualMetricEvents x {PER_EVENT} targets, "
        f"one api source each polled every {args.interval:g}s, one namespace; while delivering, "
        f"{args.targets / PER_EVENT / args.interval / args.change_every:.1f} new snapshots/s "
        f"({PER_EVENT:,} targets each)"
    )
    print(
        f"{'server':<48} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'worst':>7} {'x bare':>7} {'x 10':>6}"
        f" {'CPU us/req':>10} {'x 10':>6}"
    )
    for name in ("bare, steady", f"{small}, steady", f"{large}, steady", f"{large}, delivering"):
        r = summary(name)
        label = "bare ASGI app (same uvicorn + TLS, same bytes)" if name.startswith("bare") else name
        bare = name.startswith("bare")
        to_small = f"{ratio(name, small + ', steady'):>6.2f}" if not bare else f"{'':>6}"
        cpu_to_small = f"{cpu_ratio(name, small + ', steady'):>6.2f}" if not bare else f"{'':>6}"
        print(
            f"{label:<48} {r['rps']:>7.0f} {r['p50']:>7.2f} {r['p99']:>7.2f} {r['p99 worst']:>7.2f} "
            f"{ratio(name, 'bare, steady'):>7.2f} "
            f"{to_small} {r['cpu_us']:>10.0f} {cpu_to_small}" + (f"  non-2xx {r['non2xx']:.0f}" if r["non2xx"] else "")
        )
    print(
        "x 10: time per request (req/s) and server CPU per request, each relative to the 10-target server "
        "in the same round, median over rounds; the most CPU time stolen by the hypervisor in any run: "
        f"{max(summary(n)['steal'] for n in rows) * 100:.1f}%"
    )
    for targets, (first, last) in starts.items():
        print(
            f"start with {targets:,} targets: first value served after {first:.1f} s, "
            f"the last target's after {last:.1f} s"
        )
    print(
        f"CPU of the {args.targets:,}-target server while delivering (wrk included): "
        f"{median(cpu_share) * 100:.0f}% of one core"
    )
    steady, delivering = (
        ratio(f"{large}, steady", f"{small}, steady"),
        ratio(f"{large}, delivering", f"{small}, steady"),
    )
    cpu_steady, cpu_delivering = (
        cpu_ratio(f"{large}, steady", f"{small}, steady"),
        cpu_ratio(f"{large}, delivering", f"{small}, steady"),
    )
    p99 = max(summary(n)["p99"] for n in rows if not n.startswith("bare"))
    worst_p99 = max(summary(n)["p99 worst"] for n in rows if not n.startswith("bare"))
    print(
        f"goals: {args.targets:,} vs 10 targets <= 1.2x: steady {steady:.2f}x (CPU {cpu_steady:.2f}x), while "
        f"delivering {delivering:.2f}x (CPU {cpu_delivering:.2f}x); p99 <= 10 ms: {p99:.2f} ms (the highest median over rounds; the worst single "
        f"round {worst_p99:.2f} ms); first value <= 5 s: "
        f"{starts[args.targets][0]:.1f} s"
    )


if __name__ == "__main__":
    main()
