"""Reliability bench: the real `prescaler serve` under hostile clients, on loopback only.

    .venv/bin/python bench/reliability.py [--only idle,slow,fuzz,churn] [--connections 1000]
                                          [--fuzz-requests 100000] [--churn-seconds 20]
                                          [--calendars 1000] [--calendar-seconds 60]

Each scenario starts a fresh server (subprocess, local mode, self-signed TLS on a free port),
measures its RSS before and during the attack and samples the value endpoint (the HPA's request)
on its own keep-alive connection the whole time, and prints the figures:

- idle:  N TLS connections that complete the handshake and then send nothing; RSS before/after,
         per connection, how many the server refused (connection cap) and how many it closed after
         the header timeout.
- slow:  N connections that send half a request line and stop (slowloris); same figures.
- fuzz:  >= 100 000 malformed or random requests (bounded in time); counts per status, 5xx on
         /apis, server log lines per 1 000 bad requests.
- churn: load on the value endpoint while the manifests are rewritten continuously; p99 and how
         many answers were inconsistent with either version of the manifests.
- calendars: N VirtualMetricEvents with cron `* * * * *` (each would expand to more than the
         per-calendar limit; together far beyond the server's total) added to a running server;
         RSS and the value endpoint's p99 while they load, fail and retry.

Every loop is bounded by a count and a deadline; the server binds 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import random
import re
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from serve import free_port, serve_command  # noqa: E402  (bench/ is not a package)

VALUE_PATH = "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns-0/rps?labelSelector=resource%3Dsvc-0"


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def write_manifests(directory: Path, factor: int = 1) -> None:
    now = int(time.time())
    docs = [
        {
            "apiVersion": "prescaler.pingpong.ai/v1",
            "kind": "VirtualMetric",
            "metadata": {"name": "rps"},
            "spec": {"name": "rps", "defaultValue": 0, "mergeStrategy": "Sum"},
        }
    ]
    entries = [
        {
            "name": "rps",
            "resource": {"name": f"svc-{i}", "namespace": f"ns-{i % 10}"},
            "value": {"expression": f"n * {factor}"},
        }
        for i in range(100)
    ]
    docs.append(
        {
            "apiVersion": "prescaler.pingpong.ai/v1",
            "kind": "VirtualMetricEvent",
            "metadata": {"name": "ev"},
            "spec": {
                "source": {"schedule": {"items": [{"start": now - 60, "end": now + 7200, "values": {"n": 10}}]}},
                "metrics": entries,
            },
        }
    )
    tmp = directory / ".manifest.tmp"
    tmp.write_text(yaml.safe_dump_all(docs))
    os.replace(tmp, directory / "manifest.yaml")


class Server:
    """`prescaler serve --manifests DIR` on 127.0.0.1:<free port>, log to a file."""

    def __init__(self, directory: Path, extra: list[str] | None = None) -> None:
        self.directory = directory
        self.port = free_port()
        self.log_path = directory.parent / f"server-{self.port}.log"
        cmd = serve_command(directory, self.port, "--v", "1", *(extra or []))
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self.log_path.open("w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log_path.read_text()[-2000:]}")
            try:
                if httpx.get(self.url(VALUE_PATH), verify=False, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("server did not become ready in 60 s")

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def rss(self) -> float:
        return rss_mb(self.proc.pid)

    def log_lines(self) -> int:
        return len(self.log_path.read_text(errors="replace").splitlines())

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def _sample_until_stopped(url: str, interval: float, stop: Any, out: Any) -> None:
    """Child process: GET `url` back to back on one keep-alive connection until `stop` is set."""
    samples: list[float] = []
    errors: Counter[str] = Counter()
    with httpx.Client(verify=False, timeout=5) as client:
        while not stop.is_set():
            started = time.perf_counter()
            try:
                code = client.get(url).status_code
                if code == 200:
                    samples.append(time.perf_counter() - started)
                else:
                    errors[str(code)] += 1
            except httpx.HTTPError as exc:
                errors[type(exc).__name__] += 1
            stop.wait(interval)
    out.put((samples, dict(errors)))


class LatencySampler:
    """GETs the value endpoint (the HPA's request) back to back on its own keep-alive connection, in
    its own process: the attack runs in this process, and its Python work (TLS, parsing) holding the
    GIL would otherwise delay the sampler and count as server latency. p50/p99 over the window."""

    def __init__(self, server: Server, interval: float = 0.01) -> None:
        context = multiprocessing.get_context("spawn")
        self.samples: list[float] = []
        self.errors: Counter[str] = Counter()
        self._stop = context.Event()
        self._out = context.Queue()
        self._proc = context.Process(
            target=_sample_until_stopped,
            args=(server.url(VALUE_PATH), interval, self._stop, self._out),
            daemon=True,
        )

    def __enter__(self) -> LatencySampler:
        self._proc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        samples, errors = self._out.get(timeout=60)
        self._proc.join(10)
        self.samples, self.errors = samples, Counter(errors)

    def p99_ms(self) -> float:
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000 if ordered else float("nan")

    def summary(self) -> str:
        if not self.samples:
            return f"no successful samples, errors {dict(self.errors)}"
        return (
            f"value endpoint: {len(self.samples)} samples, p50 {statistics.median(self.samples) * 1000:.1f} ms, "
            f"p99 {self.p99_ms():.1f} ms, errors {dict(self.errors) or 0}"
        )


def quiet_baseline(server: Server, name: str, seconds: float = 3.0, interval: float = 0.01) -> None:
    """The same sampler on the same server before the attack: the figure to read the attack's against."""
    with LatencySampler(server, interval) as sampler:
        time.sleep(seconds)
    print(f"[{name}] quiet (before the attack) {sampler.summary()}")


def _client_context() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def open_tls(port: int, count: int, deadline: float, first_bytes: bytes = b"") -> tuple[list[ssl.SSLSocket], int]:
    """Up to `count` handshaken connections (each optionally sending `first_bytes`); (sockets, failures)."""
    ctx = _client_context()
    conns: list[ssl.SSLSocket] = []
    failures = 0
    for _ in range(count):
        if time.monotonic() > deadline:
            break
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            tls = ctx.wrap_socket(raw, server_hostname="localhost")
            if first_bytes:
                tls.sendall(first_bytes)
            conns.append(tls)
        except OSError:
            failures += 1
            raw.close()
    return conns, failures


def closed_by_server(conns: list[ssl.SSLSocket], wait: float) -> int:
    """How many of `conns` the server has closed (EOF or reset) within `wait` seconds."""
    closed = 0
    deadline = time.monotonic() + wait
    pending = list(conns)
    while pending and time.monotonic() < deadline:
        still = []
        for conn in pending:
            conn.settimeout(0.0)
            try:
                data = conn.recv(1)
                if data == b"":
                    closed += 1
                    continue
                still.append(conn)  # the server answered something (e.g. a 400/408): wait for EOF
            except (ssl.SSLWantReadError, BlockingIOError):
                still.append(conn)
            except OSError:
                closed += 1
        pending = still
        if pending:
            time.sleep(0.2)
    return closed


@contextlib.contextmanager
def server_in(tmp: Path, name: str, extra: list[str] | None = None) -> Iterator[Server]:
    directory = tmp / name
    directory.mkdir()
    write_manifests(directory)
    server = Server(directory, extra)
    try:
        yield server
    finally:
        server.stop()


def scenario_connections(tmp: Path, name: str, count: int, first_bytes: bytes, wait_close: float) -> None:
    with server_in(tmp, name) as server:
        time.sleep(1)
        quiet_baseline(server, name)
        before = server.rss()
        with LatencySampler(server) as sampler:
            started = time.monotonic()
            conns, failures = open_tls(server.port, count, started + 120, first_bytes)
            opened = time.monotonic() - started
            time.sleep(1)
            during = server.rss()
            closed = closed_by_server(conns, wait_close)
        after = server.rss()
        per_conn_kb = (during - before) * 1024 / max(1, len(conns))
        print(
            f"[{name}] {len(conns)} handshaken connections ({failures} failed) in {opened:.1f} s: "
            f"RSS {before:.0f} -> {during:.0f} MB ({per_conn_kb:.0f} KB per connection), "
            f"{closed} closed by the server within {wait_close:.0f} s, RSS after {after:.0f} MB"
        )
        print(f"[{name}] {sampler.summary()}")
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.close()


# Malformed framing: the server answers 400 and closes, so each goes last on its connection.
_MALFORMED = [
    b"POST /apis HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nnot-hex\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n\r\n",
    b"GET /\x00\x01 HTTP/1.1\r\nHost: x\r\n\r\n",
    b"\x16\x03\x01garbage\r\n\r\n",
    b"GET / HTTP/9.9\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
]
_NUMBERS = ["inf", "-inf", "nan", "1e300", "-1e20", "9" * 400, "x", "", "0x10", "1_000", "-0"]


def _hostile_path(rng: random.Random) -> str:
    """A well-framed request with a hostile target: selectors, namespaces, preview numbers, junk."""
    kind = rng.randrange(6)
    base = VALUE_PATH.split("?")[0]
    if kind == 0:
        terms = ",".join(
            f"k{rng.randint(0, 99)}{rng.choice(['=', '!=', ' in ', ' notin '])}"
            f"{rng.choice(['v', '(a,b)', '(', '', ')', '!'])}"
            for _ in range(rng.randint(1, 6))
        )
        return base + "?labelSelector=" + quote(terms)
    if kind == 1:
        return (
            base
            + "?labelSelector="
            + quote("resource in (" + ",".join(f"svc-{i}" for i in range(rng.randint(1, 2000))) + ")")
        )
    if kind == 2:
        junk = "".join(rng.choice("abc%/?&=#;.~-_") for _ in range(rng.randint(1, 60)))
        return f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{junk}/rps"
    if kind == 3:
        return (
            f"/preview?duration={quote(rng.choice(_NUMBERS))}&step={quote(rng.choice(_NUMBERS))}"
            f"&start={quote(rng.choice(_NUMBERS))}"
        )
    if kind == 4:
        return "/" + "".join(rng.choice("ab/%.") for _ in range(rng.randint(1, 3000)))
    return VALUE_PATH


def _connection_batch(rng: random.Random, size: int) -> tuple[bytes, int]:
    """`size` pipelined requests; the last one either malformed or `Connection: close`."""
    parts = [
        f"{rng.choice(['GET', 'GET', 'HEAD', 'POST', 'DELETE'])} {_hostile_path(rng)} HTTP/1.1\r\n"
        f"Host: x\r\n\r\n".encode()
        for _ in range(size - 1)
    ]
    if rng.random() < 0.5:
        parts.append(rng.choice(_MALFORMED))
    else:
        parts.append(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    return b"".join(parts), size


_STATUS = re.compile(rb"HTTP/1\.1 (\d{3}) ")


def scenario_fuzz(tmp: Path, total: int, seconds: float, per_connection: int = 100) -> None:
    rng = random.Random(14)
    with server_in(tmp, "fuzz") as server:
        quiet_baseline(server, "fuzz")
        lines_before = server.log_lines()
        before = server.rss()
        peak = before
        statuses: Counter[str] = Counter()
        ctx = _client_context()
        sent = 0
        started = time.monotonic()
        deadline = started + seconds
        with LatencySampler(server) as sampler:
            while sent < total and time.monotonic() < deadline:
                payload, count = _connection_batch(rng, min(per_connection, total - sent))
                sent += count
                try:
                    with (
                        socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
                        ctx.wrap_socket(raw, server_hostname="localhost") as tls,
                    ):
                        tls.sendall(payload)
                        received = bytearray()
                        while True:  # until the server closes (Connection: close or malformed last)
                            chunk = tls.recv(65536)
                            if not chunk:
                                break
                            received += chunk
                except OSError as exc:
                    statuses[type(exc).__name__] += 1
                    continue
                answered = _STATUS.findall(received)
                statuses.update(code.decode() for code in answered)
                statuses["unanswered"] += count - len(answered)
                if sent % 10_000 < per_connection:
                    peak = max(peak, server.rss())
        elapsed = time.monotonic() - started
        logged = server.log_lines() - lines_before
        server_errors = sum(n for code, n in statuses.items() if code.startswith("5"))
        print(
            f"[fuzz] {sent} hostile requests ({per_connection} pipelined per TLS connection) in {elapsed:.0f} s: "
            f"statuses {dict(statuses.most_common(10))}; 5xx {server_errors}; RSS {before:.0f} -> peak "
            f"{peak:.0f} -> {server.rss():.0f} MB; {logged} server log lines"
        )
        print(f"[fuzz] {sampler.summary()}")
        for line in server.log_path.read_text(errors="replace").splitlines()[lines_before : lines_before + 5]:
            print(f"[fuzz]   server log: {line[:160]}")


def scenario_churn(tmp: Path, seconds: float) -> None:
    with server_in(tmp, "churn") as server:
        quiet_baseline(server, "churn", interval=0.002)
        before = server.rss()
        inconsistent = 0
        answers = 0
        stop = time.monotonic() + seconds
        with LatencySampler(server, interval=0.002) as sampler, httpx.Client(verify=False, timeout=5) as client:
            factor = 1
            while time.monotonic() < stop:
                factor = 1 + factor % 5
                write_manifests(server.directory, factor)
                for _ in range(20):
                    response = client.get(server.url(VALUE_PATH))
                    answers += 1
                    if response.status_code != 200:
                        inconsistent += 1
                        continue
                    value = response.json()["items"][0]["value"]
                    if value not in {str(10 * f) for f in range(1, 6)}:
                        inconsistent += 1
                time.sleep(0.05)
        print(
            f"[churn] {seconds:.0f} s of manifest rewrites: {answers} answers checked, {inconsistent} "
            f"inconsistent; RSS {before:.0f} -> {server.rss():.0f} MB"
        )
        print(f"[churn] {sampler.summary()}")


def scenario_calendars(tmp: Path, count: int, seconds: float) -> None:
    with server_in(tmp, "calendars") as server:
        quiet_baseline(server, "calendars")
        before = server.rss()
        peak = before
        docs = [
            {
                "apiVersion": "prescaler.pingpong.ai/v1",
                "kind": "VirtualMetricEvent",
                "metadata": {"name": f"cal-{i}"},
                "spec": {
                    "source": {"schedule": {"windows": [{"cron": "* * * * *", "duration": "1m", "values": {"n": 1}}]}},
                    "metrics": [
                        {
                            "name": "rps",
                            "resource": {"name": f"cal-{i}", "namespace": "ns-cal"},
                            "value": {"expression": "n"},
                        }
                    ],
                },
            }
            for i in range(count)
        ]
        with LatencySampler(server) as sampler:
            time.sleep(1)
            staged = server.directory / ".calendars.tmp"
            staged.write_text(yaml.safe_dump_all(docs))
            os.replace(staged, server.directory / "calendars.yaml")
            stop = time.monotonic() + seconds
            while time.monotonic() < stop:
                peak = max(peak, server.rss())
                time.sleep(0.5)
        print(
            f"[calendars] {count} calendars of `* * * * *` for {seconds:.0f} s: RSS {before:.0f} -> peak "
            f"{peak:.0f} -> {server.rss():.0f} MB"
        )
        print(f"[calendars] {sampler.summary()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="idle,slow,fuzz,churn,calendars")
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--wait-close", type=float, default=20.0, help="seconds to wait for the server to close")
    parser.add_argument("--fuzz-requests", type=int, default=100_000)
    parser.add_argument("--fuzz-seconds", type=float, default=300.0)
    parser.add_argument("--churn-seconds", type=float, default=20.0)
    parser.add_argument("--calendars", type=int, default=1000)
    parser.add_argument("--calendar-seconds", type=float, default=60.0)
    args = parser.parse_args()
    only = set(args.only.split(","))
    with tempfile.TemporaryDirectory(prefix="prescaler-reliability-") as tmp_name:
        tmp = Path(tmp_name)
        if "idle" in only:
            scenario_connections(tmp, "idle", args.connections, b"", args.wait_close)
        if "slow" in only:
            scenario_connections(tmp, "slow", args.connections, b"GET /apis/external.metrics", args.wait_close)
        if "fuzz" in only:
            scenario_fuzz(tmp, args.fuzz_requests, args.fuzz_seconds)
        if "churn" in only:
            scenario_churn(tmp, args.churn_seconds)
        if "calendars" in only:
            scenario_calendars(tmp, args.calendars, args.calendar_seconds)


if __name__ == "__main__":
    main()
