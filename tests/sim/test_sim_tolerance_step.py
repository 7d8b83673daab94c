"""stepPastTolerance in the simulator: a scale-up the HPA's dead band swallowed now happens, through
the same rule the server applies (adapter.pipeline.deadband), with the simulated HPA and pods."""

from __future__ import annotations

from typing import Any

from adapter.sim.engine import run_scenario
from adapter.sim.scenario import parse_scenario
from tests.sim.test_sim_scenario import MIN, at, campaign_scenario


def scenario(step: dict[str, Any] | None, behavior: dict[str, Any] | None = None) -> dict[str, Any]:
    doc = campaign_scenario()
    doc["hpa"]["spec"]["behavior"] = behavior or {}  # the default tolerance: 0.1 both ways
    if step is not None:
        doc["manifests"][0]["spec"]["stepPastTolerance"] = step
    return doc


def test_a_scale_up_stuck_in_the_band_now_happens() -> None:
    # The burst needs ceil(630 / 30) = 21 pods. The HPA ramps 1 -> 5 -> 10 -> 20 and then sees a
    # ratio of 630 / (30 x 20) = 1.05: inside its tolerance, so it stays at 20 and demand goes unserved.
    stuck = run_scenario(parse_scenario(scenario(None)))
    ticks = stuck.to_json()["ticks"]
    assert at(ticks, 55 * MIN)["replicas"] == 20
    assert at(ticks, 62 * MIN)["readyReplicas"] == 20 and at(ticks, 62 * MIN)["unserved"] > 0
    assert stuck.summaries["scenario"].unserved_share > 0

    # With the option the value served at 20 pods is 660.001 (just past 1.1 x 600), so the HPA
    # proposes ceil(660.001 / 30) = 23 and every request of the burst is served.
    stepped = run_scenario(parse_scenario(scenario({})))
    ticks = stepped.to_json()["ticks"]
    assert at(ticks, 54 * MIN + 45)["metrics"]["campaign"] == 660.001
    assert at(ticks, 55 * MIN)["replicas"] == 23
    assert at(ticks, 62 * MIN)["readyReplicas"] == 23
    assert stepped.summaries["scenario"].unserved_share == 0
    # At 23 pods 630 is inside the band again and needs no more pods: served unchanged.
    assert at(ticks, 62 * MIN)["metrics"]["campaign"] == 630
    # Outside the burst nothing is stepped (no more pods are implied).
    assert at(ticks, 80 * MIN)["metrics"]["campaign"] == at(stuck.to_json()["ticks"], 80 * MIN)["metrics"]["campaign"]


def test_the_hpas_scale_up_tolerance_sets_the_step() -> None:
    # scaleUp.tolerance 0.02 on the HPA: 630 / 600 = 1.05 is outside it, so the HPA scales to 21 by
    # itself and nothing needs a step.
    doc = scenario({}, behavior={"scaleUp": {"tolerance": "0.02"}})
    ticks = run_scenario(parse_scenario(doc)).to_json()["ticks"]
    assert at(ticks, 55 * MIN)["replicas"] == 21
    assert at(ticks, 55 * MIN)["metrics"]["campaign"] == 630


def test_a_wrong_assumed_flag_is_visible_in_the_simulation() -> None:
    # The controller's flag is 0.2 here but prescaler assumes the default 0.1: the step to 660.001
    # (ratio 1.1) stays inside the real band and the HPA keeps 20 pods. Stating the flag fixes it.
    doc = scenario({})
    doc["controller"] = {"tolerance": 0.2}
    ticks = run_scenario(parse_scenario(doc)).to_json()["ticks"]
    assert at(ticks, 56 * MIN)["replicas"] == 20
    doc = scenario({"tolerance": 0.2})
    doc["controller"] = {"tolerance": 0.2}
    ticks = run_scenario(parse_scenario(doc)).to_json()["ticks"]
    assert at(ticks, 54 * MIN + 45)["metrics"]["campaign"] == 720.001
    assert at(ticks, 56 * MIN)["replicas"] == 25


def test_the_shipped_example_shows_the_stuck_scale_up_and_its_fix() -> None:
    from pathlib import Path

    import yaml

    path = Path(__file__).resolve().parents[2] / "examples" / "sim" / "dead-band.yaml"
    doc = yaml.safe_load(path.read_text())
    stepped = run_scenario(parse_scenario(doc, path.parent)).summaries["scenario"]
    del doc["manifests"][0]["spec"]["stepPastTolerance"]
    stuck = run_scenario(parse_scenario(doc, path.parent)).summaries["scenario"]
    assert (stepped.unserved_share, stepped.max_replicas) == (0.0, 23)
    assert stuck.unserved_share > 0.02 and stuck.max_replicas == 20
