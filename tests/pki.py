"""Test certificate factory: the PKI of a small cluster, written to a directory.

    pki = TestPKI(tmp_path)
    pki.serving_ca_file, pki.serving_cert_file, pki.serving_key_file   # server side (SAN 127.0.0.1)
    pki.front_proxy_ca_file                                             # --requestheader-client-ca-file
    pki.client_ca_file                                                  # --client-ca-file
    pki.client("front-proxy-client", ca="front-proxy")                  # -> (cert_file, key_file)
    pki.ssl_context(client=("alice", ["dev"]))                          # client SSLContext for httpx

CAs: "serving", "front-proxy", "client", "evil" (trusted by nobody).  Certificates are real ECDSA
certificates made with adapter.serving.certs; every test gets fresh ones.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from adapter.serving.certs import make_ca, make_client_cert, make_serving_cert


class TestPKI:
    __test__ = False  # not a pytest test class

    def __init__(self, directory: Path, server_sans: tuple[str, ...] = ("localhost", "127.0.0.1")) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cas: dict[str, tuple[bytes, bytes]] = {
            name: make_ca(f"{name}-ca") for name in ("serving", "front-proxy", "client", "evil")
        }
        for name, (cert, _key) in self.cas.items():
            self._write(f"{name}-ca.crt", cert)
        ca_cert, ca_key = self.cas["serving"]
        cert, key = make_serving_cert(ca_cert, ca_key, list(server_sans))
        self.serving_cert_file = self._write("tls.crt", cert)
        self.serving_key_file = self._write("tls.key", key)
        self.serving_ca_file = self.dir / "serving-ca.crt"
        self.front_proxy_ca_file = self.dir / "front-proxy-ca.crt"
        self.client_ca_file = self.dir / "client-ca.crt"
        self.evil_ca_file = self.dir / "evil-ca.crt"
        self._n = 0

    def _write(self, name: str, data: bytes) -> Path:
        path = self.dir / name
        path.write_bytes(data)
        return path

    def ca_pem(self, name: str) -> bytes:
        return self.cas[name][0]

    def client(
        self, common_name: str, groups: list[str] | tuple[str, ...] = (), ca: str = "client"
    ) -> tuple[Path, Path]:
        ca_cert, ca_key = self.cas[ca]
        cert, key = make_client_cert(ca_cert, ca_key, common_name, list(groups))
        self._n += 1
        return self._write(f"client-{self._n}.crt", cert), self._write(f"client-{self._n}.key", key)

    def new_serving_cert(self, sans: list[str], ca: str = "serving") -> tuple[bytes, bytes]:
        ca_cert, ca_key = self.cas[ca]
        return make_serving_cert(ca_cert, ca_key, sans)

    def ssl_context(
        self,
        client: tuple[str, list[str]] | None = None,
        ca: str = "client",
        trust: Path | None = None,
    ) -> ssl.SSLContext:
        """Client context trusting the serving CA (or ``trust``), optionally presenting a client cert."""
        ctx = ssl.create_default_context(cafile=str(trust or self.serving_ca_file))
        if client is not None:
            cert_file, key_file = self.client(client[0], client[1], ca=ca)
            ctx.load_cert_chain(str(cert_file), str(key_file))
        return ctx
