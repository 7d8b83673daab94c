"""Connection limits for the HTTPS listener: header timeout, head size, connection cap, quiet errors.

The server is reachable without authentication (the TLS handshake and the request line come before
any credential), so every connection must cost bounded memory for a bounded time:

- **Header timeout.** The HTTP parser has no timeout of its own and uvicorn only closes *idle
  keep-alive* connections (after a response), so a client that completes the handshake and then sends
  nothing, or half a request line, held its connection (~280 KB) forever. The protocol arms a timer when the
  connection opens and after every response; unless a complete request head arrives before it fires,
  the connection is closed. (A body still trickling in for a request already answered counts as
  waiting too: no endpoint here reads request bodies.)
- **Head size.** The parser (llhttp, through httptools) streams a request head to callbacks and
  uvicorn appends every piece, without a bound of its own: a head larger than ``max_head_bytes``
  (request line and header fields) is answered 431 and the connection closed. httptools hands a
  header to the protocol only once its value is complete and buffers the pieces itself, so the
  bytes received while a head stays incomplete are counted too: a header value that never ends
  is refused once it passes the limit, not when the client stops.
- **Write timeout.** A client that sends a request and then stops reading leaves the answer in
  the transport's buffer and the request's task waiting for it to drain, forever; once writing has
  been paused for ``write_timeout_seconds`` the connection is closed.
- **Connection cap.** Past ``max_connections`` open connections a new one is closed right after the
  handshake, with one warning line per interval saying so (not one per connection).
- **Handshake timeout.** asyncio's default is 60 s for a client that opens TCP and never finishes
  the TLS handshake; the server passes a shorter one (see ``server.py``).
- **Read buffer.** asyncio's TLS transport allocates a 256 KiB read buffer per connection, most of
  the per-connection cost; :func:`shrink_tls_read_buffer` lowers it (a TLS record is at most 16 KiB,
  so a smaller buffer only means more, smaller reads for large bodies, which this API never gets).
- **Malformed input** is one log line at most per interval: uvicorn logs a warning per bad request
  and, when the request head was valid but the body framing was not (chunked garbage), the app kept
  running for a connection the parser had already failed and died with a ~70-line traceback.

The parser is httptools (llhttp, in C) rather than h11 (pure Python): the bare app of
``bench/serve.py`` over TLS at 32 connections answered 13 747 requests/s against 5 144 with h11, p99
3.6 ms against 13.3 ms (the two side by side in one run, three rounds).
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

log = logging.getLogger("prescaler.serving")


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout_seconds: float = 10.0
    # A client that stops reading while an answer is being written (the transport's buffer full).
    write_timeout_seconds: float = 30.0
    max_connections: int = 1000
    handshake_timeout_seconds: float = 10.0
    tls_read_buffer_bytes: int = 32 * 1024
    log_interval_seconds: float = 10.0
    # Request line plus header fields. The aggregator adds X-Remote-User/-Group and extra headers
    # (a few KiB at most); Go's net/http allows 1 MiB, but nothing that reaches this API needs that.
    max_head_bytes: int = 64 * 1024


class RateLimitedLog:
    """One log line per ``interval`` at most; the next line says how many were left out."""

    def __init__(self, logger: logging.Logger, interval: float) -> None:
        self.logger = logger
        self.interval = interval
        self._next = 0.0
        self._suppressed = 0
        self._lock = threading.Lock()

    def warning(self, message: str, *args: Any) -> bool:
        """Log unless a line went out less than ``interval`` ago; True when it was logged."""
        with self._lock:
            now = time.monotonic()
            if now < self._next:
                self._suppressed += 1
                return False
            suppressed, self._suppressed = self._suppressed, 0
            self._next = now + self.interval
        suffix = f" ({suppressed} more since the last such line)" if suppressed else ""
        self.logger.warning(message + suffix, *args)
        return True


class QuietProtocolErrors(logging.Filter):
    """For uvicorn's per-request warnings about malformed input: rate-limited, one line each.

    uvicorn logs "Invalid HTTP request received." for every request h11 cannot parse; anyone can
    send those, so they pass at most once per interval (with a count of the ones left out).
    """

    MESSAGES = frozenset({"Invalid HTTP request received.", "Unsupported upgrade request."})
    # uvicorn follows an unsupported upgrade with advice on installing a WebSocket library.
    PREFIXES = ("No supported WebSocket library detected.",)

    def __init__(self, interval: float) -> None:
        super().__init__()
        self.interval = interval
        self._next: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.msg if isinstance(record.msg, str) else ""
        if message not in self.MESSAGES:
            if not message.startswith(self.PREFIXES):
                return True
            message = self.PREFIXES[0]
        with self._lock:
            now = time.monotonic()
            if now < self._next.get(message, 0.0):
                self._suppressed[message] = self._suppressed.get(message, 0) + 1
                return False
            suppressed = self._suppressed.pop(message, 0)
            self._next[message] = now + self.interval
        if suppressed:
            record.msg = f"{message} ({suppressed} more since the last such line)"
        record.exc_info = None
        return True


_INSTALLED_FILTERS: dict[str, QuietProtocolErrors] = {}


def quiet_uvicorn_protocol_warnings(interval: float) -> None:
    """Install (once per process) the rate limit on uvicorn's malformed-request warnings."""
    if "uvicorn.error" not in _INSTALLED_FILTERS:
        quiet = QuietProtocolErrors(interval)
        logging.getLogger("uvicorn.error").addFilter(quiet)
        _INSTALLED_FILTERS["uvicorn.error"] = quiet


def shrink_tls_read_buffer(size: int) -> None:
    """Lower asyncio's per-connection TLS read buffer (256 KiB by default) for this process.

    asyncio creates the TLS protocol itself (no hook to pass a size), so the class default is the
    only knob; it is a plain class attribute that only sizes ``recv`` calls.
    """
    protocol_class: Any = getattr(asyncio.sslproto, "SSLProtocol", None)
    if protocol_class is not None and isinstance(getattr(protocol_class, "max_size", None), int):
        protocol_class.max_size = max(16 * 1024 + 512, size)  # at least one full TLS record


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits of the module doc."""

    limits: ClassVar[ConnectionLimits] = ConnectionLimits()
    cap_log: ClassVar[RateLimitedLog] = RateLimitedLog(log, ConnectionLimits().log_interval_seconds)
    timeout_log: ClassVar[RateLimitedLog] = RateLimitedLog(log, ConnectionLimits().log_interval_seconds)

    _refused = False
    _head_timer: asyncio.TimerHandle | None = None
    _write_timer: asyncio.TimerHandle | None = None
    _head_bytes = 0  # of the request head being parsed, as the parser's callbacks report it
    _in_head = False  # the parser has begun a request whose head is not complete yet
    _incomplete_head_bytes = 0  # received while a head stayed incomplete (pieces it buffers itself)
    _head_too_large = False

    # -- connection cap ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.server_state.connections) >= self.limits.max_connections:
            self._refused = True
            peer = transport.get_extra_info("peername")
            self.cap_log.warning(
                "refusing connection from %s: %d connections open, the limit is %d",
                _peer_text(peer),
                len(self.server_state.connections),
                self.limits.max_connections,
            )
            transport.abort()
            return
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        self._cancel_write_timer()
        if self._refused:
            return  # never entered the server's bookkeeping
        super().connection_lost(exc)

    # -- request-head timeout ----------------------------------------------------------------
    def _waiting_for_request_head(self) -> bool:
        """No request is being served and the next one has not been fully received: either its head
        is incomplete, or the client is still sending the body of a request already answered.

        ``self.cycle`` is the newest request whose head arrived (a pipelined one is queued behind
        it); answers go out in order, so when it is complete every earlier one is too."""
        if self.transport.is_closing():
            return False
        cycle = self.cycle
        return cycle is None or cycle.response_complete

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.limits.header_timeout_seconds, self._on_head_timeout)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _on_head_timeout(self) -> None:
        self._head_timer = None
        if self._waiting_for_request_head():
            self.timeout_log.warning(
                "closing connection from %s: no complete request head within %g s",
                _peer_text(self.client),
                self.limits.header_timeout_seconds,
            )
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._in_head and not self.transport.is_closing():
            # Counts a whole read in which the head stayed incomplete; a read starts where the last
            # one ended, so this over-counts only by pipelined requests earlier in the same read.
            self._incomplete_head_bytes += len(data)
            if self._incomplete_head_bytes > self.limits.max_head_bytes:
                self._head_too_large = True
                self.logger.warning("Invalid HTTP request received.")  # rate-limited like the parser's
                self._send_431()
                return
        if self._head_timer is not None and not self._waiting_for_request_head():
            self._cancel_head_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # The next request's head gets the same budget; uvicorn's keep-alive timeout still closes
        # a connection that stays completely silent sooner.
        if self._waiting_for_request_head():
            self._arm_head_timer()

    # -- head size ---------------------------------------------------------------------------
    # The parser calls these for each piece of the head as it arrives; an exception raised here
    # stops it (feed_data raises HttpParserCallbackError, which uvicorn answers with
    # send_400_response, below).
    def on_message_begin(self) -> None:
        self._head_bytes = 0
        self._in_head = True
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._incomplete_head_bytes = 0
        super().on_headers_complete()

    def on_url(self, url: bytes) -> None:
        self._count_head_bytes(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head_bytes(len(name) + len(value) + 4)  # ": " and CRLF
        super().on_header(name, value)

    def _count_head_bytes(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > self.limits.max_head_bytes:
            self._head_too_large = True
            raise ValueError(f"request head larger than {self.limits.max_head_bytes} bytes")

    # -- malformed input ---------------------------------------------------------------------
    def send_400_response(self, msg: str) -> None:
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            # The request head was valid (the app is running for it) but what followed was not:
            # the app must not write into the failed connection; its writes become no-ops.
            cycle.disconnected = True
            cycle.message_event.set()
            if cycle.response_started:
                self.transport.close()
                return
        if self._head_too_large:
            self._send_431()
            return
        super().send_400_response(msg)

    def _send_431(self) -> None:
        message = f"request head larger than {self.limits.max_head_bytes} bytes".encode("ascii")
        self.transport.write(
            b"".join(
                [
                    STATUS_LINE[431],
                    b"content-type: text/plain; charset=utf-8\r\n",
                    b"content-length: " + str(len(message)).encode("ascii") + b"\r\n",
                    b"connection: close\r\n\r\n",
                    message,
                ]
            )
        )
        self.transport.close()

    # -- write timeout -----------------------------------------------------------------------
    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(self.limits.write_timeout_seconds, self._on_write_timeout)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._cancel_write_timer()

    def _cancel_write_timer(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _on_write_timeout(self) -> None:
        self._write_timer = None
        if not self.transport.is_closing():
            self.timeout_log.warning(
                "closing connection from %s: the client read nothing of the answer for %g s",
                _peer_text(self.client),
                self.limits.write_timeout_seconds,
            )
            self.transport.abort()


def _peer_text(peer: Any) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer or "unknown")


def guarded_protocol(base: type[GuardedHttpProtocol], limits: ConnectionLimits) -> type[GuardedHttpProtocol]:
    """A subclass of ``base`` bound to ``limits`` (uvicorn instantiates the class it is given)."""
    return type(
        base.__name__,
        (base,),
        {
            "limits": limits,
            "cap_log": RateLimitedLog(log, limits.log_interval_seconds),
            "timeout_log": RateLimitedLog(log, limits.log_interval_seconds),
        },
    )
