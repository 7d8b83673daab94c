"""HTTPS serving of an ASGI app with uvicorn: always TLS, peer certs in scope, hot cert reload.

Usage::

    options = ServingOptions(secure_port=6443, tls_cert_file=..., tls_private_key_file=...)
    serve(app, options)                       # blocking, SIGTERM/SIGINT -> graceful shutdown

    await serve_async(app, options, started)  # inside a running loop; cancel the task to stop
    options.bound_port                        # actual port (useful with secure_port=0)

    with ServerThread(app, options) as srv:   # tests / embedding: background thread + own loop
        srv.port, srv.ca_pem

Requests reach the app with ``scope["extensions"]["tls"]`` (see :mod:`adapter.serving.peercert`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from adapter.serving.certs import self_signed
from adapter.serving.guard import (
    ConnectionLimits,
    guarded_protocol,
    quiet_uvicorn_protocol_warnings,
    shrink_tls_read_buffer,
)
from adapter.serving.peercert import DEFAULT_PROTOCOL
from adapter.serving.reload import LiveTLS

log = logging.getLogger(__name__)


@dataclass
class ServingOptions:
    bind_address: str = "0.0.0.0"
    secure_port: int = 6443
    # None -> a self-signed certificate is generated at start (SANs: localhost, 127.0.0.1, tls_sans)
    # and written to a temporary directory (path in ``generated_cert_file``).
    tls_cert_file: str | None = None
    tls_private_key_file: str | None = None
    tls_sans: list[str] = field(default_factory=list)
    # Union of client-ca-file and requestheader-client-ca-file; only needed for the TLS handshake in
    # the fallback mode of adapter.serving.tlsctx (normally client certs are verified in adapter.auth).
    client_ca_pems: Callable[[], bytes | None] | None = None
    log_level: str = "info"
    access_log: bool = False
    reload_interval_seconds: float = 1.0
    graceful_shutdown_seconds: int = 10
    # Header timeout, connection cap, TLS handshake timeout and read buffer (adapter.serving.guard).
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    # Called with (host, port) once the socket is bound, before serving: the real port when
    # secure_port is 0.
    on_listening: Callable[[str, int], None] | None = None
    # Filled in by serve_async:
    bound_port: int | None = field(default=None, init=False)
    generated_cert_file: str | None = field(default=None, init=False)
    live_tls: LiveTLS | None = field(default=None, init=False, repr=False)


def add_serving_flags(parser: argparse.ArgumentParser) -> None:
    """Kubernetes generic-apiserver style serving flags (dest names match ServingOptions)."""
    group = parser.add_argument_group("secure serving")
    group.add_argument("--secure-port", type=int, default=6443, help="HTTPS port (0 = pick a free one)")
    group.add_argument("--bind-address", default="0.0.0.0", help="address to listen on")
    group.add_argument(
        "--tls-cert-file",
        default=None,
        help="serving certificate (PEM, may include intermediates); reloaded when it changes. "
        "Without it a self-signed certificate is generated",
    )
    group.add_argument("--tls-private-key-file", default=None, help="key for --tls-cert-file (PEM)")
    group.add_argument(
        "--tls-san",
        dest="tls_sans",
        action="append",
        default=[],
        help="extra DNS name / IP for the generated self-signed certificate (repeatable)",
    )
    defaults = ConnectionLimits()
    group.add_argument(
        "--max-connections",
        type=int,
        default=defaults.max_connections,
        help="open connections beyond this are closed right after the TLS handshake (each costs ~60 KB)",
    )
    group.add_argument(
        "--request-header-timeout",
        type=float,
        default=defaults.header_timeout_seconds,
        metavar="SECONDS",
        help="close a connection whose request line and headers are not complete within this time",
    )


def serving_options_from_args(args: argparse.Namespace, **overrides: Any) -> ServingOptions:
    opts = ServingOptions(
        bind_address=args.bind_address,
        secure_port=args.secure_port,
        tls_cert_file=args.tls_cert_file,
        tls_private_key_file=args.tls_private_key_file,
        tls_sans=list(args.tls_sans or []),
    )
    defaults = ConnectionLimits()
    max_connections = getattr(args, "max_connections", defaults.max_connections)
    header_timeout = getattr(args, "request_header_timeout", defaults.header_timeout_seconds)
    if max_connections < 1:
        raise ValueError(f"--max-connections must be at least 1, got {max_connections}")
    if not 0 < header_timeout <= 3600:
        raise ValueError(f"--request-header-timeout must be between 0 and 3600 seconds, got {header_timeout:g}")
    opts.limits = dataclasses.replace(defaults, max_connections=max_connections, header_timeout_seconds=header_timeout)
    for key, value in overrides.items():
        setattr(opts, key, value)
    return opts


def _live_tls(options: ServingOptions) -> LiveTLS:
    if options.tls_cert_file or options.tls_private_key_file:
        if not (options.tls_cert_file and options.tls_private_key_file):
            raise ValueError("--tls-cert-file and --tls-private-key-file must be given together")
        return LiveTLS(
            cert_file=options.tls_cert_file,
            key_file=options.tls_private_key_file,
            client_ca_pems=options.client_ca_pems,
        )
    cert_pem, key_pem = self_signed(list(options.tls_sans))
    tmp = tempfile.mkdtemp(prefix="prescaler-selfsigned-")
    cert_path = os.path.join(tmp, "tls.crt")
    with open(cert_path, "wb") as fh:
        fh.write(cert_pem)
    key_path = os.path.join(tmp, "tls.key")
    with os.fdopen(os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as fh:
        fh.write(key_pem)
    options.generated_cert_file = cert_path
    log.warning("no --tls-cert-file given: serving a self-signed certificate (%s)", cert_path)
    return LiveTLS(cert_pem=cert_pem, key_pem=key_pem, client_ca_pems=options.client_ca_pems)


def _bind(options: ServingOptions) -> socket.socket:
    family = socket.AF_INET6 if ":" in options.bind_address else socket.AF_INET
    # proto must be IPPROTO_TCP: asyncio only sets TCP_NODELAY on accepted sockets whose proto says
    # TCP, and without it Nagle + delayed ACK add ~40 ms to every response written in two parts.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    try:
        sock.bind((options.bind_address, options.secure_port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    """uvicorn.Server whose listener uses our TLS handshake timeout.

    uvicorn calls ``loop.create_server`` without ``ssl_handshake_timeout``, so asyncio's default
    (60 s) would let a client that opens TCP and never finishes the handshake hold a connection
    that long. The keyword is supplied for the duration of ``startup`` only, on this loop only.
    """

    def __init__(self, config: uvicorn.Config, handshake_timeout: float) -> None:
        super().__init__(config)
        self.handshake_timeout = handshake_timeout

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        loop = asyncio.get_running_loop()
        create_server = loop.create_server

        async def create_server_with_timeout(*args: Any, **kwargs: Any) -> asyncio.Server:
            if kwargs.get("ssl") is not None:
                kwargs.setdefault("ssl_handshake_timeout", self.handshake_timeout)
            return await create_server(*args, **kwargs)

        try:
            loop.create_server = create_server_with_timeout  # type: ignore[method-assign]
        except AttributeError:  # a loop without instance attributes (uvloop): keep its own default
            log.debug("cannot set the TLS handshake timeout on %r", loop)
            await super().startup(sockets)
            return
        try:
            await super().startup(sockets)
        finally:
            del loop.create_server  # back to the class's method


def _uvicorn_server(app: Any, options: ServingOptions, live: LiveTLS) -> uvicorn.Server:
    limits = options.limits
    config = uvicorn.Config(
        app,
        http=guarded_protocol(DEFAULT_PROTOCOL, limits),
        ws="none",  # no endpoint speaks WebSocket: an upgrade request is answered as plain HTTP
        ssl_context_factory=lambda _config, _default: live.base,
        log_level=options.log_level,
        log_config=None,  # uvicorn's records go through the process's handler (adapter/logs.py)
        access_log=options.access_log,
        proxy_headers=False,  # X-Forwarded-* from the aggregator must not rewrite the client address
        server_header=False,
        timeout_graceful_shutdown=max(1, round(options.graceful_shutdown_seconds)),
        lifespan="auto",
    )
    return _Server(config, limits.handshake_timeout_seconds)


async def serve_async(app: Any, options: ServingOptions, started: asyncio.Event | None = None) -> None:
    """Serve until SIGTERM/SIGINT (main thread) or until this coroutine is cancelled."""
    live = _live_tls(options)
    options.live_tls = live
    sock = _bind(options)
    options.bound_port = sock.getsockname()[1]
    shrink_tls_read_buffer(options.limits.tls_read_buffer_bytes)
    quiet_uvicorn_protocol_warnings(options.limits.log_interval_seconds)
    server = _uvicorn_server(app, options, live)
    if options.on_listening is not None:
        # Before the first request can arrive, so whoever waits for the server finds the file.
        try:
            options.on_listening(options.bind_address, options.bound_port)
        except BaseException:
            sock.close()
            raise
    serve_task = asyncio.ensure_future(server.serve(sockets=[sock]))
    watch_task = asyncio.ensure_future(live.watch(options.reload_interval_seconds))
    try:
        while not server.started and not serve_task.done():
            await asyncio.sleep(0.01)
        if server.started:
            host = f"[{options.bind_address}]" if ":" in options.bind_address else options.bind_address
            log.info("serving on https://%s:%d", host, options.bound_port)
        if started is not None:
            started.set()
        await asyncio.shield(serve_task)
    except BaseException:
        server.should_exit = True
        with contextlib.suppress(BaseException):
            await serve_task
        raise
    finally:
        watch_task.cancel()
        with contextlib.suppress(BaseException):
            await watch_task
        sock.close()


def serve(app: Any, options: ServingOptions) -> None:
    """Blocking entry point for the CLI."""
    asyncio.run(serve_async(app, options))


class ServerThread:
    """Run serve_async in a background thread with its own event loop (tests, benchmarks)."""

    def __init__(self, app: Any, options: ServingOptions, start_timeout: float = 20.0) -> None:
        self.app = app
        self.options = options
        self.start_timeout = start_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def port(self) -> int:
        assert self.options.bound_port is not None
        return self.options.bound_port

    @property
    def ca_pem(self) -> bytes | None:
        """PEM that verifies the serving certificate when it was generated (self-signed)."""
        if self.options.generated_cert_file is None:
            return None
        with open(self.options.generated_cert_file, "rb") as fh:
            return fh.read()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        started = asyncio.Event()

        async def main() -> None:
            self._task = asyncio.ensure_future(serve_async(self.app, self.options, started))
            waiter = asyncio.ensure_future(started.wait())
            await asyncio.wait({self._task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            self._ready.set()
            waiter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

        try:
            loop.run_until_complete(main())
        except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
            self._error = exc
            self._ready.set()
        finally:
            loop.close()

    def start(self) -> ServerThread:
        self._thread = threading.Thread(target=self._run, name="prescaler-https", daemon=True)
        self._thread.start()
        if not self._ready.wait(self.start_timeout):
            raise TimeoutError("HTTPS server did not start")
        if self._error is not None:
            raise self._error
        if self._task is not None and self._task.done():
            self._task.result()
        return self

    def stop(self) -> None:
        if self._loop is not None and self._task is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._task.cancel)
        if self._thread is not None:
            self._thread.join(timeout=15)

    def __enter__(self) -> ServerThread:  # noqa: PYI034 - not subclassed
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
