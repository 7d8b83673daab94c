"""A real Prometheus for the source tests, filled with history by `promtool tsdb create-blocks-from`.

Series written (5-minute samples, the newest ~10 s before the server starts, so instant queries
at "now" see them within Prometheus' 5-minute lookback):

- `prescaler_test_requests{service="service-a"}` / `{service="service-b"}`: a daily sine
  (service-a: 100 + 50·sin, service-b: 10 + 5·sin), exactly predictable;
- `prescaler_trace_requests{trace="elb"}`: the real AWS ELB request-count trace from
  ../shared/data/traces (beside the repository), timestamps moved so that it ends now.

The server is started once per test process (`shared_prometheus()`) and stopped at exit.
If `prometheus`/`promtool` are missing, scripts/install-prometheus.sh is tried once; if they are
still missing the tests that need them skip with the reason.
"""

from __future__ import annotations

import atexit
import math
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.shared_data import shared_dir

REPO = Path(__file__).resolve().parent.parent
_SHARED = shared_dir()
TRACE = (_SHARED or REPO.parent / "shared") / "data" / "traces" / "nab_aws_elb_request_count_8c0756_5min.csv"
STEP = 300.0
DAYS = 4
DAY = 86400.0


@dataclass(frozen=True)
class PrometheusServer:
    url: str
    last_sample: float  # unix seconds of the newest sample of every series
    step: float
    data_dir: Path


def find_binaries() -> tuple[str, str] | None:
    found = shutil.which("prometheus"), shutil.which("promtool")
    if all(found):
        return found  # type: ignore[return-value]
    script = REPO / "scripts" / "install-prometheus.sh"
    if script.exists() and not os.environ.get("PRESCALER_NO_PROMETHEUS_INSTALL"):
        subprocess.run(["sh", str(script)], capture_output=True, timeout=900, check=False)
        found = shutil.which("prometheus"), shutil.which("promtool")
        if all(found):
            return found  # type: ignore[return-value]
    return None


def synthetic(times: np.ndarray, base: float) -> np.ndarray:
    return base + 0.5 * base * np.sin(2 * math.pi * times / DAY)


def write_openmetrics(path: Path, last_sample: float) -> None:
    times = last_sample - STEP * np.arange(int(DAYS * DAY / STEP))[::-1]
    lines = [
        "# HELP prescaler_test_requests Synthetic daily requests per second.",
        "# TYPE prescaler_test_requests gauge",
    ]
    for service, base in (("service-a", 100.0), ("service-b", 10.0)):
        lines += [
            f'prescaler_test_requests{{service="{service}"}} {v:.6f} {t:.0f}'
            for t, v in zip(times, synthetic(times, base))
        ]
    trace = np.loadtxt(TRACE, delimiter=",", skiprows=1) if TRACE.exists() else None
    if trace is not None and len(trace):
        values = trace[-len(times) :, 1]
        shifted = last_sample - STEP * np.arange(len(values))[::-1]
        lines += [
            "# HELP prescaler_trace_requests ELB request count trace, shifted to end now.",
            "# TYPE prescaler_trace_requests gauge",
        ]
        lines += [f'prescaler_trace_requests{{trace="elb"}} {v:.6f} {t:.0f}' for t, v in zip(shifted, values)]
    lines.append("# EOF")
    path.write_text("\n".join(lines) + "\n")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_ready(url: str, process: subprocess.Popen, log: Path, deadline_s: float = 60.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"prometheus exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/-/ready", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"prometheus not ready after {deadline_s:g}s: {log.read_text()[-2000:]}")


def start_prometheus(workdir: Path) -> tuple[PrometheusServer, subprocess.Popen]:
    binaries = find_binaries()
    if binaries is None:
        raise FileNotFoundError("prometheus/promtool not found (run scripts/install-prometheus.sh)")
    prometheus, promtool = binaries
    data_dir = workdir / "data"
    data_dir.mkdir(parents=True)
    last_sample = float(int(time.time()) - 10)
    metrics = workdir / "history.om"
    write_openmetrics(metrics, last_sample)
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(metrics), str(data_dir)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    config = workdir / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = workdir / "prometheus.log"
    with open(log, "wb") as log_handle:
        process = subprocess.Popen(
            [
                prometheus,
                f"--config.file={config}",
                f"--storage.tsdb.path={data_dir}",
                f"--web.listen-address=127.0.0.1:{port}",
                # Backfilled blocks are judged by retention like any other: keep them all.
                "--storage.tsdb.retention.time=3650d",
            ],
            stdout=log_handle,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_ready(url, process, log)
    except Exception:
        process.kill()
        process.wait(timeout=10)
        raise
    return PrometheusServer(url=url, last_sample=last_sample, step=STEP, data_dir=data_dir), process


_shared: PrometheusServer | None = None
_shared_error: str | None = None


def shared_prometheus() -> PrometheusServer:
    """Start (once per process) and return the test Prometheus; pytest.skip when unavailable."""
    global _shared, _shared_error
    import pytest

    if _shared is None and _shared_error is None:
        workdir = Path(tempfile.mkdtemp(prefix="prescaler-prom-"))
        try:
            _shared, process = start_prometheus(workdir)
        except FileNotFoundError as exc:
            _shared_error = str(exc)
        else:

            def stop() -> None:
                process.kill()  # throwaway data: no need for a graceful (slow) shutdown
                process.wait(timeout=10)
                shutil.rmtree(workdir, ignore_errors=True)

            atexit.register(stop)
    if _shared is None:
        print(f"skipping: {_shared_error}")
        pytest.skip(_shared_error or "prometheus unavailable")
    return _shared
