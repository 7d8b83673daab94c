"""Server SSLContext construction: request (but do not enforce) client certificates.

Kubernetes' generic apiserver asks TLS clients for a certificate without verifying it in the
handshake (Go ``tls.RequestClientCert``); the *authenticator* verifies it later against the current
client CA bundles and answers 401 when it does not chain (docs/api.md §6.2: KEDA#6100 "certificate signed
by unknown authority" surfaced as 401).  Python's ``ssl`` cannot express that: with ``CERT_OPTIONAL``
OpenSSL aborts the handshake for an unverifiable certificate, and with ``CERT_NONE`` it never asks
for one.  The missing knob is OpenSSL's verify callback, which we install through ctypes on the
context's ``SSL_CTX`` with a callback that accepts every certificate.  The peer certificate is then
available via ``getpeercert(binary_form=True)`` and all trust decisions happen in
:mod:`adapter.auth.x509`, which also makes client-CA rotation a pure Python matter (no TLS context
rebuild needed).

If the ctypes route is unavailable (unexpected CPython/OpenSSL layout: checked at runtime, never
guessed), :func:`build_server_context` falls back to loading the client CA bundle into the context,
i.e. OpenSSL verifies during the handshake and a certificate from a foreign CA fails the handshake
instead of getting a 401.
"""

from __future__ import annotations

import ctypes
import logging
import os
import ssl
import tempfile

log = logging.getLogger(__name__)

# TLS 1.2 suites: ECDHE key exchange with AEAD ciphers only, the set Kubernetes components accept by
# default (Go's secure cipher suites); no CBC, no static RSA key exchange. TLS 1.3 suites are all AEAD
# and are not affected by this list.
TLS12_CIPHERS = ":".join(
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "ECDHE-RSA-AES128-GCM-SHA256",
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "ECDHE-RSA-AES256-GCM-SHA384",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "ECDHE-RSA-CHACHA20-POLY1305",
    )
)

_VERIFY_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p)


def _accept_any(preverify_ok: int, store_ctx: int) -> int:
    return 1


# Module-level reference keeps the C thunk alive for as long as any SSL_CTX may call it.
_ACCEPT_ANY_THUNK = _VERIFY_CB(_accept_any)
_libssl: ctypes.CDLL | None = None
_probe_result: bool | None = None


def _load_libssl() -> ctypes.CDLL | None:
    """The libssl that ``_ssl`` itself is linked against (dlsym on its handle searches dependencies)."""
    global _libssl
    if _libssl is None:
        try:
            import _ssl

            lib = ctypes.CDLL(_ssl.__file__)
            lib.SSL_CTX_set_verify.argtypes = [ctypes.c_void_p, ctypes.c_int, _VERIFY_CB]
            lib.SSL_CTX_set_verify.restype = None
            lib.SSL_CTX_get_verify_mode.argtypes = [ctypes.c_void_p]
            lib.SSL_CTX_get_verify_mode.restype = ctypes.c_int
            lib.SSL_CTX_get_options.argtypes = [ctypes.c_void_p]
            lib.SSL_CTX_get_options.restype = ctypes.c_uint64
            _libssl = lib
        except (OSError, AttributeError) as exc:
            log.debug("libssl symbols unavailable through ctypes: %s", exc)
            return None
    return _libssl


def _ssl_ctx_pointer(ctx: ssl.SSLContext) -> int | None:
    """Address of the ``SSL_CTX*`` inside CPython's PySSLContext (first field after PyObject_HEAD).

    Returns None unless two independent read-backs (verify mode and options) agree with what Python
    reports for this very context, so a different struct layout can never be written through.
    """
    lib = _load_libssl()
    if lib is None:
        return None
    pointer = ctypes.c_void_p.from_address(id(ctx) + object.__basicsize__).value
    if not pointer:
        return None
    try:
        if lib.SSL_CTX_get_verify_mode(pointer) != int(ctx.verify_mode):
            return None
        if lib.SSL_CTX_get_options(pointer) != int(ctx.options):
            return None
    except Exception:  # noqa: BLE001 - any failure means "layout not as expected"
        return None
    return pointer


def _install_accept_any(ctx: ssl.SSLContext) -> bool:
    pointer = _ssl_ctx_pointer(ctx)
    lib = _load_libssl()
    if pointer is None or lib is None:
        return False
    lib.SSL_CTX_set_verify(pointer, ssl.CERT_OPTIONAL.value, _ACCEPT_ANY_THUNK)
    return True


def deferred_client_verification_supported() -> bool:
    """True when client certificates can be requested without handshake-time verification."""
    global _probe_result
    if _probe_result is None:
        probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        probe.verify_mode = ssl.CERT_OPTIONAL
        _probe_result = _install_accept_any(probe)
        if not _probe_result:
            log.warning(
                "cannot defer client certificate verification (ctypes/libssl probe failed); "
                "client certificates from unknown CAs will fail the TLS handshake instead of getting 401"
            )
    return _probe_result


def build_server_context(cert_pem: bytes, key_pem: bytes, client_ca_pem: bytes | None) -> ssl.SSLContext:
    """A TLS server context (TLS >= 1.2) serving ``cert_pem`` and requesting client certificates.

    ``client_ca_pem`` is used only in the fallback mode (see module docstring).  Raises ``ssl.SSLError``
    / ``ValueError`` for a certificate that does not match its key.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(TLS12_CIPHERS)
    ctx.set_alpn_protocols(["http/1.1"])
    _load_chain_from_memory(ctx, cert_pem, key_pem)
    if deferred_client_verification_supported():
        ctx.verify_mode = ssl.CERT_OPTIONAL
        if not _install_accept_any(ctx):  # pragma: no cover - the probe above succeeded
            raise RuntimeError("installing the TLS verify callback failed")
    elif client_ca_pem:
        ctx.load_verify_locations(cadata=client_ca_pem.decode("ascii", errors="replace"))
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def _load_chain_from_memory(ctx: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """``load_cert_chain`` needs files; use a private temp dir that is removed right away."""
    with tempfile.TemporaryDirectory(prefix="prescaler-tls-") as tmp:
        cert_path = os.path.join(tmp, "tls.crt")
        key_path = os.path.join(tmp, "tls.key")
        with open(cert_path, "wb") as fh:
            fh.write(cert_pem)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(key_pem)
        ctx.load_cert_chain(cert_path, key_path)
