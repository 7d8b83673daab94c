"""Serving benchmark: the value endpoint over TLS against a bare ASGI app on the same uvicorn settings.

    .venv/bin/python bench/serve.py [--duration 10] [--connections 32] [--large 100000]

Runs the real `prescaler serve --manifests` (10 targets, then --large targets), and a bare ASGI app
that returns the same bytes through the same TLS/uvicorn stack (adapter.serving.server), and loads
each with `wrk` (Debian package) over HTTPS. Prints req/s, p50, p99 and the ratios.
Goals: prescaler/bare >= 0.6 at 32 connections, p99 <= 10 ms, GET with 100 000 targets <= 1.2x 10.
"""

from __future__ import annotations

import argparse
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PATH = "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns-0/rps?labelSelector=resource%3Dsvc-0"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_command(manifests: Path | str, port: int, *extra: str) -> list[str]:
    """`prescaler serve` in local mode on 127.0.0.1:`port`: the command every bench starts."""
    return [
        sys.executable,
        "-m",
        "adapter.cli",
        "serve",
        "--manifests",
        str(manifests),
        "--secure-port",
        str(port),
        "--bind-address",
        "127.0.0.1",
        *extra,
    ]


def write_manifests(directory: Path, targets: int) -> None:
    now = int(time.time())
    docs = [
        {
            "apiVersion": "prescaler.pingpong.ai/v1",
            "kind": "VirtualMetric",
            "metadata": {"name": "rps"},
            "spec": {"name": "rps", "defaultValue": 0, "mergeStrategy": "Sum", "leadTime": "5m"},
        }
    ]
    per_event = 1000
    for start in range(0, targets, per_event):
        entries = [
            {
                "name": "rps",
                "resource": {"name": f"svc-{i}", "namespace": f"ns-{i % 100}"},
                "value": {"expression": f"n * {1 + i % 7}"},
            }
            for i in range(start, min(targets, start + per_event))
        ]
        docs.append(
            {
                "apiVersion": "prescaler.pingpong.ai/v1",
                "kind": "VirtualMetricEvent",
                "metadata": {"name": f"ev-{start // per_event}"},
                "spec": {
                    "source": {"schedule": {"items": [{"start": now - 60, "end": now + 7200, "values": {"n": 12.5}}]}},
                    "metrics": entries,
                },
            }
        )
    for index, doc in enumerate(docs):  # one object per file keeps each file small
        (directory / f"{index:05d}.yaml").write_text(yaml.safe_dump(doc))


def start(cmd: list[str], port: int, log: Path, ready_path: str, timeout: float = 300) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            r = httpx.get(f"https://127.0.0.1:{port}{ready_path}", verify=False, timeout=2)
            if r.status_code == 200 and (ready_path != PATH or r.json()["items"][0]["value"] != "0"):
                return proc
        except (httpx.HTTPError, KeyError, IndexError, ValueError):
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"server did not start: {log.read_text()[-2000:]}")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def wrk(url: str, duration: int, connections: int) -> dict[str, float]:
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency", url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    lat = {}
    for pct in ("50", "99"):
        m = re.search(rf"\s{pct}%\s+([\d.]+)(us|ms|s)", out)
        value, unit = float(m.group(1)), m.group(2)
        lat[pct] = value / 1000 if unit == "us" else value * 1000 if unit == "s" else value
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"rps": rps, "p50": lat["50"], "p99": lat["99"], "non2xx": float(errors.group(1)) if errors else 0.0}


def run_bare(port: int, body_file: str) -> None:
    """A bare ASGI app served by the same stack (TLS, protocol class, uvicorn settings)."""
    from adapter.serving.server import ServingOptions, serve

    body = Path(body_file).read_bytes()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    serve(app, ServingOptions(bind_address="127.0.0.1", secure_port=port, log_level="warning"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--bare", nargs=2, metavar=("PORT", "BODY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        run_bare(int(args.bare[0]), args.bare[1])
        return
    if shutil.which("wrk") is None:
        raise SystemExit("bench/serve.py needs wrk: apt-get install wrk")
    work = Path(tempfile.mkdtemp(prefix="prescaler-bench-"))
    results = {}
    body = b""
    for targets in (10, args.large):
        manifests = work / f"m{targets}"
        manifests.mkdir()
        write_manifests(manifests, targets)
        port = free_port()
        started = time.time()
        proc = start(
            serve_command(manifests, port, "--v", "0"),
            port,
            work / f"serve{targets}.log",
            PATH,
        )
        load_seconds = time.time() - started
        try:
            body = httpx.get(f"https://127.0.0.1:{port}{PATH}", verify=False).content
            wrk(f"https://127.0.0.1:{port}{PATH}", 2, args.connections)  # warm-up
            results[targets] = wrk(f"https://127.0.0.1:{port}{PATH}", args.duration, args.connections)
            results[targets]["load"] = load_seconds
        finally:
            stop(proc)
    body_file = work / "body.json"
    body_file.write_bytes(body)
    port = free_port()
    proc = start(
        [sys.executable, str(Path(__file__).resolve()), "--bare", str(port), str(body_file)],
        port,
        work / "bare.log",
        "/",
    )
    try:
        wrk(f"https://127.0.0.1:{port}{PATH}", 2, args.connections)
        bare = wrk(f"https://127.0.0.1:{port}{PATH}", args.duration, args.connections)
    finally:
        stop(proc)

    print(f"wrk -t1 -c{args.connections} -d{args.duration}s over TLS, GET {PATH}")
    print(f"{'server':<28} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'non-2xx':>8}")
    for name, r in (("bare ASGI (same bytes)", bare), *((f"prescaler, {t:,} targets", results[t]) for t in results)):
        print(f"{name:<28} {r['rps']:>9.0f} {r['p50']:>8.2f} {r['p99']:>8.2f} {r['non2xx']:>8.0f}")
    small, large = results[10], results[args.large]
    print(f"ratio prescaler/bare (10 targets): {small['rps'] / bare['rps']:.2f} (goal >= 0.6)")
    print(f"p99 prescaler: {small['p99']:.2f} ms (goal <= 10 ms)")
    print(
        f"GET cost {args.large:,} vs 10 targets (time per request): {small['rps'] / large['rps']:.2f}x "
        f"(goal <= 1.2); startup with {args.large:,} targets: {large['load']:.1f} s"
    )


if __name__ == "__main__":
    main()
