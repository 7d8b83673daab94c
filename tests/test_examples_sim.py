"""Every simulation scenario shipped in examples/sim parses (the trace files they name exist)."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapter.sim.scenario import load_scenario

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples" / "sim").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_scenario_loads(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario is not None
