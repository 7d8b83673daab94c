"""The HPA controller model against docs/hpa-algorithm.md: worked examples (§10) and the rules behind them.

Expected sequences are worked out by hand from docs/hpa-algorithm.md (the tables and the algorithm text), not
copied from a run of this code.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from adapter.errors import ValidationError
from adapter.sim.controller import (
    ControllerConfig,
    HpaController,
    PodsReading,
    TickInputs,
    Tolerances,
    external_average_replicas,
    external_value_replicas,
    pods_replicas,
)
from adapter.sim.engine import simulate_hpa
from adapter.sim.hpa_spec import parse_hpa
from adapter.sim.metrics import ExternalFeed
from adapter.sim.workload import StartupDelay

TOL = Tolerances(0.1, 0.1)


def hpa_doc(metrics: list[dict[str, Any]], behavior: Any = None, min_r: int = 1, max_r: int = 50) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "minReplicas": min_r,
        "maxReplicas": max_r,
        "metrics": metrics,
    }
    if behavior is not None:
        spec["behavior"] = behavior
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": spec,
    }


def external(name: str, target_type: str = "AverageValue", target: str = "10") -> dict[str, Any]:
    key = "averageValue" if target_type == "AverageValue" else "value"
    return {"type": "External", "external": {"metric": {"name": name}, "target": {"type": target_type, key: target}}}


def run(
    doc: dict[str, Any],
    series: dict[str, list[float | None]],
    replicas: int = 2,
    delay: float = 0.0,
    config: ControllerConfig | None = None,
) -> list[int]:
    hpa = parse_hpa(doc)
    n = len(next(iter(series.values())))
    feeds = [
        ExternalFeed.from_values(m.name, np.array([math.nan if v is None else v for v in series[m.name]]))
        for m in hpa.metrics
    ]
    times = 15.0 * np.arange(n)
    result = simulate_hpa(hpa, times, feeds, replicas, StartupDelay(value=delay), config)
    return result.replicas.tolist()


# ---------------------------------------------------------------- §10 worked examples


def test_example_1_behavior_defaults_ramp() -> None:
    # 2 -> 6 (max(2+4, 2*2)) -> 12 -> 20 (limit 24) -> 20 (ratio 1.0 holds)
    out = run(hpa_doc([external("rps")], behavior={}), {"rps": [200] * 4})
    assert out == [6, 12, 20, 20]


def test_example_1_legacy_ramp() -> None:
    # legacy limit max(2*cur, 4): 2 -> 4 -> 8 -> 16 -> 20
    out = run(hpa_doc([external("rps")]), {"rps": [200] * 4})
    assert out == [4, 8, 16, 20]


@pytest.mark.parametrize("behavior", [None, {}])
def test_example_2_scale_down_after_window_strict_age(behavior: Any) -> None:
    # metric 200 at t=0..45, 20 from t=60; the proposal 20 stored at t=45 has age 300 at t=345,
    # which is not < 300, so the window max drops to 2 there (and not at t=330).
    series = [200] * 4 + [20] * 21  # t = 0 .. 360
    out = run(hpa_doc([external("rps")], behavior=behavior), {"rps": series})
    by_time = dict(zip(range(0, 15 * len(series), 15), out))
    assert by_time[45] == 20
    assert all(by_time[t] == 20 for t in range(60, 331, 15))
    assert by_time[345] == 2
    assert by_time[360] == 2


def test_example_2_conditions_say_stabilized() -> None:
    hpa = parse_hpa(hpa_doc([external("rps")], behavior={}))
    ctl = HpaController(hpa)
    cur = 20
    ctl.recs = [(20, 45.0)]
    decision = ctl.reconcile(60.0, TickInputs(spec=cur, status=cur, ready=cur, npods=cur, readings=[20_000]))
    assert decision.replicas == 20 and decision.prenormalized == 2
    assert decision.conditions["AbleToScale"] == "ScaleDownStabilized"


def test_example_2_tolerance_edges_at_20_pods() -> None:
    # target 10, cur=20: 215 -> ratio 1.075 -> hold 20; 225 -> 1.125 -> ceil(22.5) = 23
    assert external_average_replicas(215_000, 10_000, 20, TOL) == 20
    assert external_average_replicas(225_000, 10_000, 20, TOL) == 23
    out = run(hpa_doc([external("rps")], behavior={}), {"rps": [215, 225]}, replicas=20)
    assert out == [20, 23]


def test_example_3_value_target_runs_away_at_pod_readiness_pace() -> None:
    # Value target 100, metric 150, pods Ready 30 s after creation, maxR 10:
    # ready 2,2,3,3,5,5,8 -> proposal ceil(1.5*ready) -> spec 3,3,5,5,8,8,10 (TooManyReplicas), 10...
    doc = hpa_doc([external("q", "Value", "100")], behavior={}, max_r=10)
    hpa = parse_hpa(doc)
    feeds = [ExternalFeed.from_values("q", np.full(10, 150.0))]
    result = simulate_hpa(hpa, 15.0 * np.arange(10), feeds, 2, StartupDelay(value=30.0))
    assert result.ready.tolist()[:7] == [2, 2, 3, 3, 5, 5, 8]
    assert result.desired[:7] == [3, 3, 5, 5, 8, 8, 12]
    assert result.replicas.tolist() == [3, 3, 5, 5, 8, 8, 10, 10, 10, 10]


def test_example_4_one_tick_spike_legacy() -> None:
    # legacy: 2->4 (t0), 8, 16, 20 (t45), holds 20 through t=285, 2 at t=300
    series = [200] + [20] * 21  # t = 0 .. 315
    out = run(hpa_doc([external("rps")]), {"rps": series})
    by_time = dict(zip(range(0, 15 * len(series), 15), out))
    assert [by_time[t] for t in (0, 15, 30, 45)] == [4, 8, 16, 20]
    assert all(by_time[t] == 20 for t in range(45, 286, 15))
    assert by_time[300] == 2 and by_time[315] == 2


def test_example_4_one_tick_spike_behavior() -> None:
    # behavior defaults: 2->6 at t0, holds 6 (clamp(cur, upRec=2, dnRec=20)) through t=285, 2 at t=300
    series = [200] + [20] * 21
    out = run(hpa_doc([external("rps")], behavior={}), {"rps": series})
    by_time = dict(zip(range(0, 15 * len(series), 15), out))
    assert all(by_time[t] == 6 for t in range(0, 286, 15))
    assert by_time[300] == 2


def test_wire_examples_value_and_average() -> None:
    # docs/api.md: Value target 10, items 5+7, 3 ready pods: ratio 1.2 -> ceil(3.6) = 4
    assert external_value_replicas(12_000, 10_000, spec=3, ready=3, npods=3, tol=TOL) == 4
    # AverageValue target 5, sum 12, status 3: ratio 0.8 -> ceil(12/5) = 3
    assert external_average_replicas(12_000, 5_000, 3, TOL) == 3


# ---------------------------------------------------------------- proposals and tolerance


def test_tolerance_is_inclusive_at_both_ends() -> None:
    # cur 20, target 10: 220 -> ratio exactly 1.1 (within), 180 -> 0.9 (within)
    assert external_average_replicas(220_000, 10_000, 20, TOL) == 20
    assert external_average_replicas(180_000, 10_000, 20, TOL) == 20
    assert external_average_replicas(221_000, 10_000, 20, TOL) == 23
    assert external_average_replicas(179_000, 10_000, 20, TOL) == 18


def test_value_target_uses_spec_when_within_and_ready_otherwise() -> None:
    # within tolerance: returns SPEC (5), even though only 2 pods are ready
    assert external_value_replicas(105_000, 100_000, spec=5, ready=2, npods=5, tol=TOL) == 5
    # outside: ceil(ratio * READY) = ceil(2 * 2) = 4 (a scale-down proposal while pods start)
    assert external_value_replicas(200_000, 100_000, spec=5, ready=2, npods=5, tol=TOL) == 4
    # all pods unready -> 0
    assert external_value_replicas(200_000, 100_000, spec=5, ready=0, npods=5, tol=TOL) == 0


def test_value_target_without_pods_is_a_metric_error() -> None:
    from adapter.sim.controller import MetricError

    with pytest.raises(MetricError):
        external_value_replicas(200_000, 100_000, spec=5, ready=0, npods=0, tol=TOL)


def test_average_value_uses_status_not_spec() -> None:
    # status 4 while spec is already 8: ratio 40/(10*4) = 1.0 -> within -> proposal 4 (= status)
    hpa = parse_hpa(hpa_doc([external("rps")], behavior={}))
    ctl = HpaController(hpa)
    d = ctl.reconcile(0.0, TickInputs(spec=8, status=4, ready=4, npods=4, readings=[40_000]))
    assert d.prenormalized == 4


def test_scale_from_zero_uses_plain_ceiling() -> None:
    assert external_value_replicas(250_000, 100_000, spec=0, ready=0, npods=0, tol=TOL) == 3
    # AverageValue with status 0: x/0 is +inf (not within) -> ceil(usage/target)
    assert external_average_replicas(250_000, 100_000, 0, TOL) == 3
    assert external_average_replicas(0, 100_000, 0, TOL) == 0


def test_per_hpa_tolerance_overrides_each_direction() -> None:
    behavior = {"scaleUp": {"tolerance": "0.05"}, "scaleDown": {"tolerance": "0.5", "stabilizationWindowSeconds": 0}}
    doc = hpa_doc([external("rps")], behavior=behavior)
    # ratio 1.075 is outside a 5 % up-tolerance: 20 -> ceil(21.5) = 22
    assert run(doc, {"rps": [215]}, replicas=20) == [22]
    # ratio 0.6 is inside a 50 % down-tolerance: hold
    assert run(doc, {"rps": [120]}, replicas=20) == [20]
    # with the feature gate off the global 10 % applies in both directions
    off = ControllerConfig(configurable_tolerance=False)
    assert run(doc, {"rps": [215]}, replicas=20, config=off) == [20]
    assert run(doc, {"rps": [120]}, replicas=20, config=off) == [12]


def test_global_tolerance_flag() -> None:
    doc = hpa_doc([external("rps")])
    assert run(doc, {"rps": [215]}, replicas=20, config=ControllerConfig(tolerance=0.05)) == [22]


def test_pods_metric_average_and_unready_pods() -> None:
    # 4 ready pods at 30 each, target 10: ratio 3.0 -> ceil(3 * 4) = 12
    assert pods_replicas(PodsReading((30_000,) * 4), 10_000, spec=4, npods=4, tol=TOL) == 12
    # 2 pending pods count as 0 on a scale-up: avg = 120/6 = 20 -> ratio 2 -> ceil(2 * 6) = 12
    assert pods_replicas(PodsReading((30_000,) * 4, unready=2), 10_000, spec=6, npods=6, tol=TOL) == 12
    # integer average: (10001+10000)//2 = 10000 -> ratio 1.0 -> spec
    assert pods_replicas(PodsReading((10_001, 10_000)), 10_000, spec=2, npods=2, tol=TOL) == 2


# ---------------------------------------------------------------- several metrics and failures


def test_max_across_metrics() -> None:
    doc = hpa_doc([external("a"), external("b")], behavior={})
    # a proposes ceil(40/10) = 4, b proposes ceil(60/10) = 6 (from 2: limit 6)
    assert run(doc, {"a": [40], "b": [60]}) == [6]


def test_failing_metric_blocks_scale_down_but_not_scale_up() -> None:
    doc = hpa_doc([external("a"), external("b")], behavior={"scaleDown": {"stabilizationWindowSeconds": 0}})
    # cur 10; a wants 2, b fails -> 2 < spec -> abort: hold 10
    assert run(doc, {"a": [20], "b": [None]}, replicas=10) == [10]
    # a wants 15, b fails -> scale up is allowed
    assert run(doc, {"a": [150], "b": [None]}, replicas=10) == [15]
    # both fail -> nothing happens
    assert run(doc, {"a": [None], "b": [None]}, replicas=10) == [10]
    # without the failure the same a-value scales down
    assert run(doc, {"a": [20], "b": [20]}, replicas=10) == [2]


def test_aborted_tick_stores_no_recommendation() -> None:
    doc = hpa_doc([external("a")], behavior={"scaleDown": {"stabilizationWindowSeconds": 60}})
    hpa = parse_hpa(doc)
    ctl = HpaController(hpa)
    ctl.reconcile(0.0, TickInputs(10, 10, 10, 10, [100_000]))  # proposal 10 (ratio 1)
    before = list(ctl.recs or [])
    decision = ctl.reconcile(15.0, TickInputs(10, 10, 10, 10, [None]))
    assert decision.outcome == "aborted" and decision.replicas == 10
    assert ctl.recs == before


def test_within_tolerance_metric_is_a_floor_for_the_max() -> None:
    doc = hpa_doc([external("a"), external("b")], behavior={"scaleDown": {"stabilizationWindowSeconds": 0}})
    # a is within tolerance (proposes status 10); b wants 2; the max is 10: no scale-down
    assert run(doc, {"a": [100], "b": [20]}, replicas=10) == [10]


# ---------------------------------------------------------------- rate limits and windows


def test_percent_scale_up_float_ceiling() -> None:
    # ceil(50 * 1.1) = 56 because 50*1.1 = 55.00000000000001
    doc = hpa_doc(
        [external("rps")],
        max_r=200,
        behavior={"scaleUp": {"policies": [{"type": "Percent", "value": 10, "periodSeconds": 60}]}},
    )
    assert run(doc, {"rps": [1000]}, replicas=50) == [56]


def test_percent_scale_down_truncates_and_counts_events_in_period() -> None:
    # int(90 * 0.7) = 62 (90*0.7 = 62.99999999999999). Period 60 s: at t=15..45 the t=0 event (-28)
    # is inside the period, so the start is 90 again and the limit 62 == cur; at t=60 its age is 60,
    # not < 60, so start = 62 and int(62*0.7) = 43.
    doc = hpa_doc(
        [external("rps")],
        max_r=100,
        behavior={
            "scaleDown": {
                "stabilizationWindowSeconds": 0,
                "policies": [{"type": "Percent", "value": 30, "periodSeconds": 60}],
            }
        },
    )
    assert run(doc, {"rps": [10] * 6}, replicas=90) == [62, 62, 62, 62, 43, 43]


def test_pods_policy_with_period_and_select_min() -> None:
    behavior = {
        "scaleUp": {
            "selectPolicy": "Min",
            "policies": [
                {"type": "Pods", "value": 3, "periodSeconds": 30},
                {"type": "Percent", "value": 100, "periodSeconds": 15},
            ],
        }
    }
    doc = hpa_doc([external("rps")], behavior=behavior)
    # t0: min(2+3, 4) = 4. t15: Pods period holds the +2: start 2 -> 5; Percent start 4 -> 8; min 5.
    # t30: the t0 event has age 30 (out); t15 event (+1) is in: start 4 -> 7; Percent 10; min 7.
    assert run(doc, {"rps": [400] * 3}) == [4, 5, 7]


def test_select_policy_disabled_blocks_direction() -> None:
    doc = hpa_doc([external("rps")], behavior={"scaleUp": {"selectPolicy": "Disabled"}})
    assert run(doc, {"rps": [400] * 3}) == [2, 2, 2]


def test_scale_up_stabilization_window_takes_the_window_min() -> None:
    doc = hpa_doc([external("rps")], behavior={"scaleUp": {"stabilizationWindowSeconds": 30}})
    # recs seed (2, t0). t0: d=20, upRec = min(20, 2) = 2 -> hold; t15: still 2 in window; t30: the
    # seed has age 30 (out) -> upRec = 20 -> limit max(2+4, 4) = 6
    assert run(doc, {"rps": [200] * 4}) == [2, 2, 6, 12]


def test_out_of_range_current_replicas_is_corrected_without_metrics() -> None:
    doc = hpa_doc([external("rps")], behavior={}, min_r=3, max_r=10)
    assert run(doc, {"rps": [None]}, replicas=15) == [10]
    assert run(doc, {"rps": [None]}, replicas=1) == [3]


def test_zero_replicas_with_nonzero_min_is_disabled() -> None:
    doc = hpa_doc([external("rps")], behavior={})
    assert run(doc, {"rps": [500, 500]}, replicas=0) == [0, 0]


def test_scale_from_zero_with_min_zero() -> None:
    doc = hpa_doc([external("rps", "Value", "10")], behavior={}, min_r=0)
    # cur 0: ceil(ratio) = ceil(25/10) = 3, limit max(0+4, 0) = 4
    assert run(doc, {"rps": [25]}, replicas=0) == [3]


def test_legacy_has_no_scale_down_rate_limit_and_respects_min() -> None:
    doc = hpa_doc([external("rps")], min_r=3)
    assert run(doc, {"rps": [0] * 22}, replicas=40)[-1] == 3


# ---------------------------------------------------------------- HPA manifest validation


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d["spec"].pop("maxReplicas"), "hpa.spec.maxReplicas"),
        (
            lambda d: d["spec"]["metrics"][0]["external"]["target"].update(averageValue="ten"),
            "hpa.spec.metrics[0].external.target.averageValue",
        ),
        (lambda d: d["spec"]["metrics"][0].update(type="Resource"), "hpa.spec.metrics[0].type"),
        (
            lambda d: d["spec"].update(behavior={"scaleUp": {"selectPolicy": "Fastest"}}),
            "hpa.spec.behavior.scaleUp.selectPolicy",
        ),
        (lambda d: d["spec"].update(minReplicas=60), "hpa.spec.minReplicas"),
    ],
)
def test_bad_hpa_manifest_names_the_field(mutate: Any, field: str) -> None:
    doc = hpa_doc([external("rps")])
    mutate(doc)
    with pytest.raises(ValidationError) as err:
        parse_hpa(doc)
    assert err.value.path == field


def test_out_of_range_correction_is_a_scale_event_for_the_policies() -> None:
    # cur 60 > maxR 50 -> 50 at t0, recorded as a scale-down of 10. Pods policy -5 per 60 s: at t15
    # the period start is 50 + 10 = 60, limit 55 > cur, so it holds 50; at t60 the event has aged out
    # (60 is not < 60): limit 50 - 5 = 45.
    doc = hpa_doc(
        [external("rps")],
        behavior={
            "scaleDown": {
                "stabilizationWindowSeconds": 0,
                "policies": [{"type": "Pods", "value": 5, "periodSeconds": 60}],
            }
        },
    )
    assert run(doc, {"rps": [100] * 5}, replicas=60) == [50, 50, 50, 50, 45]
