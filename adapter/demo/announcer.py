"""A tiny stand-in for a service that announces its future load (the seed's "proactive messages").

`prescaler demo-announcer --port 8099` serves, on any path ending in /metrics, the seed's JSON:
a batch of scheduledMessage every `period` seconds, announced `horizon` seconds ahead, so a local
prescaler shows values that rise before each batch (leadTime) and fall after it.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger("prescaler.demo")


def batches(now: float, period: int = 300, duration: int = 120, offset: int = 60,
            horizon: int = 1800, history: int = 600) -> list[dict[str, Any]]:
    """Deterministic batches: every `period` s, starting `offset` s into the period, for `duration` s."""
    items = []
    first = int((now - history) // period)
    last = int((now + horizon) // period)
    for k in range(first, last + 1):
        start = k * period + offset
        if now - history <= start <= now + horizon:
            items.append({"id": f"batch-{k}", "start": start, "end": start + duration,
                          "values": {"scheduledMessage": 20 + (k % 4) * 15}})
    return items


def make_handler(clock: Callable[[], float] = time.time, period: int = 300) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if not self.path.split("?")[0].endswith("/metrics"):
                self.send_error(404, "try /service-a/metrics")
                return
            body = json.dumps({"items": batches(clock(), period=period)}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("announcer: " + fmt, *args)

    return Handler


def add_parsers(subparsers: Any) -> None:
    parser = subparsers.add_parser("demo-announcer", help="serve demo announcements of future load (local demo)")
    parser.add_argument("--port", type=int, default=8099)
    parser.add_argument("--bind-address", default="127.0.0.1")
    parser.add_argument("--period", type=int, default=300, help="seconds between batches")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    server = ThreadingHTTPServer((args.bind_address, args.port), make_handler(period=args.period))
    print(f"demo announcer on http://{args.bind_address}:{server.server_address[1]}/service-a/metrics", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0
