"""`make bench` runs every benchmark even when one misses its goal, and still fails at the end."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench-all.sh"


def fake_python(tmp_path: Path, failing: str | None) -> Path:
    """An interpreter that records each bench it is asked to run and fails on `failing`."""
    log = tmp_path / "ran.txt"
    fake = tmp_path / "python"
    fail_line = f"[[ $1 == bench/{failing}.py ]] && exit 1\n" if failing else ""
    fake.write_text(f'#!/bin/bash\necho "$1" >> {log}\n{fail_line}exit 0\n')
    fake.chmod(0o755)
    return fake


def run(fake: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), str(fake)], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_a_missed_goal_does_not_stop_the_benches_after_it_and_fails_at_the_end(tmp_path: Path) -> None:
    done = run(fake_python(tmp_path, failing="scaling"))
    ran = (tmp_path / "ran.txt").read_text().split()
    assert done.returncode == 1
    assert ran.index("bench/scaling.py") < ran.index("bench/fusion.py")  # the ones after still ran
    assert ran[-1] == "bench/reliability.py"
    assert "bench/scaling.py" in done.stderr and "bench/fusion.py" not in done.stderr


def test_every_bench_in_the_directory_is_run_once_and_success_exits_zero(tmp_path: Path) -> None:
    done = run(fake_python(tmp_path, failing=None))
    ran = (tmp_path / "ran.txt").read_text().split()
    assert done.returncode == 0, done.stderr
    # query_path.py is the side-by-side A/B tool for two checkouts, not one of make bench's figures
    mains = sorted(
        f"bench/{p.name}"
        for p in (ROOT / "bench").glob("*.py")
        if "__main__" in p.read_text() and p.name != "query_path.py"
    )
    assert sorted(ran) == mains
