"""Source-side attacks, measured: RSS, wall time and the longest event-loop stall per case.

    python bench/reliability_sources.py                          # this tree
    python bench/reliability_sources.py --baseline /tmp/main     # side by side with another checkout

Cases (each runs in its own process, so peak RSS is the case's own):
  bomb-gzip-gzip  `Content-Encoding: gzip, gzip`, a few KB on the wire, --inside-mib MiB inside
  bomb-gzip       one gzip layer with the same content
  items-1m        an `api` body of 1 000 000 items (maxResponseBytes raised to let it through)
  schedules       --schedules calendars with cron `* * * * *` under real SourceRunners for 75 s

`--baseline DIR` runs every case against the `adapter` package in DIR too (e.g. a `git archive main`
export), for before/after figures measured in one run on the same machine.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

CASES = ("bomb-gzip-gzip", "bomb-gzip", "items-1m", "schedules")
T0 = 1_700_545_800.0


# ---------------------------------------------------------------- inputs (built once, in the parent)


def gzip_of_zeros(mib: int) -> bytes:
    """gzip of `mib` MiB of zeros, compressed in 1 MiB steps so the parent never holds the content."""
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    block = bytes(1024 * 1024)
    parts = [packer.compress(block) for _ in range(mib)]
    parts.append(packer.flush())
    return b"".join(parts)


def build_inputs(directory: Path, inside_mib: int) -> None:
    one = gzip_of_zeros(inside_mib)
    (directory / "bomb-gzip").write_bytes(one)
    (directory / "bomb-gzip-gzip").write_bytes(gzip.compress(one, compresslevel=9))
    item = json.dumps({"start": int(T0), "end": int(T0) + 60, "values": {"n": 1}})
    (directory / "items-1m").write_bytes(('{"items": [' + ",".join([item] * 1_000_000) + "]}").encode())


# ---------------------------------------------------------------- one case, in a child process


def rss_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_case(case: str, data_dir: Path, schedules: int) -> dict[str, object]:
    import asyncio
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from adapter.sources.api import ApiSource
    from adapter.sources.base import CommonSourceSettings, SourceContext

    body = (data_dir / case).read_bytes() if case != "schedules" else b""
    coding = {"bomb-gzip-gzip": "gzip, gzip", "bomb-gzip": "gzip"}.get(case)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if coding:
                self.send_header("Content-Encoding", coding)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/"
    context = SourceContext()

    async def work() -> str:
        if case == "schedules":
            return await fetch_schedules(context, schedules)
        # The bombs meet the default limit (4 MiB); the big document needs a raised one to arrive at all.
        block = {"url": url, "maxResponseBytes": 256 * 1024 * 1024} if case == "items-1m" else {"url": url}
        source = ApiSource(
            ApiSource.parse_config(block, "spec.source.api"), CommonSourceSettings(interval=30, timeout=120), context
        )
        try:
            result = await source.fetch(T0)
            items = getattr(result, "items", result)
            return f"ok: {len(items)} items"
        except Exception as exc:  # noqa: BLE001 - the outcome is what we report
            return f"{type(exc).__name__}: {str(exc)[:110]}"
        finally:
            await source.close()

    async def measured() -> tuple[str, float]:
        stall = 0.0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal stall
            last = time.perf_counter()
            while not done.is_set():
                await asyncio.sleep(0.005)
                now = time.perf_counter()
                stall = max(stall, now - last - 0.005)
                last = now

        tick = asyncio.create_task(ticker())
        try:
            outcome = await work()
        finally:
            done.set()
            await tick
        return outcome, stall

    base = rss_mib("VmRSS")
    started = time.perf_counter()
    outcome, stall = asyncio.run(measured())
    return {
        "case": case,
        "seconds": round(time.perf_counter() - started, 2),
        "rss_start_mib": round(base),
        "rss_peak_mib": round(rss_mib("VmHWM")),
        "max_loop_stall_ms": round(stall * 1000, 1),
        "outcome": outcome,
    }


async def fetch_schedules(context: object, count: int) -> str:
    """`count` calendars under real SourceRunners (as the engine runs them) for SCHEDULE_SECONDS."""
    import asyncio

    from adapter.sources.base import CommonSourceSettings
    from adapter.sources.runner import SourceRunner
    from adapter.sources.schedule import ScheduleSource

    block = {"windows": [{"cron": "* * * * *", "duration": "1m", "values": {"n": 1}}]}
    config = ScheduleSource.parse_config(block, "spec.source.schedule")
    held: dict[str, int] = {}

    def on_snapshot(name: str, items: list[object]) -> None:
        held[name] = len(items)

    runners = [
        SourceRunner(
            f"vme{i}",
            ScheduleSource(config, CommonSourceSettings(interval=60), context),  # type: ignore[arg-type]
            on_snapshot,
        )
        for i in range(count)
    ]
    for runner in runners:
        runner.start()
    await asyncio.sleep(SCHEDULE_SECONDS)
    failing = [r for r in runners if r.health.last_error]
    for runner in runners:
        await runner.stop()
    first = f"; e.g. {failing[0].health.last_error[:70]}" if failing else ""
    return (
        f"after {SCHEDULE_SECONDS}s: {len(held)} calendars serving {sum(held.values())} items, "
        f"{len(failing)} refused{first}"
    )


SCHEDULE_SECONDS = 75


# ---------------------------------------------------------------- driver


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, help="another checkout to measure side by side")
    parser.add_argument("--inside-mib", type=int, default=1024, help="decoded size of the bombs")
    parser.add_argument("--schedules", type=int, default=1000, help="calendars in the schedules case")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case, args.data, args.schedules)))
        return
    here = Path(__file__).resolve().parents[1]
    trees = [("this tree", here)] + ([("baseline", args.baseline.resolve())] if args.baseline else [])
    with tempfile.TemporaryDirectory(prefix="prescaler-bench-") as tmp:
        build_inputs(Path(tmp), args.inside_mib)
        sizes = {case: os.path.getsize(Path(tmp) / case) for case in CASES if (Path(tmp) / case).exists()}
        print(
            f"inputs: bombs {args.inside_mib} MiB inside, on the wire gzip,gzip {sizes['bomb-gzip-gzip']} B, "
            f"gzip {sizes['bomb-gzip']} B; items-1m {sizes['items-1m'] / 1e6:.0f} MB; "
            f"{args.schedules} calendars"
        )
        print(f"{'tree':10} {'case':15} {'seconds':>8} {'rss start':>10} {'rss peak':>9} {'loop stall':>11}  outcome")
        for case in args.cases.split(","):
            for label, tree in trees:
                env = {**os.environ, "PYTHONPATH": str(tree)}
                done = subprocess.run(
                    [sys.executable, __file__, "--case", case, "--data", tmp, "--schedules", str(args.schedules)],
                    env=env,
                    cwd=tree,
                    capture_output=True,
                    text=True,
                    timeout=1800,
                )
                if done.returncode != 0:
                    print(f"{label:10} {case:15} failed: {done.stderr.strip().splitlines()[-1:]}")
                    continue
                row = json.loads(done.stdout.strip().splitlines()[-1])
                print(
                    f"{label:10} {case:15} {row['seconds']:>8} {row['rss_start_mib']:>7} MiB "
                    f"{row['rss_peak_mib']:>5} MiB {row['max_loop_stall_ms']:>8} ms  {row['outcome']}"
                )


if __name__ == "__main__":
    main()
