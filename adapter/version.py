"""Build version and git commit for /version (the Kubernetes version.Info shape)."""

from __future__ import annotations

import functools
import os
import platform
import subprocess
from pathlib import Path

from adapter import __version__


@functools.lru_cache(maxsize=1)
def git_commit() -> str:
    """PRESCALER_GIT_COMMIT (set by the image build), else the checkout's HEAD, else "unknown"."""
    env = os.environ.get("PRESCALER_GIT_COMMIT")
    if env:
        return env
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=2, check=True
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def version_info() -> dict[str, str]:
    major, minor, *_ = __version__.split(".") + ["0", "0"]
    return {
        "major": major,
        "minor": minor,
        "gitVersion": f"v{__version__}",
        "gitCommit": git_commit(),
        "gitTreeState": "",
        "buildDate": os.environ.get("PRESCALER_BUILD_DATE", ""),
        "goVersion": "",
        "compiler": "cpython",
        "platform": f"{platform.system().lower()}/{platform.machine()}",
        "pythonVersion": platform.python_version(),
    }
