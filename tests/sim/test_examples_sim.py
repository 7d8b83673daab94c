"""Every simulation scenario shipped in examples/sim parses, with its metrics and traffic."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from adapter.sim.scenario import parse_scenario
from tests.shared_data import shared_path

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples" / "sim").glob("*.yaml"))
SHARED_MARK = "shared/"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_scenario_loads(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    traffic_file = (doc.get("traffic") or {}).get("file", "")
    if SHARED_MARK in traffic_file:
        # Examples name the workplace's traces relative to the repository; find them wherever it is.
        doc["traffic"]["file"] = str(shared_path(traffic_file.split(SHARED_MARK, 1)[1]))
    scenario = parse_scenario(doc, path.parent)
    hpa_metrics = [m["external"]["metric"]["name"] for m in doc["hpa"]["spec"]["metrics"]]
    assert sorted(scenario.metrics) == sorted(hpa_metrics)
    assert scenario.ticks > 0
    assert (scenario.trace is not None) == ("traffic" in doc)
