"""TLS serving: certificate factory, real HTTPS server, peer certificate in scope, hot reload, certs CLI."""

from __future__ import annotations

import argparse
import base64
import ipaddress
import json
import os
import socket
import ssl
import time
from pathlib import Path

import httpx
import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from adapter.serving import certs, certs_cli
from adapter.serving.server import ServerThread, ServingOptions, add_serving_flags, serving_options_from_args
from adapter.serving.tlsctx import deferred_client_verification_supported
from tests.pki import TestPKI


async def echo_tls_app(scope, receive, send):
    """Answers with what the server knows about the TLS peer."""
    if scope["type"] != "http":
        return
    tls = (scope.get("extensions") or {}).get("tls") or {}
    der = tls.get("client_cert_der")
    body = json.dumps(
        {
            "subject": tls.get("client_cert_name"),
            "chain_len": len(tls.get("client_cert_chain") or []),
            "der_len": len(der) if der else 0,
            "tls_version": tls.get("tls_version"),
            "scheme": scope.get("scheme"),
        }
    ).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


def _sans(cert: x509.Certificate) -> tuple[set[str], set[str]]:
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return set(san.get_values_for_type(x509.DNSName)), {str(i) for i in san.get_values_for_type(x509.IPAddress)}


def _peer_cert(port: int, server_name: str = "localhost") -> x509.Certificate:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname=server_name) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


# ------------------------------------------------------------------------------------------ certs


def test_self_signed_has_default_and_extra_sans():
    cert_pem, key_pem = certs.self_signed(["adapter.example", "10.0.0.7"])
    cert = x509.load_pem_x509_certificate(cert_pem)
    dns, ips = _sans(cert)
    assert dns == {"localhost", "adapter.example"}
    assert ips == {"127.0.0.1", "10.0.0.7"}
    assert cert.issuer == cert.subject
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in eku
    # The key really belongs to the certificate (ssl refuses a mismatched pair).
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(*_write_pair(cert_pem, key_pem))


def _write_pair(cert_pem: bytes, key_pem: bytes) -> tuple[str, str]:
    import tempfile

    d = tempfile.mkdtemp()
    Path(d, "c").write_bytes(cert_pem)
    Path(d, "k").write_bytes(key_pem)
    return str(Path(d, "c")), str(Path(d, "k"))


def test_ca_signed_serving_and_client_certs():
    ca_pem, ca_key = certs.make_ca("test-ca")
    ca = x509.load_pem_x509_certificate(ca_pem)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True

    srv_pem, _ = certs.make_serving_cert(ca_pem, ca_key, ["svc.ns.svc", "192.168.1.1"])
    srv = x509.load_pem_x509_certificate(srv_pem)
    srv.verify_directly_issued_by(ca)
    assert _sans(srv) == ({"svc.ns.svc"}, {"192.168.1.1"})

    cli_pem, _ = certs.make_client_cert(ca_pem, ca_key, "alice", ["dev", "ops"])
    cli = x509.load_pem_x509_certificate(cli_pem)
    cli.verify_directly_issued_by(ca)
    assert cli.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "alice"
    assert [a.value for a in cli.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["dev", "ops"]
    eku = cli.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_invalid_inputs_raise_clear_errors():
    ca_pem, ca_key = certs.make_ca("x")
    with pytest.raises(ValueError, match="at least one SAN"):
        certs.make_serving_cert(ca_pem, ca_key, [])
    with pytest.raises(ValueError, match="positive"):
        certs.make_ca("x", days=0)


# ------------------------------------------------------------------------------------------ server


def test_self_signed_server_serves_https_and_passes_peer_cert(tmp_path):
    pki = TestPKI(tmp_path)
    opts = ServingOptions(bind_address="127.0.0.1", secure_port=0, log_level="warning", tls_sans=["prescaler.test"])
    with ServerThread(echo_tls_app, opts) as srv:
        assert srv.port > 0 and srv.ca_pem is not None
        trust = tmp_path / "selfsigned.crt"
        trust.write_bytes(srv.ca_pem)
        # No client certificate: TLS info present, no peer cert.
        r = httpx.get(f"https://localhost:{srv.port}/x", verify=ssl.create_default_context(cafile=str(trust)))
        assert r.status_code == 200
        assert r.json() == {
            "subject": None,
            "chain_len": 0,
            "der_len": 0,
            "tls_version": r.json()["tls_version"],
            "scheme": "https",
        }
        assert r.json()["tls_version"] in (0x0303, 0x0304)
        # With a client certificate: subject and DER reach the app.
        ctx = pki.ssl_context(client=("alice", ["dev"]), trust=trust)
        r = httpx.get(f"https://127.0.0.1:{srv.port}/x", verify=ctx)
        assert r.json()["subject"] == "CN=alice,O=dev"
        assert r.json()["chain_len"] == 1 and r.json()["der_len"] > 100
        assert "prescaler.test" in _sans(_peer_cert(srv.port))[0]


@pytest.mark.skipif(not deferred_client_verification_supported(), reason="ctypes verify callback unavailable")
def test_client_cert_from_unknown_ca_still_completes_handshake(tmp_path):
    """Trust is decided by the authenticator (401), not by the TLS handshake."""
    pki = TestPKI(tmp_path)
    opts = ServingOptions(
        bind_address="127.0.0.1",
        secure_port=0,
        log_level="warning",
        tls_cert_file=str(pki.serving_cert_file),
        tls_private_key_file=str(pki.serving_key_file),
    )
    with ServerThread(echo_tls_app, opts) as srv:
        r = httpx.get(f"https://127.0.0.1:{srv.port}/", verify=pki.ssl_context(client=("mallory", []), ca="evil"))
        assert r.status_code == 200
        assert r.json()["subject"] == "CN=mallory"


def _replace_file(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def test_serving_certificate_hot_reload_keeps_existing_connections(tmp_path):
    pki = TestPKI(tmp_path)
    opts = ServingOptions(
        bind_address="127.0.0.1",
        secure_port=0,
        log_level="warning",
        tls_cert_file=str(pki.serving_cert_file),
        tls_private_key_file=str(pki.serving_key_file),
        reload_interval_seconds=0.05,
    )
    with ServerThread(echo_tls_app, opts) as srv:
        first = _peer_cert(srv.port)
        assert "reloaded.example" not in _sans(first)[0]
        # A keep-alive connection opened before the rotation.
        client = httpx.Client(verify=pki.ssl_context())
        assert client.get(f"https://127.0.0.1:{srv.port}/a").status_code == 200

        new_cert, new_key = pki.new_serving_cert(["reloaded.example", "127.0.0.1"])
        _replace_file(pki.serving_key_file, new_key)
        _replace_file(pki.serving_cert_file, new_cert)

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and opts.live_tls is not None and opts.live_tls.reloads == 0:
            time.sleep(0.02)
        assert opts.live_tls is not None and opts.live_tls.reloads >= 1
        second = _peer_cert(srv.port)
        assert "reloaded.example" in _sans(second)[0]
        assert second.serial_number != first.serial_number
        # A fresh verifying client accepts the new certificate ...
        r = httpx.get(f"https://127.0.0.1:{srv.port}/b", verify=pki.ssl_context())
        assert r.status_code == 200
        # ... and the old connection is still usable (same socket, no reconnect needed).
        r = client.get(f"https://127.0.0.1:{srv.port}/c")
        assert r.status_code == 200
        client.close()


def test_broken_rotation_keeps_previous_certificate(tmp_path):
    pki = TestPKI(tmp_path)
    opts = ServingOptions(
        bind_address="127.0.0.1",
        secure_port=0,
        log_level="warning",
        tls_cert_file=str(pki.serving_cert_file),
        tls_private_key_file=str(pki.serving_key_file),
        reload_interval_seconds=3600,
    )
    with ServerThread(echo_tls_app, opts) as srv:
        before = _peer_cert(srv.port).serial_number
        other_cert, _other_key = pki.new_serving_cert(["other.example"])
        _replace_file(pki.serving_cert_file, other_cert)  # key no longer matches
        assert opts.live_tls is not None
        assert opts.live_tls.reload_if_changed() is False
        assert _peer_cert(srv.port).serial_number == before
        assert httpx.get(f"https://127.0.0.1:{srv.port}/", verify=pki.ssl_context()).status_code == 200


def test_cert_without_key_flag_is_rejected():
    opts = ServingOptions(bind_address="127.0.0.1", secure_port=0, tls_cert_file="/nonexistent.crt")
    with pytest.raises(ValueError, match="together"):
        ServerThread(echo_tls_app, opts).start()


def test_serving_flags_parse():
    parser = argparse.ArgumentParser()
    add_serving_flags(parser)
    args = parser.parse_args(
        ["--secure-port", "8443", "--tls-san", "a.example", "--tls-san", "10.1.2.3", "--bind-address", "127.0.0.1"]
    )
    opts = serving_options_from_args(args, log_level="debug")
    assert (opts.secure_port, opts.bind_address, opts.tls_sans, opts.log_level) == (
        8443,
        "127.0.0.1",
        ["a.example", "10.1.2.3"],
        "debug",
    )
    assert parser.parse_args([]).secure_port == 6443


# ------------------------------------------------------------------------------------------ certs CLI


def _run_certs(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="prescaler")
    certs_cli.add_parsers(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def test_certs_cli_writes_ca_cert_and_apiservice(tmp_path, capsys):
    out = tmp_path / "out"
    assert _run_certs(["certs", "--service", "prescaler", "--namespace", "autoscaling", "--out", str(out)]) == 0
    ca_pem = (out / "ca.crt").read_bytes()
    ca = x509.load_pem_x509_certificate(ca_pem)
    cert = x509.load_pem_x509_certificate((out / "tls.crt").read_bytes())
    cert.verify_directly_issued_by(ca)
    assert _sans(cert)[0] == {
        "prescaler",
        "prescaler.autoscaling",
        "prescaler.autoscaling.svc",
        "prescaler.autoscaling.svc.cluster.local",
    }
    assert oct((out / "tls.key").stat().st_mode & 0o777) == "0o600"

    manifest = yaml.safe_load((out / "apiservice.yaml").read_text())
    assert manifest["apiVersion"] == "apiregistration.k8s.io/v1"
    assert manifest["metadata"]["name"] == "v1beta1.external.metrics.k8s.io"
    spec = manifest["spec"]
    assert spec["service"] == {"name": "prescaler", "namespace": "autoscaling", "port": 443}
    assert (spec["group"], spec["version"]) == ("external.metrics.k8s.io", "v1beta1")
    assert (spec["groupPriorityMinimum"], spec["versionPriority"]) == (100, 100)
    assert base64.b64decode(spec["caBundle"]) == ca_pem
    assert "insecureSkipTLSVerify" not in spec


def test_certs_cli_output_is_what_the_aggregator_accepts(tmp_path):
    """Serve with the generated files; a client verifying like kube-aggregator (caBundle, ServerName
    <svc>.<ns>.svc) must succeed."""
    out = tmp_path / "out"
    assert _run_certs(["certs", "--service", "prescaler", "--namespace", "ns1", "--out", str(out)]) == 0
    opts = ServingOptions(
        bind_address="127.0.0.1",
        secure_port=0,
        log_level="warning",
        tls_cert_file=str(out / "tls.crt"),
        tls_private_key_file=str(out / "tls.key"),
    )
    with ServerThread(echo_tls_app, opts) as srv:
        ctx = ssl.create_default_context(cafile=str(out / "ca.crt"))
        with (
            socket.create_connection(("127.0.0.1", srv.port), timeout=5) as raw,
            ctx.wrap_socket(raw, server_hostname="prescaler.ns1.svc") as tls,
        ):
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
        with (
            socket.create_connection(("127.0.0.1", srv.port), timeout=5) as raw,
            pytest.raises(ssl.SSLCertVerificationError),
        ):
            ctx.wrap_socket(raw, server_hostname="localhost")


def test_certs_cli_rejects_bad_names(tmp_path, capsys):
    assert _run_certs(["certs", "--service", "Bad_Name", "--namespace", "ns", "--out", str(tmp_path)]) == 2
    assert "not a valid DNS label" in capsys.readouterr().err
    assert not (tmp_path / "tls.crt").exists()


def test_ip_sans_are_ip_entries():
    ca_pem, ca_key = certs.make_ca("x")
    cert = x509.load_pem_x509_certificate(certs.make_serving_cert(ca_pem, ca_key, ["::1", "a.b"])[0])
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("::1")]


def test_fallback_mode_verifies_in_handshake_and_follows_ca_changes(tmp_path, monkeypatch):
    """Without the ctypes verify callback, the client CA set goes into the SSLContext and is swapped
    live when the provider's answer changes."""
    from adapter.serving import tlsctx

    monkeypatch.setattr(tlsctx, "_probe_result", False)
    pki = TestPKI(tmp_path)
    current = {"pem": pki.ca_pem("client")}
    opts = ServingOptions(
        bind_address="127.0.0.1",
        secure_port=0,
        log_level="warning",
        tls_cert_file=str(pki.serving_cert_file),
        tls_private_key_file=str(pki.serving_key_file),
        client_ca_pems=lambda: current["pem"],
        reload_interval_seconds=3600,
    )
    with ServerThread(echo_tls_app, opts) as srv:
        url = f"https://127.0.0.1:{srv.port}/"
        assert httpx.get(url, verify=pki.ssl_context(client=("ok", []))).json()["subject"] == "CN=ok"
        with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
            httpx.get(url, verify=pki.ssl_context(client=("bad", []), ca="evil"))
        current["pem"] = pki.ca_pem("evil")
        assert opts.live_tls is not None and opts.live_tls.reload_if_changed()
        assert httpx.get(url, verify=pki.ssl_context(client=("now-ok", []), ca="evil")).status_code == 200
