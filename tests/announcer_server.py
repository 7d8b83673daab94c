"""A controllable HTTP announcer on 127.0.0.1 for tests: set the body/status it returns."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Announcer:
    def __init__(self) -> None:
        self.status = 200
        self.body: bytes = b'{"items": []}'
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests += 1
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/service-a/metrics"

    def set_items(self, items: list[dict[str, Any]]) -> None:
        self.status, self.body = 200, json.dumps({"items": items}).encode()

    def set_raw(self, body: bytes, status: int = 200) -> None:
        self.status, self.body = status, body

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
