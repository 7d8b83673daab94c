"""A second external-metrics adapter for tests: real TLS, bearer-token (or client-certificate) auth, the
same wire format as prescaler, and switchable misbehaviour.

    up = UpstreamServer(pki, names=["keda-metric"]).start()
    up.mode = "hang"        # ok | hang | drip | error500 | garbage | huge | huge_chunked | reset
    up.value = "57"         # what "ok" answers for every metric (default "42")
    up.stop()               # "down": nothing listens on the port any more

With ``front_proxy_ca_file`` it also accepts, instead of a token, a client certificate signed by that CA
(as a real adapter accepts the aggregator's front-proxy certificate), so it can back the APIService itself.
It records every request (method, path with query, headers) so tests can check what prescaler sent.
A hanging request waits on `release` (bounded), so a test never leaves a thread blocked for long.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

V1 = "/apis/external.metrics.k8s.io/v1beta1"
TOKEN = "upstream-token-1"


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]


def status(code: int, reason: str, message: str) -> bytes:
    return json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        }
    ).encode()


class UpstreamServer:
    def __init__(
        self,
        pki: Any,
        names: list[str] | None = None,
        *,
        client_ca_file: str | None = None,
        tokens: set[str] | None = None,
        max_hang: float = 20.0,
        pki_dir: Path | None = None,
        front_proxy_ca_file: str | None = None,
    ):
        self.names = list(names or ["keda-metric"])
        self.mode = "ok"
        self.value = "42"
        self.tokens = set(tokens or {TOKEN})
        self.require_client_cert = client_ca_file is not None
        self.seen: list[Seen] = []
        self.release = threading.Event()
        self.max_hang = max_hang
        self.huge_bytes = 20 * 1024 * 1024
        self.garbage_content_type = "text/plain; charset=weird"
        self._lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.connections = 0
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        if pki_dir is not None:  # the files of a TestPKI made in another process
            ctx.load_cert_chain(str(pki_dir / "tls.crt"), str(pki_dir / "tls.key"))
        else:
            ctx.load_cert_chain(str(pki.serving_cert_file), str(pki.serving_key_file))
        if client_ca_file:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(client_ca_file)
        elif front_proxy_ca_file:  # a certificate is optional, but one that is sent must verify
            ctx.verify_mode = ssl.CERT_OPTIONAL
            ctx.load_verify_locations(front_proxy_ca_file)
        self._ssl = ctx
        self._server: ThreadingHTTPServer | None = None
        self._sockets: list[Any] = []
        self.port = 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> UpstreamServer:
        owner = self

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def get_request(self) -> Any:
                sock, addr = super().get_request()
                # Headers and body go out in two writes; without this, Nagle + delayed ACK add 40 ms.
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                wrapped = owner._ssl.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                with owner._lock:
                    owner.connections += 1
                    owner._sockets.append(wrapped)
                return wrapped, addr

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # resets and TLS failures are part of the tests

        class Handler(_Handler):
            server_owner = owner

        self._server = Server(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, name="upstream-server", daemon=True).start()
        return self

    def stop(self) -> None:
        self.release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:  # down means down: kept-alive connections die too
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def requests_for(self, fragment: str) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if fragment in s.path]


class _Handler(BaseHTTPRequestHandler):
    server_owner: UpstreamServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        try:
            self.connection.do_handshake()  # type: ignore[attr-defined]
        except (ssl.SSLError, OSError):
            self.close_connection = True
            self.rfile = self.wfile = None  # type: ignore[assignment]

    def handle(self) -> None:
        if self.rfile is None:
            return
        super().handle()

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        up = self.server_owner
        with up._lock:
            up.seen.append(Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
            up.in_flight += 1
            up.max_in_flight = max(up.max_in_flight, up.in_flight)
        try:
            self._serve(up)
        finally:
            with up._lock:
                up.in_flight -= 1

    def _serve(self, up: UpstreamServer) -> None:
        if not up.require_client_cert and not self.connection.getpeercert():  # type: ignore[attr-defined]
            auth = self.headers.get("Authorization", "")
            if not auth.startswith("Bearer ") or auth[7:] not in up.tokens:
                return self._send(401, status(401, "Unauthorized", "Unauthorized"))
        mode = up.mode
        if mode == "hang":
            up.release.wait(up.max_hang)
        elif mode == "reset":
            self.connection.close()
            self.close_connection = True
            return None
        elif mode == "error500":
            return self._send(500, status(500, "InternalError", "upstream exploded on purpose"))
        elif mode == "garbage":
            return self._send(200, b"\x00not json {{{", up.garbage_content_type)
        elif mode == "huge":
            return self._send(200, b"[" + b" " * up.huge_bytes + b"]")
        elif mode == "drip":  # headers at once, then a byte every 100 ms: each read is quick, the whole is not
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "100000")
            self.end_headers()
            try:
                for _ in range(int(up.max_hang * 10)):
                    if up.release.wait(0.1):
                        break
                    self.wfile.write(b" ")
                    self.wfile.flush()
            except OSError:
                pass
            self.close_connection = True
            return None
        elif mode == "huge_chunked":  # no Content-Length: the limit must hold while streaming
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = b" " * 65536
            try:
                for _ in range(up.huge_bytes // len(chunk)):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass
            self.close_connection = True
            return None
        url = urlsplit(self.path)
        if url.path.rstrip("/") == V1:
            resources = [
                {"name": n, "singularName": "", "namespaced": True, "kind": "ExternalMetricValueList", "verbs": ["get"]}
                for n in up.names
            ]
            return self._send(
                200,
                json.dumps(
                    {
                        "kind": "APIResourceList",
                        "apiVersion": "v1",
                        "groupVersion": "external.metrics.k8s.io/v1beta1",
                        "resources": resources,
                    }
                ).encode(),
            )
        parts = url.path[len(V1) + 1 :].split("/") if url.path.startswith(V1 + "/") else []
        if len(parts) != 3 or parts[0] != "namespaces":
            return self._send(404, status(404, "NotFound", "the server could not find the requested resource"))
        metric = parts[2]
        if metric not in up.names:
            return self._send(404, status(404, "NotFound", f"upstream: no metric {metric}"))
        selector = parse_qs(url.query).get("labelSelector", [""])[0]
        body = {
            "kind": "ExternalMetricValueList",
            "apiVersion": "external.metrics.k8s.io/v1beta1",
            "metadata": {},
            "items": [
                {
                    "metricName": metric,
                    "metricLabels": {"selector": selector},
                    "timestamp": "2026-01-01T00:00:00Z",
                    "value": up.value,
                }
            ],
        }
        return self._send(200, json.dumps(body).encode())

    def _send(self, code: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            try:
                self.wfile.write(body)
            except OSError:
                pass
