"""Connection limits on the real HTTPS listener: request-head and handshake timeouts, connection cap,
quiet malformed input, TLS 1.2 cipher suites, and `serve --secure-port 0`. Real TLS sockets only."""

from __future__ import annotations

import asyncio.sslproto
import datetime
import logging
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from adapter.serving.guard import ConnectionLimits, RateLimitedLog
from adapter.serving.server import ServerThread, ServingOptions

ROOT = Path(__file__).resolve().parents[2]


async def ok_app(scope, receive, send):  # type: ignore[no-untyped-def]
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def _options(**limits: float) -> ServingOptions:
    options = ServingOptions(bind_address="127.0.0.1", secure_port=0)
    options.limits = ConnectionLimits(**{"header_timeout_seconds": 0.5, **limits})  # type: ignore[arg-type]
    return options


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with ServerThread(ok_app, _options()) as srv:
        yield srv


def _client_ctx(max_tls12: bool = False, ciphers: str | None = None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if max_tls12:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    if ciphers:
        ctx.set_ciphers(ciphers)
    return ctx


def _tls(port: int, ctx: ssl.SSLContext | None = None) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    return (ctx or _client_ctx()).wrap_socket(raw, server_hostname="localhost")


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """True when the server closes `sock` (EOF or reset) within `seconds`; reads and drops data."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            if sock.recv(4096) == b"":
                return True
        except TimeoutError:
            return False
        except (ssl.SSLError, ConnectionError):
            return True
    return False


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if not any(seen is record for seen in self.records):  # seen once per logger it passed
            self.records.append(record)


@pytest.fixture
def records() -> Iterator[_Records]:
    handler = _Records()
    # With uvicorn's own logging config its loggers stop at "uvicorn": listen there too.
    loggers = [logging.getLogger(name) for name in ("", "uvicorn")]
    for logger in loggers:
        logger.addHandler(handler)
    previous = logging.getLogger("prescaler").level
    logging.getLogger("prescaler").setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logging.getLogger("prescaler").setLevel(previous)
        for logger in loggers:
            logger.removeHandler(handler)


# ------------------------------------------------------------------ request-head timeout


def test_silent_handshaken_connection_is_closed_after_the_header_timeout(server: ServerThread) -> None:
    with _tls(server.port) as conn:
        assert _closed_within(conn, 10), "an idle TLS connection must not stay open"


def test_partial_request_line_is_closed_after_the_header_timeout(server: ServerThread) -> None:
    with _tls(server.port) as conn:
        conn.sendall(b"GET /apis/external.metrics")
        time.sleep(0.2)
        conn.sendall(b".k8s.io")  # trickling bytes does not extend the deadline
        assert _closed_within(conn, 10)


def test_partial_headers_after_a_keep_alive_response_are_closed(server: ServerThread) -> None:
    with _tls(server.port) as conn:
        conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        conn.settimeout(5)
        assert conn.recv(4096).startswith(b"HTTP/1.1 200")
        conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # the head of the next request never ends
        assert _closed_within(conn, 10)


def test_a_body_trickling_in_after_the_answer_is_closed(server: ServerThread) -> None:
    with _tls(server.port) as conn:
        conn.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nabc")
        conn.settimeout(5)
        assert conn.recv(4096).startswith(b"HTTP/1.1 200")  # ok_app answers without reading the body
        deadline = time.monotonic() + 10
        closed = False
        while not closed and time.monotonic() < deadline:
            try:
                conn.sendall(b"x")  # one byte at a time, each well within uvicorn's keep-alive timeout
            except (ssl.SSLError, OSError):
                closed = True
                break
            closed = _closed_within(conn, 0.2)
        assert closed


def test_a_client_that_stops_reading_the_answer_is_closed_after_the_write_timeout() -> None:
    chunk, chunks = b"x" * 65536, 256  # 16 MiB: far more than the socket buffers hold
    finished = threading.Event()

    async def big_app(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", str(len(chunk) * chunks).encode())],
            }
        )
        for _ in range(chunks):  # waits for the transport to drain while the client does not read
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        finished.set()  # reached once the connection is gone (sends become no-ops) or all was read

    with ServerThread(big_app, _options(write_timeout_seconds=0.5, header_timeout_seconds=30)) as srv:
        raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        raw.settimeout(5)
        raw.connect(("127.0.0.1", srv.port))
        with _client_ctx().wrap_socket(raw, server_hostname="localhost") as conn:
            conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # and never read
            assert finished.wait(15), "the request stayed blocked on a client that does not read"
            received = 0
            conn.settimeout(5)
            try:
                while data := conn.recv(65536):
                    received += len(data)
            except (ssl.SSLError, ConnectionError):
                pass
            assert received < len(chunk) * chunks  # the server gave up and closed the connection


def test_complete_requests_are_answered_on_a_kept_alive_connection(server: ServerThread) -> None:
    with httpx.Client(verify=False, timeout=5) as client:
        for _ in range(3):
            response = client.get(f"https://127.0.0.1:{server.port}/")
            assert response.status_code == 200 and response.text == "ok"
            time.sleep(0.3)  # < keep-alive timeout; the head timer restarts after each response


def test_tcp_connection_without_a_tls_handshake_is_closed_after_the_handshake_timeout() -> None:
    with (
        ServerThread(ok_app, _options(handshake_timeout_seconds=0.5)) as srv,
        socket.create_connection(("127.0.0.1", srv.port), timeout=5) as raw,
    ):
        assert _closed_within(raw, 10), "asyncio's default would hold it for 60 s"


def test_tls_read_buffer_is_shrunk_while_serving(server: ServerThread) -> None:
    # 256 KiB per connection in asyncio's default; this is most of an idle connection's memory.
    assert asyncio.sslproto.SSLProtocol.max_size <= 64 * 1024


# ------------------------------------------------------------------ connection cap


def test_connections_beyond_the_cap_are_refused_with_one_log_line(records: _Records) -> None:
    with ServerThread(ok_app, _options(max_connections=2, header_timeout_seconds=30, log_interval_seconds=600)) as srv:
        kept = [_tls(srv.port), _tls(srv.port)]
        try:
            refused = [_tls(srv.port) for _ in range(3)]
            assert all(_closed_within(conn, 5) for conn in refused)
            assert not any(_closed_within(conn, 0.3) for conn in kept)
            lines = [r.getMessage() for r in records.records if "refusing connection" in r.getMessage()]
            assert len(lines) == 1, lines  # rate-limited: one line per interval, not per connection
            assert "the limit is 2" in lines[0]
            for conn in refused:
                conn.close()
        finally:
            for conn in kept:
                conn.close()
        # Below the cap again: served normally.
        deadline = time.monotonic() + 5
        while True:
            try:
                assert httpx.get(f"https://127.0.0.1:{srv.port}/", verify=False, timeout=2).status_code == 200
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def test_rate_limited_log_counts_what_it_left_out(records: _Records) -> None:
    limited = RateLimitedLog(logging.getLogger("prescaler.test"), interval=60)
    assert limited.warning("first %s", 1)
    assert not limited.warning("second %s", 2)
    assert not limited.warning("third %s", 3)
    limited._next = 0.0  # the interval has passed
    assert limited.warning("fourth %s", 4)
    lines = [r.getMessage() for r in records.records if r.name == "prescaler.test"]
    assert lines == ["first 1", "fourth 4 (2 more since the last such line)"]


# ------------------------------------------------------------------ malformed input


@pytest.mark.parametrize(
    "garbage",
    [
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nnot-hex\r\n",  # valid head, bad body
        b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n\r\n",
        b"\x01\x02 garbage\r\n\r\n",
    ],
)
def test_malformed_requests_get_400_and_at_most_one_short_log_line(
    server: ServerThread, records: _Records, garbage: bytes
) -> None:
    for _ in range(5):
        with _tls(server.port) as conn:
            conn.sendall(garbage)
            conn.settimeout(5)
            assert conn.recv(4096).startswith(b"HTTP/1.1 400")
    time.sleep(0.3)  # let the app tasks of those connections finish (they used to raise here)
    relevant = [r for r in records.records if r.levelno >= logging.WARNING]
    assert len(relevant) <= 1, [r.getMessage() for r in relevant]
    assert all(r.exc_info is None for r in relevant)


def _read_until_closed(conn: ssl.SSLSocket) -> bytes:
    conn.settimeout(5)
    received = b""
    try:
        while chunk := conn.recv(65536):
            received += chunk
    except (ssl.SSLError, ConnectionError):
        pass
    return received


@pytest.mark.parametrize("where", ["url", "one header", "many headers"])
def test_a_request_head_over_the_limit_gets_431_and_the_connection_closes(where: str) -> None:
    limit = 4096
    heads = {
        "url": b"GET /" + b"a" * 6000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        "one header": b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 6000 + b"\r\n\r\n",
        "many headers": b"GET / HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(800)) + b"\r\n",
    }
    with ServerThread(ok_app, _options(max_head_bytes=limit)) as srv, _tls(srv.port) as conn:
        conn.sendall(heads[where])
        answer = _read_until_closed(conn)
    assert answer.startswith(b"HTTP/1.1 431"), answer[:80]
    assert b"request head larger than 4096 bytes" in answer
    assert b"200 OK" not in answer  # the app never ran for it


def test_a_head_trickled_in_small_pieces_is_still_counted_whole() -> None:
    with ServerThread(ok_app, _options(max_head_bytes=4096, header_timeout_seconds=10)) as srv, _tls(srv.port) as conn:
        conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        try:
            for index in range(400):  # 400 x ~20 bytes, each its own TLS record
                conn.sendall(b"X-Header-%03d: value\r\n" % index)
            conn.sendall(b"\r\n")
        except (ssl.SSLError, ConnectionError):
            pass  # the server answered 431 and closed while the rest was still being sent
        answer = _read_until_closed(conn)
    assert answer.startswith(b"HTTP/1.1 431"), answer[:80]


def test_a_header_value_that_never_ends_is_refused_at_the_limit_not_when_the_client_stops() -> None:
    # httptools buffers an unfinished header value itself and reports it only when it ends: without
    # counting the bytes of an incomplete head, this client could fill the server's memory.
    with ServerThread(ok_app, _options(max_head_bytes=4096, header_timeout_seconds=30)) as srv, _tls(srv.port) as conn:
        conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Endless: ")
        sent = 0
        try:
            while sent < 16 * 1024 * 1024:  # far past the limit, and past what socket buffers hold
                conn.sendall(b"v" * 1024)
                sent += 1024
        except (ssl.SSLError, ConnectionError):
            pass
        answer = _read_until_closed(conn)
    # Only the count of an incomplete head answers 431 here: without it the server would wait for the
    # header to end, and its header timeout aborts the connection with no answer at all. How much the
    # client got to send is no measure of that: the loopback's socket buffers took over 1 MiB while
    # the server was slow to run (a loaded machine), after it had already refused the head.
    assert sent < 16 * 1024 * 1024, "the client sent everything: the server never closed the connection"
    assert answer.startswith(b"HTTP/1.1 431"), answer[:80]
    assert b"request head larger than 4096 bytes" in answer


def test_a_head_just_under_the_limit_is_answered() -> None:
    with ServerThread(ok_app, _options(max_head_bytes=4096)) as srv, _tls(srv.port) as conn:
        conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 3900 + b"\r\n\r\n")
        conn.settimeout(5)
        assert conn.recv(4096).startswith(b"HTTP/1.1 200")


def test_pipelined_requests_are_all_answered_in_order(server: ServerThread) -> None:
    with _tls(server.port) as conn:
        conn.sendall(
            b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\n" * 5 + b"GET /6 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        answer = _read_until_closed(conn)
    assert answer.count(b"HTTP/1.1 200") == 6


def test_an_upgrade_request_is_answered_as_plain_http_with_one_quiet_log_line(
    server: ServerThread, records: _Records
) -> None:
    upgrade = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
    for _ in range(5):
        with _tls(server.port) as conn:
            conn.sendall(upgrade)
            conn.settimeout(5)
            assert conn.recv(4096).startswith(b"HTTP/1.1 200")
    warnings = [r.getMessage() for r in records.records if r.levelno >= logging.WARNING]
    # "Unsupported upgrade request." and uvicorn's advice line, each at most once per interval
    assert len(warnings) <= 2, warnings


# ------------------------------------------------------------------ TLS suites


def _rsa_cert(directory: Path) -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "rsa.crt", directory / "rsa.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return str(cert_file), str(key_file)


def _handshake(port: int, ciphers: str) -> str | None:
    """The negotiated TLS 1.2 cipher, or None when the server refused the handshake."""
    try:
        with _tls(port, _client_ctx(max_tls12=True, ciphers=ciphers)) as conn:
            cipher = conn.cipher()
            return cipher[0] if cipher else None
    except ssl.SSLError:
        return None


def test_tls12_offers_only_ecdhe_aead_suites_with_an_rsa_certificate(tmp_path: Path) -> None:
    options = _options()
    options.tls_cert_file, options.tls_private_key_file = _rsa_cert(tmp_path)
    with ServerThread(ok_app, options) as srv:
        assert _handshake(srv.port, "ECDHE-RSA-AES128-GCM-SHA256") == "ECDHE-RSA-AES128-GCM-SHA256"
        assert _handshake(srv.port, "ECDHE-RSA-CHACHA20-POLY1305") == "ECDHE-RSA-CHACHA20-POLY1305"
        for cbc_or_static in (
            "AES128-SHA256",
            "AES256-SHA256",
            "AES128-GCM-SHA256",
            "ECDHE-RSA-AES128-SHA256",
            "ECDHE-RSA-AES256-SHA384",
            "ECDHE-RSA-AES128-SHA",
        ):
            assert _handshake(srv.port, cbc_or_static) is None, cbc_or_static


def test_tls12_with_the_generated_ecdsa_certificate(server: ServerThread) -> None:
    assert _handshake(server.port, "ECDHE-ECDSA-AES128-GCM-SHA256") == "ECDHE-ECDSA-AES128-GCM-SHA256"
    assert _handshake(server.port, "ECDHE-ECDSA-AES256-SHA384") is None
    assert _handshake(server.port, "ECDHE-ECDSA-AES128-SHA256") is None


def test_tls13_still_works(server: ServerThread) -> None:
    ctx = _client_ctx()
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    with _tls(server.port, ctx) as conn:
        assert conn.version() == "TLSv1.3"


# ------------------------------------------------------------------ serve --secure-port 0


def test_serve_on_port_zero_logs_and_writes_the_real_port(tmp_path: Path) -> None:
    manifests = ROOT / "examples" / "local" / "rps.yaml"
    kubeconfig = tmp_path / "kube" / "config"
    log_path = tmp_path / "serve.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "adapter.cli",
                "serve",
                "--manifests",
                str(manifests),
                "--secure-port",
                "0",
                "--bind-address",
                "127.0.0.1",
                "--write-kubeconfig",
                str(kubeconfig),
            ],
            cwd=ROOT,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        deadline = time.monotonic() + 60
        while not kubeconfig.exists() or "serving on" not in log_path.read_text():
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
        config = yaml.safe_load(kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        server_url = cluster["server"]
        port = int(server_url.rsplit(":", 1)[1])
        assert port != 0
        assert f"serving on https://127.0.0.1:{port}" in log_path.read_text()
        verify = ssl.create_default_context(cafile=cluster["certificate-authority"])
        response = httpx.get(f"{server_url}/healthz", verify=verify, timeout=5)
        assert response.status_code == 200
    finally:
        proc.terminate()
        proc.wait(15)


def test_limits_come_from_the_serving_flags() -> None:
    import argparse

    from adapter.serving.server import add_serving_flags, serving_options_from_args

    parser = argparse.ArgumentParser()
    add_serving_flags(parser)
    options = serving_options_from_args(
        parser.parse_args(["--max-connections", "50", "--request-header-timeout", "2.5"])
    )
    assert options.limits.max_connections == 50 and options.limits.header_timeout_seconds == 2.5
    assert serving_options_from_args(parser.parse_args([])).limits == ConnectionLimits()
    for bad in (["--max-connections", "0"], ["--request-header-timeout", "0"]):
        with pytest.raises(ValueError, match=bad[0]):
            serving_options_from_args(parser.parse_args(bad))
