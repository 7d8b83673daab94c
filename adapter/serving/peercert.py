"""uvicorn protocol subclasses that hand the TLS peer certificate to the ASGI app.

uvicorn does not expose the client certificate.  asyncio calls ``connection_made`` only after the
TLS handshake, so the protocol can read the peer certificate once per connection and attach it to
every request scope of that connection, following the ASGI TLS extension
(https://asgi.readthedocs.io/en/latest/specs/tls.html)::

    scope["extensions"]["tls"] = {
        "client_cert_der": bytes | None,     # prescaler addition: leaf certificate, DER (cheap to hash)
        "client_cert_chain": [pem_str],      # ASGI spec: leaf first; Python 3.11 gives only the leaf
        "client_cert_name": str | None,      # RFC 4514 subject of the leaf
        "client_cert_error": None,           # never set: verification is the authenticator's job
        "tls_version": int | None,           # e.g. 0x0304 for TLS 1.3
        "cipher_suite": None,
        "server_cert": None,
    }

The certificate is *not* trusted here: see :mod:`adapter.serving.tlsctx` (handshake accepts any
certificate) and :mod:`adapter.auth.x509` (verification against the client / front-proxy CAs).
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

from adapter.serving.guard import GuardedHttpProtocol

_TLS_VERSIONS = {"TLSv1.2": 0x0303, "TLSv1.3": 0x0304}


def tls_extension(transport: asyncio.BaseTransport) -> dict[str, Any] | None:
    """The ASGI ``tls`` extension dict for a connection, or None for a plain-text transport."""
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return None
    der: bytes | None = ssl_object.getpeercert(binary_form=True)
    chain = [ssl.DER_cert_to_PEM_cert(der)] if der else []
    return {
        "client_cert_der": der,
        "client_cert_chain": chain,
        "client_cert_name": _subject_name(der) if der else None,
        "client_cert_error": None,
        "tls_version": _TLS_VERSIONS.get(ssl_object.version() or ""),
        "cipher_suite": None,
        "server_cert": None,
    }


def _subject_name(der: bytes) -> str | None:
    try:
        from cryptography import x509

        return x509.load_der_x509_certificate(der).subject.rfc4514_string()
    except ValueError:
        return None


class _ScopeTLSApp:
    """Per-connection wrapper that adds the connection's TLS info to each request scope."""

    __slots__ = ("app", "tls")

    def __init__(self, app: Any, tls: dict[str, Any]) -> None:
        self.app = app
        self.tls = tls

    def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        extensions = scope.get("extensions")
        if extensions is None:
            scope["extensions"] = {"tls": self.tls}
        else:
            extensions["tls"] = self.tls
        return self.app(scope, receive, send)


class _PeerCertMixin:
    app: Any

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)  # type: ignore[misc]
        if getattr(self, "_refused", False):
            return
        tls = tls_extension(transport)
        if tls is not None:
            self.app = _ScopeTLSApp(self.app, tls)


class PeerCertHttpProtocol(_PeerCertMixin, GuardedHttpProtocol):  # type: ignore[misc]
    """HTTP/1.1 protocol exposing the TLS peer certificate, with the connection limits of
    :mod:`adapter.serving.guard`."""


DEFAULT_PROTOCOL: type[GuardedHttpProtocol] = PeerCertHttpProtocol
