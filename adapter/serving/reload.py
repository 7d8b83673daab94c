"""Live TLS material: serving certificate hot reload and (fallback mode) client CA updates.

The listening socket keeps one *base* SSLContext for its whole life.  Its SNI callback, which
OpenSSL (>= 1.1.1) runs for every ClientHello, with or without a server name, points each new
handshake at the newest context (``ssl_object.context = current``).  Swapping a whole context
rather than mutating the live one means a half-rotated key pair (cert written, key not yet) can
never reach a handshake: a new context is built from both files and installed only once it loads.
Established connections keep the context they handshook with, so nothing is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass

from adapter.serving.tlsctx import build_server_context, deferred_client_verification_supported

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _FileStamp:
    cert: tuple[int, int, int]
    key: tuple[int, int, int]


def _stamp(path: str) -> tuple[int, int, int]:
    st = os.stat(path)
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class LiveTLS:
    """Owns the serving SSLContext and swaps in a new one when the certificate files or CAs change.

    ``cert_file``/``key_file`` None means fixed in-memory material (``cert_pem``/``key_pem``), e.g.
    a generated self-signed certificate.
    """

    def __init__(
        self,
        *,
        cert_file: str | None = None,
        key_file: str | None = None,
        cert_pem: bytes | None = None,
        key_pem: bytes | None = None,
        client_ca_pems: Callable[[], bytes | None] | None = None,
    ) -> None:
        if (cert_file is None) != (key_file is None):
            raise ValueError("--tls-cert-file and --tls-private-key-file must be given together")
        if cert_file is None and (cert_pem is None or key_pem is None):
            raise ValueError("either certificate files or in-memory PEM material is required")
        self.cert_file = cert_file
        self.key_file = key_file
        self._cert_pem = cert_pem
        self._key_pem = key_pem
        self._client_ca_pems = client_ca_pems
        # The CA set matters for the handshake only in fallback mode (see tlsctx).
        self._track_cas = client_ca_pems is not None and not deferred_client_verification_supported()
        self._stamp: _FileStamp | None = None
        self._cas: bytes | None = None
        self.reloads = 0
        self.current = self._build()  # raises for unreadable/mismatched material at start: fail fast
        self.base = self.current
        self.base.sni_callback = self._on_client_hello

    # -- building -----------------------------------------------------------------------------
    def _read_material(self) -> tuple[bytes, bytes]:
        if self.cert_file is None or self.key_file is None:
            assert self._cert_pem is not None and self._key_pem is not None
            return self._cert_pem, self._key_pem
        stamp = _FileStamp(_stamp(self.cert_file), _stamp(self.key_file))
        with open(self.cert_file, "rb") as fh:
            cert = fh.read()
        with open(self.key_file, "rb") as fh:
            key = fh.read()
        self._stamp = stamp
        return cert, key

    def _current_cas(self) -> bytes | None:
        if self._client_ca_pems is None:
            return None
        return self._client_ca_pems()

    def _build(self) -> ssl.SSLContext:
        cert, key = self._read_material()
        cas = self._current_cas() if self._track_cas else None
        ctx = build_server_context(cert, key, cas)
        self._cas = cas
        return ctx

    # -- runtime ------------------------------------------------------------------------------
    def _on_client_hello(self, ssl_object: ssl.SSLObject, server_name: str | None, base: ssl.SSLContext) -> None:
        current = self.current
        if current is not base:
            ssl_object.context = current

    def changed(self) -> bool:
        """Cheap check (two stat calls, one CA callback) whether a rebuild is needed."""
        if self.cert_file is not None and self.key_file is not None:
            try:
                stamp = _FileStamp(_stamp(self.cert_file), _stamp(self.key_file))
            except OSError:
                return False  # mid-rotation (file replaced): keep serving, look again later
            if stamp != self._stamp:
                return True
        return self._track_cas and self._current_cas() != self._cas

    def reload_if_changed(self) -> bool:
        """Rebuild and install a new context if the inputs changed; keep the old one on any error."""
        if not self.changed():
            return False
        try:
            ctx = self._build()
        except (OSError, ssl.SSLError, ValueError) as exc:
            log.warning("TLS material changed but could not be loaded, keeping the previous one: %s", exc)
            return False
        self.current = ctx
        self.reloads += 1
        log.info("TLS serving certificate/CA reloaded (reload #%d)", self.reloads)
        return True

    async def watch(self, interval: float = 1.0) -> None:
        """Poll for changes forever (cancel to stop). Polling also catches Kubernetes Secret
        volume updates, which swap a ``..data`` symlink rather than writing the files."""
        while True:
            await asyncio.sleep(interval)
            self.reload_if_changed()
