"""Full scenarios: traffic, workload, prescaler manifests (schedule, api-recorded, forecast), baselines,
summary figures, JSON and PNG output. Expected values are derived in the comments."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from adapter.errors import ValidationError
from adapter.policy import MetricPolicy
from adapter.resources import MetricEntry, ResourceRef, SourceSpec, VirtualMetric, VirtualMetricEvent
from adapter.sim.cli import add_parsers
from adapter.sim.engine import RunResult, run_scenario, summarize
from adapter.sim.metrics import (
    ForecastSettings,
    PrescalerModel,
    forecast_snapshots,
    seasonal_naive,
    served_milli,
)
from adapter.sim.quantity import QuantityError, approximate_float, milli_value, parse_quantity, to_milli
from adapter.sim.scenario import parse_scenario
from adapter.sim.traffic import trace_from_arrays
from adapter.sim.workload import Pods, StartupDelay, parse_startup_delay
from adapter.sources.base import CommonSourceSettings

MIDNIGHT = 1_700_006_400  # 2023-11-15T00:00:00Z
MIN = 60


def hpa(*metrics: tuple[str, str], min_r: int = 1, max_r: int = 40, behavior: Any = None) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "service-a", "namespace": "service-a"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "service-a"},
            "minReplicas": min_r,
            "maxReplicas": max_r,
            "behavior": behavior or {},
            "metrics": [
                {
                    "type": kind,
                    (kind.lower()): {
                        "metric": {"name": name, "selector": {"matchLabels": {"resource": "service-a"}}},
                        "target": {"type": "AverageValue", "averageValue": "30"},
                    },
                }
                for name, kind in metrics
            ],
        },
    }


def virtual_metric(lead: str = "0s", name: str = "campaign") -> dict[str, Any]:
    return {
        "apiVersion": "prescaler.pingpong.ai/v1",
        "kind": "VirtualMetric",
        "metadata": {"name": name},
        "spec": {"defaultValue": 0, "mergeStrategy": "Sum", "leadTime": lead},
    }


def event(source: dict[str, Any], expression: str = "n", name: str = "vme") -> dict[str, Any]:
    return {
        "apiVersion": "prescaler.pingpong.ai/v1",
        "kind": "VirtualMetricEvent",
        "metadata": {"name": name},
        "spec": {
            "source": source,
            "metrics": [
                {
                    "name": "campaign",
                    "resource": {"name": "service-a", "namespace": "service-a"},
                    "value": {"expression": expression},
                }
            ],
        },
    }


def burst_traffic(base: float = 30.0, burst: float = 600.0) -> list[list[float]]:
    """Two hours at 1-min steps: `base`, plus `burst` during 01:00-01:10 UTC."""
    return [[MIDNIGHT + i * MIN, base + (burst if 60 <= i < 70 else 0.0)] for i in range(120)]


def campaign_scenario(lead: str = "6m") -> dict[str, Any]:
    return {
        # scale-up tolerance 0 (docs/api.md): at 20 pods a need for 21 (ratio 1.05) is acted on
        "hpa": hpa(("rps-now", "External"), ("campaign", "External"), behavior={"scaleUp": {"tolerance": "0"}}),
        "tick": "15s",
        "workload": {"replicas": 1, "startupDelay": "5m", "capacityPerPod": 30},
        "traffic": {"points": burst_traffic()},
        "metrics": {"rps-now": {"from": "traffic"}, "campaign": {"from": "prescaler"}},
        "manifests": [
            virtual_metric(lead),
            event(
                {"schedule": {"windows": [{"cron": "0 1 * * *", "duration": "10m", "values": {"n": 600}}]}}, "n + 30"
            ),
        ],
        "baselines": {"leadTime": "5m"},
    }


def at(ticks: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    return next(t for t in ticks if t["time"] == seconds)


# ---------------------------------------------------------------- prescaler: schedule source


def test_schedule_vme_prescales_before_the_burst() -> None:
    result = run_scenario(parse_scenario(campaign_scenario()))
    ticks = result.to_json()["ticks"]
    # V(t) = max of F over [t, t + 6m]: 630 (n + 30) from 00:54 until the window ends at 01:10.
    assert at(ticks, 53 * MIN + 45)["metrics"]["campaign"] == 0
    assert at(ticks, 54 * MIN)["metrics"]["campaign"] == 630
    assert at(ticks, 69 * MIN + 45)["metrics"]["campaign"] == 630
    assert at(ticks, 70 * MIN)["metrics"]["campaign"] == 0
    # ceil(630/30) = 21 pods, ramped 1 -> 5 -> 10 -> 20 -> 21 from 00:54:00; Ready 5 min later
    assert [at(ticks, 54 * MIN + s)["replicas"] for s in (0, 15, 30, 45)] == [5, 10, 20, 21]
    assert at(ticks, 60 * MIN)["readyReplicas"] == 21
    assert all(at(ticks, 60 * MIN + s)["unserved"] == 0 for s in range(0, 600, 15))
    # the reactive baseline only sees the burst when it arrives: 5 min of start-up leave demand unserved
    summaries = result.summaries
    assert summaries["scenario"].unserved_share == 0
    assert summaries["reactive"].unserved_share > 0.2
    assert summaries["oracle"].unserved_share == 0


def test_adapter_latency_delays_the_prescaler_value() -> None:
    doc = campaign_scenario()
    doc["metrics"]["campaign"] = {"from": "prescaler", "latency": "30s"}
    ticks = run_scenario(parse_scenario(doc)).to_json()["ticks"]
    assert at(ticks, 54 * MIN + 15)["metrics"]["campaign"] == 0
    assert at(ticks, 54 * MIN + 30)["metrics"]["campaign"] == 630


# ---------------------------------------------------------------- prescaler: api responses replayed


def recorded_scenario(responses: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "hpa": hpa(("campaign", "External")),
        "tick": "15s",
        "start": MIDNIGHT,
        "duration": "40m",
        "workload": {"replicas": 1},
        "metrics": {"campaign": {"from": "prescaler"}},
        "manifests": [virtual_metric(), event({"api": {"url": "https://stage.example/service-a/metrics"}})],
        "recorded": {"vme": responses},
    }


def test_api_recorded_latest_response_is_the_snapshot() -> None:
    item = {"start": MIDNIGHT + 20 * MIN, "end": MIDNIGHT + 30 * MIN, "values": {"n": 300}}
    doc = recorded_scenario([{"at": "0s", "items": []}, {"at": "25m", "items": [item]}, {"at": "27m", "items": []}])
    ticks = run_scenario(parse_scenario(doc)).to_json()["ticks"]
    value = {t["time"]: t["metrics"]["campaign"] for t in ticks}
    # known only from 25m (the window started at 20m), gone again when the 27m snapshot replaces it
    assert value[24 * MIN + 45] == 0
    assert value[25 * MIN] == 300 and value[26 * MIN + 45] == 300
    assert value[27 * MIN] == 0
    # 300/30 = 10 pods wanted at 25m: 1 -> 5 (limit max(1+4, 2))
    assert at(ticks, 25 * MIN)["replicas"] == 5


def test_api_source_without_recorded_responses_is_an_error() -> None:
    doc = recorded_scenario([])
    del doc["recorded"]
    with pytest.raises(ValidationError) as err:
        run_scenario(parse_scenario(doc))
    assert err.value.path == "recorded.vme"


def test_served_values_are_rounded_like_the_adapter() -> None:
    # the adapter serves format_milli(V) (half up); 1.0005 -> "1001m"; 2.0004 -> "2"
    assert served_milli(1.0005) == 1001
    assert served_milli(2.0004) == 2000


# ---------------------------------------------------------------- prescaler: forecast


def daily_trace(days: int = 3, step: float = 300.0) -> Any:
    t = MIDNIGHT + step * np.arange(int(days * 86400 / step))
    values = 100 + 50 * np.sin(2 * np.pi * (t % 86400) / 86400)
    return trace_from_arrays(t, values)


def test_forecast_snapshots_cover_the_next_bins_after_the_history() -> None:
    trace = daily_trace()
    settings = ForecastSettings(refit=1800.0, model="seasonalNaive")
    lo = MIDNIGHT + 2 * 86400
    snaps = forecast_snapshots(trace, lo, lo + 3600, settings, lead=300.0, fit=seasonal_naive)
    assert snaps.times == [lo, lo + 1800, lo + 3600]
    first = snaps.items[0]
    # history ends with the bin [lo - 300, lo); the first forecast bin starts at lo
    assert first[0].start == lo and first[0].end == lo + 300
    # horizon = refit + lead + step = 2400 s = 8 bins; seasonal naive repeats yesterday's values
    assert len(first) == 8
    assert first[0].values["forecast"] == pytest.approx(float(trace.at(np.array([lo - 86400]))[0]))


def test_forecast_vme_feeds_the_timeline() -> None:
    trace = daily_trace()
    vm = VirtualMetric(name="campaign", metric_name="campaign", policy=MetricPolicy(lead_time=300.0))
    vme = VirtualMetricEvent(
        name="fc",
        source=SourceSpec(
            kind="forecast", config=None, common=CommonSourceSettings(), raw={"forecast": {"model": "seasonalNaive"}}
        ),
        metrics=(MetricEntry("campaign", ResourceRef("service-a", "service-a"), "forecast * 2"),),
    )
    model = PrescalerModel([vm], [vme], trace=trace, forecast=ForecastSettings(refit=1800.0))
    lo = MIDNIGHT + 2 * 86400
    times = lo + 15.0 * np.arange(240)
    values = model.values("campaign", "service-a", "service-a", times)
    # V(t) = 2 * max(yesterday's value over [t, t + 5m]) up to the forecaster's own rounding
    expected = [2 * trace.at(np.arange(t - 86400, t - 86400 + 301, 15.0)).max() for t in times]
    assert np.allclose(values, expected, rtol=0.02)


# ---------------------------------------------------------------- workload, traffic, summary


def test_pods_metric_from_traffic_divides_by_ready_pods() -> None:
    doc = {
        "hpa": hpa(("rps", "Pods")),
        "tick": "15s",
        "workload": {"replicas": 2, "capacityPerPod": 30},
        "traffic": {"points": [[0, 120], [60, 120]]},
        "duration": "30s",
        "baselines": False,
        "metrics": {"rps": {"from": "traffic"}},
    }
    ticks = run_scenario(parse_scenario(doc)).to_json()["ticks"]
    # each of 2 ready pods reports 60 against a target of 30: ratio 2 -> ceil(2 * 2) = 4
    assert ticks[0]["metrics"]["rps"] == 60 and ticks[0]["replicas"] == 4


def test_step_and_linear_interpolation() -> None:
    trace = trace_from_arrays(np.array([0.0, 60.0, 120.0]), np.array([0.0, 60.0, 120.0]))
    times = np.array([0.0, 30.0, 60.0, 150.0, 180.0])
    assert trace.at(times, "step").tolist() == [0, 0, 60, 120, 0]
    assert trace.at(times, "linear").tolist() == [0, 30, 60, 120, 0]


def test_scale_down_removes_starting_pods_first() -> None:
    pods = Pods(2, StartupDelay(value=60.0))
    pods.scale_to(5, 0.0)
    pods.advance(15.0)
    assert (pods.ready_count, len(pods.starting)) == (2, 3)
    pods.scale_to(3, 15.0)
    assert (pods.ready_count, len(pods.starting)) == (2, 1)
    pods.scale_to(1, 15.0)
    assert (pods.ready_count, len(pods.starting)) == (1, 0)


def test_startup_delay_distributions_are_seeded() -> None:
    spec = parse_startup_delay({"distribution": "lognormal", "median": "4m", "sigma": 0.3, "seed": 7}, "d")
    first, second = spec.sampler().draw(50), spec.sampler().draw(50)
    assert first == second
    assert 200 < float(np.median(first)) < 290
    uniform = parse_startup_delay({"distribution": "uniform", "min": "1m", "max": "2m"}, "d").sampler().draw(100)
    assert min(uniform) >= 60 and max(uniform) <= 120
    with pytest.raises(ValidationError) as err:
        parse_startup_delay({"distribution": "gamma"}, "workload.startupDelay")
    assert err.value.path == "workload.startupDelay.distribution"


def test_summary_figures_on_a_hand_computed_run() -> None:
    # 4 ticks of 15 s: demand 10, 30, 30, 0; capacity 10 per pod; ready 1, 1, 3, 3; pods 3, 3, 3, 1
    run = RunResult(
        "x",
        np.arange(4) * 15.0,
        np.array([3, 3, 3, 1]),
        np.array([1, 1, 3, 3]),
        np.array([3, 3, 3, 1]),
        [None] * 4,
        ["held"] * 4,
    )
    demand = np.array([10.0, 30.0, 30.0, 0.0])
    s = summarize(run, demand, 10.0, 15.0, band=0.2, min_replicas=1)
    assert s.unserved_share == pytest.approx(20 / 70)  # only tick 1 misses 20 of 70
    assert s.pod_hours == pytest.approx(10 * 15 / 3600)
    # needed 1, 3, 3, 0; in band: tick 0 (1 in [1, 2]) and tick 2 (3 in [3, 4]); tick 3 has 3 > max(1, 0)
    assert s.time_in_band == pytest.approx(0.5)
    assert s.scale_changes == 1


# ---------------------------------------------------------------- quantities


@pytest.mark.parametrize(
    "text, value",
    [
        ("10", "10"),
        ("500m", "0.5"),
        ("2k", "2000"),
        ("1.5Gi", str(Decimal(3 * 2**29))),
        ("1e3", "1000"),
        ("+.5", "0.5"),
        ("1.", "1"),
        ("-1500u", "-0.0015"),
        (12.5, "12.5"),
        (3, "3"),
    ],
)
def test_parse_quantity_is_exact(text: Any, value: str) -> None:
    assert parse_quantity(text) == Decimal(value)


def test_milli_value_rounds_up_away_from_zero() -> None:
    assert milli_value(parse_quantity("1n")) == 1
    assert milli_value(parse_quantity("-1500u")) == -2
    assert to_milli(0.1) == 100  # Decimal("0.1"), not the binary float's 0.1000000000000000055...
    assert to_milli(0.0015) == 2
    assert to_milli("2.5") == 2500


@pytest.mark.parametrize("bad", ["", " 1", "1 ", "ten", "1.5.1", "1x", "--1", True, None, float("nan")])
def test_bad_quantities_are_rejected(bad: Any) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(bad)


def test_approximate_float_matches_go_mantissa_times_pow10() -> None:
    assert approximate_float("0.05") == 5 * 0.01
    assert approximate_float("50m") == 50 * 0.001
    assert approximate_float("1Ki") == 1024.0


# ---------------------------------------------------------------- CLI with a plot, bad full scenarios


def run_cli(tmp_path: Path, doc: dict[str, Any], *extra: str) -> tuple[int, str]:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc))
    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers())
    args = parser.parse_args(["simulate", "--scenario", str(path), *extra])
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = args.func(args)
    return code, err.getvalue()


def test_cli_writes_json_and_png_with_baselines(tmp_path: Path) -> None:
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    code, err = run_cli(tmp_path, campaign_scenario(), "--output", str(out), "--plot", str(png))
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert set(doc["baselines"]) == {"reactive", "oracle"}
    tick = doc["ticks"][0]
    assert {
        "time",
        "timestamp",
        "demand",
        "replicas",
        "readyReplicas",
        "desiredReplicas",
        "served",
        "unserved",
        "metrics",
    } <= set(tick)
    assert tick["timestamp"] == MIDNIGHT
    assert set(doc["summary"]) >= {"unservedShare", "podHours", "timeInBand"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_example_campaign_scenario_runs(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "examples/sim/campaign-schedule.yaml"
    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers())
    args = parser.parse_args(["simulate", "--scenario", str(example), "--output", str(tmp_path / "o.json")])
    with contextlib.redirect_stdout(io.StringIO()):
        assert args.func(args) == 0
    summary = json.loads((tmp_path / "o.json").read_text())
    assert summary["baselines"]["reactive"]["unservedShare"] > summary["summary"]["unservedShare"]


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d["traffic"].update(interpolation="cubic"), "traffic.interpolation"),
        (lambda d: d["traffic"].update(points=[[0, 1]]), "traffic.points"),
        (lambda d: d["traffic"].update(points=[[10, 1], [5, 1]]), "traffic.points"),
        (lambda d: d.update(traffic={"file": "missing.csv"}), "traffic.file"),
        (lambda d: d.update(manifests=[]), "manifests"),
        (lambda d: d["manifests"][1]["spec"]["metrics"][0]["value"].update(expression="n +* 2"), "manifests[1]"),
        (lambda d: d["manifests"][0]["spec"].update(mergeStrategy="Median"), "manifests[0]"),
        (lambda d: d["metrics"].update(campaign={"from": "oracle"}), "metrics.campaign.from"),
        (lambda d: d["workload"].update(capacityPerPod=0), "workload.capacityPerPod"),
        (lambda d: d.update(forecast={"refit": "10s"}), "forecast.refit"),
    ],
)
def test_bad_full_scenarios_exit_2_naming_the_field(tmp_path: Path, mutate: Any, field: str) -> None:
    doc = campaign_scenario()
    mutate(doc)
    code, err = run_cli(tmp_path, doc)
    assert code == 2
    assert field in err and "Traceback" not in err


def test_forecast_vme_manifest_in_a_scenario() -> None:
    trace = daily_trace()
    lo = MIDNIGHT + 2 * 86400
    history = {
        "prometheus": {"url": "http://127.0.0.1:9090", "query": "sum(rate(x[5m]))", "step": "5m", "length": "48h"}
    }
    doc = {
        "hpa": hpa(("campaign", "External")),
        "tick": "15s",
        "start": lo,
        "duration": "1h",
        "workload": {"replicas": 1, "capacityPerPod": 30},
        "traffic": {"points": np.column_stack([trace.timestamps, trace.values]).tolist()},
        "metrics": {"campaign": {"from": "prescaler"}},
        "forecast": {"refit": "30m"},
        "manifests": [
            virtual_metric("5m"),
            event({"forecast": {"history": history, "model": "seasonalNaive", "horizon": "1h"}}, "forecast"),
        ],
    }
    result = run_scenario(parse_scenario(doc))
    values = [t["metrics"]["campaign"] for t in result.to_json()["ticks"]]
    times = lo + 15.0 * np.arange(len(values))
    # seasonal naive repeats yesterday: V(t) = max of yesterday's values over [t, t + 5m]
    expected = [trace.at(np.arange(t - 86400, t - 86400 + 301, 15.0)).max() for t in times]
    assert np.allclose(values, expected, rtol=0.02)
    # after converging, the HPA holds a replica count whose ratio V / (30 * replicas) is within 10 %
    final = int(result.runs["scenario"].replicas[-1])
    assert 0.9 <= values[-1] / (30 * final) <= 1.1
