"""A tiny loopback HTTP(S) server for the source tests (stdlib http.server in a thread).

Routes map a path to either a fixed (status, content-type, body) response or a function that
writes the response itself (for slow, streaming or huge bodies).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

Handler = Callable[[BaseHTTPRequestHandler], None]
Route = tuple[int, str, bytes] | Handler


@dataclass
class LocalServer:
    base_url: str
    routes: dict[str, Route]
    requests: list[dict] = field(default_factory=list)  # {"path", "query", "headers"} per request


class _Handler(BaseHTTPRequestHandler):
    server_version = "test"
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def handle(self) -> None:
        try:
            super().handle()
        except (ConnectionResetError, BrokenPipeError):
            pass  # a client that gave up (size limit, timeout) between two keep-alive requests

    def do_GET(self) -> None:
        state: LocalServer = self.server.state  # type: ignore[attr-defined]
        parts = urlsplit(self.path)
        state.requests.append({"path": parts.path, "query": parts.query, "headers": dict(self.headers)})
        route = state.routes.get(parts.path)
        try:
            if route is None:
                self._send(404, "text/plain", b"not found")
            elif callable(route):
                route(self)
            else:
                self._send(*route)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass  # the client gave up (size limit, timeout): expected in these tests

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def start_server(routes: dict[str, Route], ssl_context: ssl.SSLContext | None = None):
    """Start a server on 127.0.0.1:<free port>; returns (LocalServer, stop function)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    scheme = "http"
    if ssl_context is not None:
        httpd.socket = ssl_context.wrap_socket(httpd.socket, server_side=True)
        scheme = "https"
    state = LocalServer(base_url=f"{scheme}://127.0.0.1:{httpd.server_address[1]}", routes=routes)
    httpd.state = state  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()

    def stop() -> None:
        httpd.shutdown()
        httpd.server_close()

    return state, stop


def stream_bytes(total: int, chunk: int = 64 * 1024, declare_length: bool = False) -> Handler:
    """A route that streams `total` bytes of JSON-ish filler, optionally without Content-Length."""

    def handler(req: BaseHTTPRequestHandler) -> None:
        req.send_response(200)
        req.send_header("Content-Type", "application/json")
        if declare_length:
            req.send_header("Content-Length", str(total))
        else:
            req.send_header("Transfer-Encoding", "chunked")
        req.end_headers()
        block = b" " * chunk
        sent = 0
        while sent < total:
            part = block[: min(chunk, total - sent)]
            if declare_length:
                req.wfile.write(part)
            else:
                req.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            sent += len(part)
        if not declare_length:
            req.wfile.write(b"0\r\n\r\n")

    return handler


def slow(seconds: float, body: bytes = b'{"items": []}') -> Handler:
    def handler(req: BaseHTTPRequestHandler) -> None:
        import time

        time.sleep(seconds)
        req._send(200, "application/json", body)  # type: ignore[attr-defined]

    return handler


# ---------------------------------------------------------------- TLS material made on the fly


@dataclass
class TlsMaterial:
    ca_pem: str
    server_context: ssl.SSLContext


def make_tls(tmp_path: Path, hostname_ip: str = "127.0.0.1") -> TlsMaterial:
    """A throwaway CA and a server certificate for `hostname_ip`, signed by it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "prescaler test CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname_ip)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(hostname_ip))]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert_file = tmp_path / "server.crt"
    key_file = tmp_path / "server.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return TlsMaterial(ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM).decode(), server_context=context)
