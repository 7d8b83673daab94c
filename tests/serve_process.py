"""`prescaler serve` as a real subprocess on a free port (local mode, self-signed TLS), for tests."""

from __future__ import annotations

import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.helpers import free_port

ROOT = Path(__file__).resolve().parent.parent


class ServeProcess:
    def __init__(self, manifests: list[Path], workdir: Path, *extra: str, ready_timeout: float = 60) -> None:
        self.port = free_port()
        self.kubeconfig = workdir / "kubeconfig"
        self.log_path = workdir / "serve.log"
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "adapter.cli",
                "serve",
                "--manifests",
                *map(str, manifests),
                "--secure-port",
                str(self.port),
                "--bind-address",
                "127.0.0.1",
                "--write-kubeconfig",
                str(self.kubeconfig),
                *extra,
            ],
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.ca = workdir / "tls.crt"
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            try:
                if self.get("/readyz").status_code == 200:
                    return
            except (httpx.HTTPError, OSError):
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("server did not become ready: " + self.log_path.read_text()[-2000:])

    def get(self, path: str, **kw: object) -> httpx.Response:
        context = ssl.create_default_context(cafile=str(self.ca))
        return httpx.get(f"https://127.0.0.1:{self.port}{path}", verify=context, timeout=10, **kw)  # type: ignore[arg-type]

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if not self._log.closed:
            self._log.close()

    def __enter__(self) -> ServeProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
