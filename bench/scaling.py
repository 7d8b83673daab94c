"""Benchmark: reactive HPA vs prescaled HPA (reactive + forecast External metric) vs oracle.

    .venv/bin/python bench/scaling.py [--days 14] [--refit 30m] [--expression upper] [TRACE.csv ...]

For each trace in ../shared/data/traces/ (beside the repository) (or the given files):
- the trace is put on the 15 s tick grid by step-hold (each value holds for its own bin, so 5-min and
  30-min traces are not smoothed and bin totals are kept);
- the first `--warmup` days are history only (the forecast's first fits need it); the next `--days`
  are simulated;
- pods become Ready 5 minutes after creation; per-pod capacity = peak demand of the simulated window
  / 20, so the peak needs about 20 pods; maxReplicas 40, minReplicas 1;
- the HPA has a `behavior: {}` block (the documented defaults) and one External metric on the current
  demand (AverageValue = per-pod capacity): that is the *reactive* run;
- *prescaled* adds an External metric served by prescaler: a VirtualMetric with `leadTime: 5m` fed by
  a forecast-source VirtualMetricEvent (`auto` model from adapter.forecast, refit every `--refit` on
  the trailing 14 days, expression `--expression`, default `upper` = the 0.9 quantile);
- *oracle* has perfect foresight: at t it asks for ceil(peak demand over [t, t + 5m + 15 s] / capacity).

Goals: prescaled unserved share <= 0.2 x reactive, prescaled pod-hours <= 1.2 x oracle.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapter.durations import parse_duration
from adapter.policy import MetricPolicy
from adapter.resources import MetricEntry, ResourceRef, SourceSpec, VirtualMetric, VirtualMetricEvent
from adapter.sim.engine import run_scenario
from adapter.sim.metrics import ForecastSettings, PrescalerModel
from adapter.sim.scenario import parse_scenario
from adapter.sim.traffic import load_trace
from adapter.sources.base import CommonSourceSettings

TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
LEAD = 300.0
STARTUP = "5m"
PEAK_PODS = 20
MAX_REPLICAS = 40


def hpa_manifest(capacity: str, prescaled: bool) -> dict:
    def external(name: str, resource: str) -> dict:
        return {"type": "External", "external": {
            "metric": {"name": name, "selector": {"matchLabels": {"resource": resource}}},
            "target": {"type": "AverageValue", "averageValue": capacity}}}

    metrics = [external("rps-now", "web")]
    if prescaled:
        metrics.append(external("rps-forecast", "web"))
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "bench"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "minReplicas": 1, "maxReplicas": MAX_REPLICAS, "behavior": {}, "metrics": metrics}}


def bench_trace(path: Path, days: float, warmup_days: float, refit: float, expression: str,
                quantile: float = 0.9) -> dict:
    trace = load_trace(path)
    span_days = (trace.end - trace.start) / 86400
    warm = min(warmup_days, span_days / 3)
    start = trace.start + warm * 86400
    duration = min(days * 86400, trace.end - start)
    window = (trace.timestamps >= start) & (trace.timestamps < start + duration)
    peak = float(trace.values[window].max())
    capacity = f"{max(peak / PEAK_PODS, 0.001):.3f}"  # a quantity with milli precision
    vm = {"apiVersion": "prescaler.pingpong.ai/v1", "kind": "VirtualMetric", "metadata": {"name": "rps-forecast"},
          "spec": {"defaultValue": 0, "mergeStrategy": "Sum", "leadTime": "5m"}}
    doc = {
        "hpa": hpa_manifest(capacity, prescaled=True),
        "tick": "15s", "start": start, "duration": duration,
        "workload": {"replicas": 1, "startupDelay": STARTUP, "capacityPerPod": float(capacity)},
        "traffic": {"points": np.column_stack([trace.timestamps, trace.values]).tolist(), "interpolation": "step"},
        "metrics": {"rps-now": {"from": "traffic"}, "rps-forecast": {"from": "prescaler"}},
        "manifests": [vm],
        "baselines": {"leadTime": "5m"},
    }
    scenario = parse_scenario(doc)
    settings = ForecastSettings(refit=refit, lookback=14 * 86400.0, model="auto", quantile=quantile)
    # The forecast VirtualMetricEvent, built directly: in the simulator its history is the trace's past.
    vme = VirtualMetricEvent(
        name="web-forecast",
        source=SourceSpec(kind="forecast", config=None, common=CommonSourceSettings(interval=refit),
                          raw={"forecast": {"model": "auto", "quantile": quantile}}),
        metrics=(MetricEntry("rps-forecast", ResourceRef("bench", "web"), expression),))
    model = PrescalerModel([VirtualMetric(name="rps-forecast", metric_name="rps-forecast", policy=MetricPolicy(lead_time=LEAD))],
                           [vme], trace=trace, forecast=settings)
    began = time.perf_counter()
    result = run_scenario(scenario, prescaler=model)
    elapsed = time.perf_counter() - began
    s = result.summaries
    return {"trace": path.name, "step": trace.step, "days": duration / 86400, "capacity": float(capacity),
            "ticks": scenario.ticks, "seconds": elapsed,
            "reactive": s["reactive"], "prescaled": s["scenario"], "oracle": s["oracle"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("traces", nargs="*", type=Path)
    parser.add_argument("--days", type=float, default=14.0, help="simulated days per trace (default 14)")
    parser.add_argument("--warmup", type=float, default=7.0, help="history-only days before the window")
    parser.add_argument("--refit", default="30m", help="forecast refit period (default 30m)")
    parser.add_argument("--expression", default="upper", help="VME expression over forecast/lower/upper")
    parser.add_argument("--quantile", type=float, default=0.9, help="forecast interval quantile (upper)")
    args = parser.parse_args(argv)
    paths = args.traces or sorted(TRACES.glob("*.csv"))
    refit = parse_duration(args.refit)
    header = (f"{'trace':44} {'days':>5} {'cap':>8} | {'unserved: reactive':>18} {'prescaled':>9} "
              f"{'oracle':>7} {'ratio':>6} | {'pod-h: reactive':>15} {'prescaled':>9} {'oracle':>8} "
              f"{'ratio':>6} | {'goals':>5} {'sec':>5}")
    print(header)
    print("-" * len(header))
    all_ok = True
    for path in paths:
        r = bench_trace(path, args.days, args.warmup, refit, args.expression, args.quantile)
        re, pr, orc = r["reactive"], r["prescaled"], r["oracle"]
        u_ratio = pr.unserved_share / re.unserved_share if re.unserved_share else float("inf")
        h_ratio = pr.pod_hours / orc.pod_hours
        ok = (pr.unserved_share <= 0.2 * re.unserved_share) and h_ratio <= 1.2
        all_ok &= ok
        print(f"{r['trace']:44} {r['days']:5.1f} {r['capacity']:8.3f} | {re.unserved_share:18.4%} "
              f"{pr.unserved_share:9.4%} {orc.unserved_share:7.3%} {u_ratio:6.2f} | {re.pod_hours:15.1f} "
              f"{pr.pod_hours:9.1f} {orc.pod_hours:8.1f} {h_ratio:6.2f} | {'ok' if ok else 'MISS':>5} "
              f"{r['seconds']:5.1f}")
    print("\nunserved = demand above ready capacity / total demand; pod-hours count starting pods too.")
    print("goals: prescaled unserved <= 0.2 x reactive (ratio column <= 0.20), pod-hours <= 1.2 x oracle.")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
