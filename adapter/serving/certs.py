"""Certificate factory: self-signed serving certs, a small CA, serving and client certs signed by it.

Everything is ECDSA P-256 + SHA-256 (small, fast to generate, accepted by Go's crypto/tls and OpenSSL).
All functions return PEM bytes ``(cert_pem, key_pem)``; keys are unencrypted PKCS#8.

SAN handling: each entry of ``sans`` that parses as an IP address becomes an IPAddress SAN, everything
else a DNSName SAN.  kube-aggregator dials ``<service>.<namespace>.svc`` (docs/api.md §7), so serving
certificates for a cluster need that DNS name.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterable, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Backdate notBefore a little: nodes with slightly skewed clocks would otherwise reject a fresh cert.
_CLOCK_SKEW = dt.timedelta(minutes=5)
DEFAULT_SANS = ("localhost", "127.0.0.1")


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _name(common_name: str, organizations: Iterable[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def _san(sans: Iterable[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    seen: set[str] = set()
    for raw in sans:
        name = raw.strip()
        if not name or name in seen:
            continue
        seen.add(name)
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def _validity(days: int) -> tuple[dt.datetime, dt.datetime]:
    if days <= 0:
        raise ValueError(f"certificate validity must be positive, got {days} days")
    now = dt.datetime.now(dt.UTC)
    return now - _CLOCK_SKEW, now + dt.timedelta(days=days)


def _load_ca(ca_cert_pem: bytes, ca_key_pem: bytes) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert = x509.load_pem_x509_certificate(ca_cert_pem)
    key = serialization.load_pem_private_key(ca_key_pem, password=None)
    return cert, key  # type: ignore[return-value]


def _leaf(
    issuer_cert: x509.Certificate | None,
    issuer_key: ec.EllipticCurvePrivateKey | None,
    subject: x509.Name,
    days: int,
    eku: Sequence[x509.ObjectIdentifier],
    sans: Iterable[str] | None,
) -> tuple[bytes, bytes]:
    key = _new_key()
    not_before, not_after = _validity(days)
    signer_key = issuer_key or key  # self-signed when no issuer
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_cert.subject if issuer_cert else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(list(eku)), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if issuer_cert is not None:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_cert.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
    if sans is not None:
        builder = builder.add_extension(_san(sans), critical=False)
    cert = builder.sign(signer_key, hashes.SHA256())
    return _cert_pem(cert), _key_pem(key)


def self_signed(sans: list[str], days: int = 365) -> tuple[bytes, bytes]:
    """A self-signed serving certificate for ``localhost``, ``127.0.0.1`` and ``sans``."""
    all_sans = [*DEFAULT_SANS, *sans]
    common_name = next((s for s in sans if s.strip()), "localhost")
    return _leaf(None, None, _name(common_name), days, [ExtendedKeyUsageOID.SERVER_AUTH], all_sans)


def make_ca(common_name: str, days: int = 3650) -> tuple[bytes, bytes]:
    """A self-signed CA certificate (keyCertSign, no path length limit)."""
    key = _new_key()
    not_before, not_after = _validity(days)
    subject = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _cert_pem(cert), _key_pem(key)


def make_serving_cert(ca_cert_pem: bytes, ca_key_pem: bytes, sans: list[str], days: int = 365) -> tuple[bytes, bytes]:
    """A serverAuth certificate signed by the CA; CN = first SAN, SANs exactly as given."""
    if not sans:
        raise ValueError("a serving certificate needs at least one SAN")
    ca_cert, ca_key = _load_ca(ca_cert_pem, ca_key_pem)
    return _leaf(ca_cert, ca_key, _name(sans[0]), days, [ExtendedKeyUsageOID.SERVER_AUTH], sans)


def make_client_cert(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    common_name: str,
    organizations: Sequence[str] = (),
    days: int = 365,
) -> tuple[bytes, bytes]:
    """A clientAuth certificate: CN = user name, O = groups (Kubernetes x509 user conversion)."""
    ca_cert, ca_key = _load_ca(ca_cert_pem, ca_key_pem)
    return _leaf(ca_cert, ca_key, _name(common_name, organizations), days, [ExtendedKeyUsageOID.CLIENT_AUTH], None)
