"""Client certificate verification against a CA bundle (Go ``x509.Verify`` with ClientAuth usage).

The TLS layer accepts any client certificate (see adapter.serving.tlsctx); trust is decided here,
per CA bundle, which is what lets one connection be checked separately against the front-proxy
(requestheader) CA and the client CA, and lets both bundles rotate at runtime.

Policy, close to Go's crypto/x509 as used by Kubernetes (not the stricter CA/B-Forum web PKI):
- the leaf must chain to a certificate of the bundle and be within its validity period;
- no SAN / AKI needed on the leaf (kubeadm's front-proxy-client has neither SAN nor needs one);
- Extended Key Usage: absent, ``clientAuth`` or ``anyExtendedKeyUsage`` (Go treats absent as any).
Python 3.11's ssl module exposes only the leaf, so intermediates must be in the bundle.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import (
    ClientVerifier,
    Criticality,
    ExtensionPolicy,
    PolicyBuilder,
    Store,
    VerificationError,
)


class CertificateError(Exception):
    """A presented client certificate is not acceptable (results in 401)."""


def _ee_policy() -> ExtensionPolicy:
    policy = ExtensionPolicy.webpki_defaults_ee()
    for ext in (x509.SubjectAlternativeName, x509.AuthorityKeyIdentifier, x509.ExtendedKeyUsage, x509.KeyUsage):
        policy = policy.may_be_present(ext, Criticality.AGNOSTIC, None)
    return policy


def _ca_policy() -> ExtensionPolicy:
    policy = ExtensionPolicy.webpki_defaults_ca()
    for ext in (x509.AuthorityKeyIdentifier, x509.KeyUsage, x509.SubjectAlternativeName):
        policy = policy.may_be_present(ext, Criticality.AGNOSTIC, None)
    return policy


_EE_POLICY = _ee_policy()
_CA_POLICY = _ca_policy()


def load_pem_bundle(pem: bytes, what: str = "CA bundle") -> list[x509.Certificate]:
    """Parse a PEM bundle; a bundle with no certificate is an error (clear message, no traceback)."""
    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        raise ValueError(f"{what}: not a PEM certificate bundle ({exc})") from None
    if not certs:
        raise ValueError(f"{what}: contains no certificate")
    return certs


@dataclass(frozen=True)
class CertIdentity:
    common_name: str
    organizations: tuple[str, ...]


def identity_of(cert: x509.Certificate) -> CertIdentity:
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    orgs = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    return CertIdentity(
        # Go's pkix.Name.FillFromRDNSequence assigns CommonName once per CN attribute, so with
        # several CNs the *last* one is the user name (and what the allowed-names check sees).
        common_name=str(cn[-1].value) if cn else "",
        organizations=tuple(str(o.value) for o in orgs),
    )


def _has_client_auth_usage(cert: x509.Certificate) -> bool:
    try:
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return True
    return ExtendedKeyUsageOID.CLIENT_AUTH in eku or ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE in eku


class CABundle:
    """A trust store for client certificates; immutable (build a new one to rotate)."""

    def __init__(self, pem: bytes, what: str = "client CA", clock: Callable[[], dt.datetime] | None = None):
        self.pem = pem
        self.what = what
        self.certs = load_pem_bundle(pem, what)
        self._store = Store(self.certs)
        self._clock = clock

    def _verifier(self) -> ClientVerifier:
        builder = PolicyBuilder().store(self._store).extension_policies(ca_policy=_CA_POLICY, ee_policy=_EE_POLICY)
        if self._clock is not None:
            builder = builder.time(self._clock())
        return builder.build_client_verifier()

    def verify(self, leaf: x509.Certificate) -> CertIdentity:
        """Raise CertificateError unless ``leaf`` chains to this bundle with client-auth usage."""
        # The handshake accepts any certificate (adapter.serving.tlsctx), so everything below reads
        # attacker-chosen bytes. cryptography parses extensions and names lazily and raises
        # DuplicateExtension (not a ValueError) or ValueError for malformed ones: that must be a 401,
        # not an exception escaping the middleware as a 500.
        try:
            usable = _has_client_auth_usage(leaf)
        except Exception as exc:  # noqa: BLE001 - any parse failure of untrusted input
            raise CertificateError(f"x509: malformed certificate extensions: {exc}") from None
        if not usable:
            raise CertificateError("x509: certificate specifies an incompatible key usage (clientAuth required)")
        try:
            self._verifier().verify(leaf, [])
        except VerificationError as exc:
            raise CertificateError(
                f"x509: certificate signed by unknown authority or not valid now ({self.what}: {exc})"
            ) from None
        except Exception as exc:  # noqa: BLE001 - as above
            raise CertificateError(f"x509: malformed certificate ({self.what}): {exc}") from None
        try:
            return identity_of(leaf)
        except Exception as exc:  # noqa: BLE001 - as above
            raise CertificateError(f"x509: malformed certificate subject: {exc}") from None


def parse_der(der: bytes) -> x509.Certificate:
    try:
        return x509.load_der_x509_certificate(der)
    except ValueError as exc:
        raise CertificateError(f"unparsable client certificate: {exc}") from None
