"""A tiny stand-in for a service that announces its future load (the seed's "proactive messages").

`prescaler demo-announcer --port 8099` serves, on any path ending in /metrics, the seed's JSON:
a batch of scheduledMessage every `period` seconds lasting `duration` seconds, announced `horizon`
seconds ahead. The defaults fit examples/local (leadTime 2m, holdTime 30s): a batch every 5 minutes
lasting 1 minute, so the served value rises 2 minutes before each batch, stays up through it and
its hold, and falls back for the last 1.5 minutes before the next rise. A period no longer than
leadTime + duration + holdTime would keep it up forever.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger("prescaler.demo")


DEFAULT_PERIOD = 300
DEFAULT_DURATION = 60
DEFAULT_OFFSET = 60


def batches(
    now: float,
    period: int = DEFAULT_PERIOD,
    duration: int = DEFAULT_DURATION,
    offset: int = DEFAULT_OFFSET,
    horizon: int = 1800,
    history: int = 600,
) -> list[dict[str, Any]]:
    """Deterministic batches: every `period` s, starting `offset` s into the period, for `duration` s."""
    items = []
    first = int((now - history) // period)
    last = int((now + horizon) // period)
    for k in range(first, last + 1):
        start = k * period + offset
        if now - history <= start <= now + horizon:
            items.append(
                {
                    "id": f"batch-{k}",
                    "start": start,
                    "end": start + duration,
                    "values": {"scheduledMessage": 20 + (k % 4) * 15},
                }
            )
    return items


def make_handler(
    clock: Callable[[], float] = time.time, period: int = DEFAULT_PERIOD, duration: int = DEFAULT_DURATION
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if not self.path.split("?")[0].endswith("/metrics"):
                self.send_error(404, "try /service-a/metrics")
                return
            body = json.dumps({"items": batches(clock(), period=period, duration=duration)}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("announcer: " + fmt, *args)

    return Handler


def add_parsers(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo-announcer",
        help="serve demo announcements of future load (the local demo of make run)",
        description="Serve the seed's announcement JSON on http://BIND:PORT/<anything>/metrics: a batch of "
        "scheduledMessage every --period seconds lasting --duration seconds, announced 30 minutes "
        "ahead. examples/local/announcer-vme.yaml reads it.",
    )
    parser.add_argument("--port", type=int, default=8099, help="TCP port to listen on (0 = pick a free one)")
    parser.add_argument("--bind-address", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--period", type=int, default=DEFAULT_PERIOD, help="seconds between batch starts")
    parser.add_argument("--duration", type=int, default=DEFAULT_DURATION, help="seconds each batch lasts")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.period <= 0 or not 0 < args.duration < args.period:
        print(
            f"prescaler demo-announcer: need 0 < --duration < --period, got {args.duration} and {args.period}",
            file=sys.stderr,
        )
        return 2
    try:
        server = ThreadingHTTPServer(
            (args.bind_address, args.port), make_handler(period=args.period, duration=args.duration)
        )
    except OSError as exc:
        print(
            f"prescaler demo-announcer: cannot listen on {args.bind_address}:{args.port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1
    print(f"demo announcer on http://{args.bind_address}:{server.server_address[1]}/service-a/metrics", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
