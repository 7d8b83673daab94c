"""Where the workplace's shared/ folder (traces, seeds) is, for tests that read it.

It lies beside the repository (`../shared`), in CI as in a working tree. A clone made elsewhere
(`git clone . /tmp/x`) still finds it through the clone's origin, a local path whose parent holds
shared/. PRESCALER_SHARED overrides both.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@functools.lru_cache(maxsize=1)
def shared_dir() -> Path | None:
    candidates = []
    if os.environ.get("PRESCALER_SHARED"):
        candidates.append(Path(os.environ["PRESCALER_SHARED"]))
    candidates.append(REPO.parent / "shared")
    try:
        origin = subprocess.run(
            ["git", "-C", str(REPO), "config", "--get", "remote.origin.url"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        origin = ""
    if origin and "://" not in origin and ":" not in origin.split("/")[0]:
        candidates.append(Path(origin).resolve().parent / "shared")
    return next((c for c in candidates if (c / "data" / "traces").is_dir()), None)


def shared_path(relative: str) -> Path:
    """A file under shared/; pytest.skip (printing why) when shared/ cannot be found."""
    base = shared_dir()
    if base is None or not (base / relative).exists():
        import pytest

        reason = (
            f"shared/{relative} not found beside the repository or its origin "
            "(set PRESCALER_SHARED to the shared folder)"
        )
        print(f"skipping: {reason}")
        pytest.skip(reason)
    return base / relative
