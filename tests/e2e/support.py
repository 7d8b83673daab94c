"""Helpers shared by the real control-plane tests: the prescaler process, polling, kubectl shortcuts,
the audit log."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sysconfig
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.e2e.controlplane import ROOT, ControlPlane, Process, write_kubeconfig
from tests.helpers import free_port

NAMESPACE = "prescaler"
APISERVICE = "v1beta1.external.metrics.k8s.io"
V1 = "/apis/external.metrics.k8s.io/v1beta1"


def wait_for(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.25) -> Any:
    """Poll ``check`` until it returns something truthy; AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


class PrescalerProcess:
    """`prescaler serve` in cluster mode, as the Deployment runs it, but as a local process."""

    def __init__(
        self,
        plane: ControlPlane,
        certs: Path,
        name: str,
        token: str,
        port: int | None = None,
        extra_args: Sequence[str] = (),
    ):
        self.plane, self.name, self.token = plane, name, token
        self.port = port or free_port()
        kubeconfig = write_kubeconfig(
            plane.workdir / f"{name}.kubeconfig", plane.server, plane.pki.path("ca.crt"), token=token
        )
        argv = [
            str(Path(sysconfig.get_path("scripts")) / "prescaler"),
            "serve",
            "--kubeconfig",
            str(kubeconfig),
            "--authentication-kubeconfig",
            str(kubeconfig),
            "--authorization-kubeconfig",
            str(kubeconfig),
            "--secure-port",
            str(self.port),
            "--bind-address",
            "127.0.0.1",
            "--tls-cert-file",
            str(certs / "tls.crt"),
            "--tls-private-key-file",
            str(certs / "tls.key"),
            "--status-namespace",
            NAMESPACE,
            "--v",
            "1",
            *extra_args,
        ]
        # POD_NAME is what the downward API sets in the Deployment; it prefixes the Lease identity.
        env = {**os.environ, "POD_NAME": name}
        self.process = Process(name, argv, plane.logs / f"{name}.log", env=env, cwd=ROOT)
        self.ssl_ca = str(certs / "ca.crt")  # the CA of prescaler's serving certificate
        self.ssl = ssl.create_default_context(cafile=self.ssl_ca)
        self.ssl.check_hostname = False  # the certificate names prescaler.prescaler.svc; we dial 127.0.0.1

    @property
    def credential_id(self) -> str:
        """The `authentication.kubernetes.io/credential-id` kube-apiserver records for this token."""
        payload = self.token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return f"JTI={claims['jti']}"

    def start(self) -> PrescalerProcess:
        self.process.start()
        self.process.wait_until(
            lambda: httpx.get(f"https://127.0.0.1:{self.port}/readyz", verify=self.ssl, timeout=3).status_code == 200,
            60,
            "ready (/readyz)",
        )
        return self

    def stop(self) -> None:
        self.process.stop()

    def kill(self) -> None:
        self.process.kill()

    def running(self) -> bool:
        return self.process.running()


def write_certs(plane: ControlPlane) -> Path:
    """What users run: `prescaler certs` writes the CA, the serving certificate and the APIService."""
    out = plane.workdir / "prescaler-certs"
    subprocess.run(
        [
            str(Path(sysconfig.get_path("scripts")) / "prescaler"),
            "certs",
            "--service",
            "prescaler",
            "--namespace",
            NAMESPACE,
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return out


def install(plane: ControlPlane, certs: Path) -> int:
    """The user's install (CRDs, namespace, RBAC, APIService with caBundle); returns the port the
    APIService sends to (prescaler runs as a local process behind an ExternalName Service)."""
    # Server-side apply: the CRDs are too large for client-side apply's last-applied annotation.
    plane.kubectl("apply", "--server-side", "-f", str(ROOT / "deploy/crds/"))
    plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    for manifest in (
        "deploy/namespace.yaml",
        "deploy/rbac.yaml",
        "apiservice/auth-delegator.yaml",
        "apiservice/auth-reader.yaml",
        "apiservice/hpa-external-metrics-reader.yaml",
    ):
        plane.kubectl("apply", "-f", str(ROOT / manifest))
    port = free_port()
    plane.apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "prescaler", "namespace": NAMESPACE},
            "spec": {"type": "ExternalName", "externalName": "127.0.0.1"},
        }
    )
    # apiservice/apiservice.yaml with the caBundle `prescaler certs` computed (its own apiservice.yaml
    # must register the same thing), and the local process's port instead of the Service's 443.
    apiservice = yaml.safe_load((ROOT / "apiservice/apiservice.yaml").read_text())
    generated = yaml.safe_load((certs / "apiservice.yaml").read_text())
    assert {**apiservice["spec"], "caBundle": generated["spec"]["caBundle"]} == generated["spec"]
    apiservice["spec"]["caBundle"] = generated["spec"]["caBundle"]
    apiservice["spec"]["service"]["port"] = port
    plane.apply(apiservice)
    return port


def apiservice_available(plane: ControlPlane) -> bool:
    doc = plane.get_json("apiservice", APISERVICE)
    return any(c["type"] == "Available" and c["status"] == "True" for c in doc.get("status", {}).get("conditions", []))


def raw(plane: ControlPlane, path: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return plane.kubectl("get", "--raw", path, check=False, **kw)


def served(plane: ControlPlane, namespace: str, resource: str, metric: str = "rps") -> list[str] | None:
    result = raw(plane, f"{V1}/namespaces/{namespace}/{metric}?labelSelector=resource%3D{resource}")
    if result.returncode != 0:
        return None
    return [item["value"] for item in json.loads(result.stdout)["items"]]


def audit_events(plane: ControlPlane, offset: int = 0) -> list[dict[str, Any]]:
    with plane.audit_log.open("rb") as fh:
        fh.seek(offset)
        return [json.loads(line) for line in fh.read().splitlines() if line.strip()]


def audit_offset(plane: ControlPlane) -> int:
    return plane.audit_log.stat().st_size if plane.audit_log.exists() else 0


def namespace_and_deployment(namespace: str, app: str, replicas: int) -> list[dict[str, Any]]:
    """A namespace and a Deployment `app` (label app=<app>) of `replicas` pause pods: a scale target.
    No kubelet runs, so its pods are created and never start."""
    labels = {"app": app}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": app, "namespace": namespace},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]},
                },
            },
        },
    ]
