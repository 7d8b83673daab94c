"""stepPastTolerance (adapter.pipeline.deadband): the rule, checked against the simulator's copy of the
HPA controller's own proposal functions (adapter.sim.controller), so "the HPA acts" is the controller's
verdict, not a second copy of the arithmetic."""

from __future__ import annotations

import math
import random

import pytest

from adapter.errors import ValidationError
from adapter.labels import parse_selector
from adapter.pipeline.deadband import (
    CLAMPED,
    NO_STEP,
    STEPPED,
    UNKNOWN,
    HpaBand,
    ToleranceSteps,
    milli,
    step_past_band,
)
from adapter.pipeline.query import TargetValue
from adapter.policy import ToleranceStep
from adapter.resources import parse_virtual_metric
from adapter.sim.controller import Tolerances, external_average_replicas, external_value_replicas
from adapter.sim.hpa_band import band_for
from adapter.sim.hpa_spec import parse_hpa
from tests.helpers import NOW, entry, external_hpa, loaded_engine, metric, run, schedule_event

NO_DOWN = 0.1  # the scale-down side never matters for a step up


def average(replicas: int, target: float = 10.0, tolerance: float | None = 0.1) -> HpaBand:
    return HpaBand("AverageValue", round(target * 1000), tolerance, replicas)


def hpa_average_proposal(value: float, band: HpaBand, tolerance: float) -> int:
    return external_average_replicas(milli(value), band.target_milli, band.replicas, Tolerances(tolerance, NO_DOWN))


# ---------------------------------------------------------------- AverageValue


def test_a_need_inside_the_band_is_stepped_just_past_it() -> None:
    band = average(20)  # target 10 per pod, 20 pods: the band is [180, 220]
    step = step_past_band(210.0, band)  # 21 pods needed, ratio 1.05: the HPA would keep 20
    assert hpa_average_proposal(210.0, band, 0.1) == 20
    assert step.reason == STEPPED and step.needed == 21
    assert step.value == 220.001  # the smallest milli value with ratio > 1.1
    assert hpa_average_proposal(step.value, band, 0.1) == 23
    assert hpa_average_proposal(step.value - 0.001, band, 0.1) == 20  # one milli less is inside


def test_band_edges() -> None:
    band = average(20)
    assert step_past_band(200.0, band).reason == NO_STEP  # exactly 20 pods: nothing to add
    assert step_past_band(200.001, band).value == 220.001  # 21 pods needed by a milli
    assert step_past_band(220.0, band).value == 220.001  # ratio exactly 1.1 is inside (inclusive)
    assert step_past_band(220.001, band).reason == NO_STEP  # already outside: the HPA scales itself
    assert step_past_band(150.0, band).reason == NO_STEP  # a scale-down is never touched
    assert step_past_band(195.0, band).value == 195.0


def test_zero_replicas_and_values_the_hpa_cannot_read_are_left_alone() -> None:
    assert step_past_band(5.0, average(0)).reason == NO_STEP  # from zero the HPA has no tolerance
    assert step_past_band(math.nan, average(20)).reason == UNKNOWN
    assert step_past_band(1e30, average(20)).reason == NO_STEP


def test_unknown_hpa_serves_the_value_unchanged() -> None:
    step = step_past_band(210.0, None)
    assert (step.value, step.reason) == (210.0, UNKNOWN)


def test_max_clamp_wins_over_the_step() -> None:
    step = step_past_band(210.0, average(20), maximum=215.0)
    assert (step.value, step.reason) == (210.0, CLAMPED)


def test_the_hpas_own_scale_up_tolerance_replaces_the_assumed_flag() -> None:
    assert step_past_band(210.0, average(20, tolerance=0.05)).value == 210.001
    assert step_past_band(210.0, average(20, tolerance=0.0)).reason == NO_STEP  # no band: HPA acts
    # No tolerance of its own: the VirtualMetric's assumption of the controller flag is used.
    assert step_past_band(210.0, average(20, tolerance=None), default_tolerance=0.2).value == 240.001


def test_per_direction_tolerance_from_the_hpa_manifest() -> None:
    def manifest(behavior: dict | None) -> dict:
        return external_hpa(namespace="ns", behavior=behavior, max_replicas=50)

    only_down = band_for(parse_hpa(manifest({"scaleDown": {"tolerance": 0.5}})), "rps", "web", 20)
    assert only_down is not None and only_down.tolerance_up is None  # the down side is not the up side
    assert step_past_band(210.0, only_down).value == 220.001
    up = band_for(parse_hpa(manifest({"scaleUp": {"tolerance": 0.02}})), "rps", "web", 20)
    assert up is not None and up.tolerance_up == 0.02 and up.hpa == "ns/web"
    assert step_past_band(203.0, up).value == 204.001
    legacy = band_for(parse_hpa(manifest(None)), "rps", "web", 20)
    assert legacy is not None and legacy.tolerance_up is None
    # Not this HPA's metric or target: unknown, so unchanged.
    assert band_for(parse_hpa(manifest(None)), "rps", "other", 20) is None
    assert band_for(parse_hpa(manifest(None)), "cpu", "web", 20) is None


def test_random_values_step_minimally_and_the_hpa_then_scales_up() -> None:
    rng = random.Random(13)
    for _ in range(3000):
        replicas = rng.randint(1, 60)
        target = rng.choice([0.5, 1.0, 7.0, 10.0, 33.3, 1000.0])
        tolerance = rng.choice([0.0, 0.01, 0.05, 0.1, 0.25])
        band = average(replicas, target, tolerance)
        value = round(rng.uniform(0.5, 1.4) * target * replicas, 3)
        step = step_past_band(value, band)
        needed = math.ceil(milli(value) / band.target_milli)
        before = hpa_average_proposal(value, band, tolerance)
        after = hpa_average_proposal(step.value, band, tolerance)
        assert step.value >= value
        if needed > replicas:
            assert after >= needed  # whatever the value was, the HPA now adds the pods
            if step.reason == STEPPED:
                assert before == replicas  # it was stuck in the band
                assert hpa_average_proposal(step.value - 0.001, band, tolerance) == replicas  # minimal
        else:
            assert step.value == value and after == before


# ---------------------------------------------------------------- Value targets


def value_band(spec: int, ready: int, target: float = 100.0, tolerance: float = 0.1) -> HpaBand:
    return HpaBand("Value", round(target * 1000), tolerance, spec, spec, ready)


def test_value_target_is_stepped_past_the_band() -> None:
    band = value_band(spec=4, ready=4)  # ratio = value / 100; proposal ceil(ratio x ready)
    tol = Tolerances(0.1, NO_DOWN)
    assert external_value_replicas(milli(105.0), band.target_milli, 4, 4, 4, tol) == 4  # stuck
    step = step_past_band(105.0, band)
    assert step.reason == STEPPED and step.value == 110.001
    assert external_value_replicas(milli(step.value), band.target_milli, 4, 4, 4, tol) == 5


def test_value_target_with_pods_still_starting_needs_no_step() -> None:
    # ready 2 of 4: ceil(1.05 x 2) = 3 <= 4 pods: no more replicas implied, nothing to step
    assert step_past_band(105.0, value_band(spec=4, ready=2)).reason == NO_STEP
    assert step_past_band(120.0, value_band(spec=4, ready=4)).reason == NO_STEP  # outside already


def test_bad_band_inputs_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="target type"):
        HpaBand("Utilization", 1000, 0.1, 3)
    with pytest.raises(ValueError, match="positive"):
        HpaBand("AverageValue", 0, 0.1, 3)
    with pytest.raises(ValueError, match="tolerance"):
        HpaBand("AverageValue", 1000, -0.1, 3)


# ---------------------------------------------------------------- the VirtualMetric field


def vm_doc(block: object) -> dict:
    return metric("rps", stepPastTolerance=block)


def test_parse_step_past_tolerance() -> None:
    assert parse_virtual_metric(metric("rps")).policy.tolerance_step is None  # off by default
    assert parse_virtual_metric(vm_doc({})).policy.tolerance_step == ToleranceStep(True, 0.1)
    assert parse_virtual_metric(vm_doc({"scaleUp": True, "tolerance": 0.05})).policy.tolerance_step == ToleranceStep(
        True, 0.05
    )
    assert parse_virtual_metric(vm_doc({"scaleUp": False})).policy.tolerance_step is None


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"tolerance": 1}, "spec.stepPastTolerance.tolerance"),
        ({"tolerance": -0.1}, "spec.stepPastTolerance.tolerance"),
        ({"tolerance": "a lot"}, "spec.stepPastTolerance.tolerance"),
        ({"scaleUp": "yes"}, "spec.stepPastTolerance.scaleUp"),
        ({"scaleDown": True}, "spec.stepPastTolerance.scaleDown"),
        (True, "spec.stepPastTolerance"),
    ],
)
def test_bad_step_past_tolerance_is_a_validation_error(block: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace(".", r"\.")):
        parse_virtual_metric(vm_doc(block))


# ---------------------------------------------------------------- the server's answers and status


def test_tolerance_steps_only_step_a_single_item_answer() -> None:
    vm = parse_virtual_metric(vm_doc({}))
    steps = ToleranceSteps(lambda metric, namespace, resource: average(20))
    one = (TargetValue("web", "ns", {"resource": "web"}, 210.0),)
    (item,), changed = steps.apply(one, vm)
    assert item.value == 220.001 and changed
    two = one + (TargetValue("api", "ns", {"resource": "api"}, 210.0),)
    assert steps.apply(two, vm) == (two, False)  # the HPA sums them: no single target to step
    plain = parse_virtual_metric(metric("rps"))
    assert steps.apply(one, plain) == (one, False)  # the option is off


def test_engine_steps_the_hpas_answer_and_reports_it_in_status() -> None:
    docs = [
        vm_doc({}),
        schedule_event("ev", [{"start": NOW - 60, "end": NOW + 600, "values": {"n": 210}}], [entry("ns", "web", "n")]),
    ]

    async def go() -> tuple:
        engine = await loaded_engine(docs)
        selector = parse_selector("resource=web")
        unknown = engine.query("rps", "ns", selector, NOW)
        unknown_status = engine.statuses()[("VirtualMetric", "rps")][1]["toleranceStep"]
        engine.tolerance_steps.lookup = lambda metric, namespace, resource: (
            HpaBand("AverageValue", 10_000, None, 20, hpa="ns/web") if (namespace, resource) == ("ns", "web") else None
        )
        stepped = engine.query("rps", "ns", selector, NOW)
        status = engine.statuses()[("VirtualMetric", "rps")][1]["toleranceStep"]
        await engine.stop()
        return unknown, unknown_status, stepped, status

    unknown, unknown_status, stepped, status = run(go())
    assert [v.value for v in unknown.values] == [210.0]  # nothing known about the HPA: unchanged
    assert unknown_status["targets"][0]["reason"] == UNKNOWN and "unchanged" in unknown_status["targets"][0]["message"]
    assert [v.value for v in stepped.values] == [220.001]
    assert status["targets"] == [
        {"target": "ns/web", "reason": STEPPED, "hpa": "ns/web", "value": 210.0, "served": 220.001}
    ]


def test_status_and_spec_fit_the_crd_schema() -> None:
    import importlib.util
    import sys
    from pathlib import Path

    from adapter.store.status import complete_status

    crds = Path(__file__).resolve().parents[2] / "deploy" / "crds"
    spec = importlib.util.spec_from_file_location("prescaler_crd_validate_deadband", crds / "validate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    validators = module.load_validators(crds)
    doc = vm_doc({"scaleUp": True, "tolerance": 0.05})
    steps = ToleranceSteps(lambda metric, namespace, resource: average(20) if resource == "web" else None)
    vm = parse_virtual_metric(doc)
    for name in ("web", "api"):
        steps.apply((TargetValue(name, "ns", {"resource": name}, 210.0),), vm)
    status = {"observedGeneration": 0, "targets": 1, "toleranceStep": steps.status(vm)}
    obj = {**doc, "status": complete_status(0, status, {}, "2026-11-29T00:00:00Z")}
    assert [r["reason"] for r in obj["status"]["toleranceStep"]["targets"]] == [UNKNOWN, STEPPED]
    assert module.validate_documents([obj], validators) == []
    assert module.validate_documents([vm_doc({"tolerance": 1})], validators) != []  # 1 is excluded, as in the code
