"""Session fixtures for the real control-plane tests (`make e2e`; `make test` does not collect tests/e2e).

One control plane for the whole session (it takes ~30 s to start), with prescaler installed the way a
user installs it: the CRDs from deploy/crds/, the RBAC from deploy/rbac.yaml and apiservice/, and the
APIService that `prescaler certs` writes, with its CA as caBundle. prescaler itself runs as a local
process in cluster mode with a ServiceAccount token and real delegated authentication.

**Why an ExternalName Service.** The aggregator reaches an APIService's backend through its Service.
For a ClusterIP Service it dials the cluster IP (needs kube-proxy, absent here) or, with
`--enable-aggregator-routing`, an endpoint IP - and Endpoints/EndpointSlices refuse loopback
addresses, while prescaler runs on 127.0.0.1. For an ExternalName Service the aggregator dials
`<externalName>:<APIService port>` directly and still verifies the serving certificate for
`prescaler.prescaler.svc`, the same name it verifies in a real cluster. So the test replaces only
deploy/service.yaml (a ClusterIP Service for the pods) with `externalName: 127.0.0.1` and sets the
APIService port to the local process's port.

Logs of every component (etcd, kube-apiserver and its audit log, kube-controller-manager, each
prescaler process, the HPA timeline) go to .e2e/<time>/logs; the directory is removed after a
passing run (unless PRESCALER_E2E_KEEP=1) and printed after a failing one.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.announcer_server import Announcer
from tests.e2e.controlplane import ROOT, ComponentFailed, ControlPlane, build_binaries
from tests.e2e.support import NAMESPACE, PrescalerProcess, apiservice_available, install, wait_for, write_certs

log = logging.getLogger("e2e")
logging.getLogger("httpx").setLevel(logging.WARNING)  # readiness polls would drown the timeline in the log
_FAILED_RUNS: list[Path] = []


# ------------------------------------------------------------------------------------------- hooks
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> None:
    if call.excinfo is not None and not call.excinfo.errisinstance(pytest.skip.Exception):
        item.session.config._e2e_failed = True  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for run in _FAILED_RUNS:
        terminalreporter.write_line(f"e2e: logs of every component of the failed run kept in {run}/logs", red=True)


# ---------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def run_dir(request: pytest.FixtureRequest) -> Iterator[Path]:
    base = Path(os.environ.get("PRESCALER_E2E_DIR", ROOT / ".e2e"))
    run = base / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    run.mkdir(parents=True, exist_ok=True)
    yield run
    if getattr(request.config, "_e2e_failed", False) or request.session.testsfailed:
        _FAILED_RUNS.append(run)
    elif os.environ.get("PRESCALER_E2E_KEEP") != "1":
        shutil.rmtree(run, ignore_errors=True)


@pytest.fixture(scope="session")
def plane(run_dir: Path) -> Iterator[ControlPlane]:
    try:
        bin_dir = build_binaries()
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"the control plane could not be built, so the real-cluster tests cannot run: {exc}", pytrace=False)
    control_plane = ControlPlane(bin_dir, run_dir)
    try:
        control_plane.start()
    except ComponentFailed as exc:
        control_plane.stop()
        pytest.fail(str(exc), pytrace=False)
    log.info("control plane up at %s (kubeconfig %s)", control_plane.server, control_plane.admin_kubeconfig)
    yield control_plane
    control_plane.stop()


@pytest.fixture(scope="session")
def certs(plane: ControlPlane) -> Path:
    """What users run: `prescaler certs` writes the CA, the serving certificate and the APIService."""
    return write_certs(plane)


@pytest.fixture(scope="session")
def installed(plane: ControlPlane, certs: Path) -> int:
    """The user's install (CRDs, namespace, RBAC, APIService with caBundle); returns prescaler's port."""
    return install(plane, certs)


@pytest.fixture(scope="session")
def prescaler(plane: ControlPlane, certs: Path, installed: int) -> Iterator[PrescalerProcess]:
    """The prescaler the APIService points at (restartable on the same port)."""
    token = plane.service_account_token(NAMESPACE, "prescaler")
    server = PrescalerProcess(plane, certs, "prescaler-a", token, port=installed)
    try:
        server.start()
    except ComponentFailed as exc:
        pytest.fail(str(exc), pytrace=False)
    wait_for(lambda: apiservice_available(plane), 90, "APIService v1beta1.external.metrics.k8s.io Available=True")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def seed_announcer() -> Iterator[Announcer]:
    server = Announcer()
    now = int(time.time())
    # One announced batch of 50 messages, active for the whole session.
    server.set_items([{"start": now - 60, "end": now + 6 * 3600, "values": {"scheduledMessage": 50}}])
    yield server
    server.close()


def installed_kinds() -> set[str]:
    kinds: set[str] = set()
    for crd in (ROOT / "deploy/crds").glob("*.yaml"):
        kinds.update(d["spec"]["names"]["kind"] for d in yaml.safe_load_all(crd.read_text()) if d)
    return kinds


@pytest.fixture(scope="session")
def seed(plane: ControlPlane, prescaler: PrescalerProcess, seed_announcer: Announcer) -> dict[str, str]:
    """The seed's manifests applied verbatim (kubectl's output per file is returned; files whose kind has
    no CRD in deploy/crds/ are not applied), then the VME pointed at the test's announcer instead of
    stage.pingpong.ai (the only change)."""
    kinds = installed_kinds()
    results = {}
    for path in sorted((ROOT / "examples/seed").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        if doc["kind"] not in kinds:
            log.warning("seed %s not applied: kind %s has no CRD in deploy/crds/", path.name, doc["kind"])
            continue
        namespace = doc["metadata"].get("namespace")
        if namespace:  # the seed's namespaced objects live in the workload's namespace
            plane.kubectl("create", "namespace", namespace, check=False)
        results[path.name] = plane.kubectl("apply", "-f", str(path)).stdout.strip()
    vme = yaml.safe_load((ROOT / "examples/seed/virtualmetricevent.yaml").read_text())
    vme["spec"]["source"]["api"]["url"] = seed_announcer.url
    vme["spec"]["source"]["interval"] = "5s"
    plane.apply(vme)
    return results


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A skipped real-cluster test is a failed one: `make e2e` must never pass by skipping."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped and session.exitstatus == 0:
        if reporter:
            reporter.write_line(f"e2e: {len(skipped)} test(s) skipped; the real-cluster tests may not skip", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
