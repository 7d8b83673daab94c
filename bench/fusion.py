"""Benchmark: forecast only vs announcement with a hand-written expression vs fused (regressors).

    .venv/bin/python bench/fusion.py [--days 14] [--refit 30m] [--seed 13] [TRACE.csv ...]

Announcements made the honest way, on the shared real traces (../shared/data/traces/):
- events are injected into the real trace at random times (seeded per trace: `--seed` plus the
  file name), 4 to 12 hours apart, lasting 15, 30 or 60 minutes (at least one trace step);
- each event is announced NOTICE (2 h) ahead with a size `a` (1..10, "expected audience");
- the real effect is `a * beta * (1 + e_event) * (1 + e_step)` extra load with e_event ~ N(0, 0.25)
  and e_step ~ N(0, 0.1), beta = 8 % of the window's 95th-percentile load per unit: known to this
  script, never given to a model;
- at every refit (`--refit`) the models see the injected history up to then and the announcements
  published by then (the past ones as a history series, as prescaler's exported metric would give).

Variants (the same HPA set-up and simulator as bench/scaling.py, the code `prescaler simulate` runs):
- forecast only: forecast source (`auto`, 0.9) on the injected history, expression `upper`;
- hand-written xG: that forecast plus an announcement VirtualMetricEvent `audience * G` merged with
  Sum, G = 0.5 x and 2 x the true beta (a user's guess, off by a factor of two either way);
- fused: the forecast source with the announcements as a regressor (adapter.forecast.regressors):
  beta learnt from history, the effect included in `forecast`/`upper`, expression `upper`.
MAE at 15 minutes: the point value (forecast, forecast + G * a, fused forecast) for the time 15 minutes
after each refit, against the injected trace.

Stated cost, fixed before any run (the same as bench/scaling.py): pod-hours + UNSERVED_COST x unserved
pod-hours, where an unserved pod-hour is demand above ready capacity worth one pod for an hour. A
variant can always buy service with pods (x2 does), so two comparisons are printed besides the cost:
- fused is also run at the quantiles FUSED_QUANTILES (the same model, a higher `upper`): if one of
  them has no more pod-hours and no more unserved demand than hand-written x2, or its unserved share
  interpolated at x2's pod-hours is lower, fused is cheaper at equal service, whatever the price of
  an unserved request;
- every number is from the one seeded injection per trace; rerun with another `--seed` to see the spread.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import zlib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapter.durations import parse_duration
from adapter.forecast import fit_predict_many
from adapter.forecast.regressors import Effects, add_effects, fit_effects, remove_effects
from adapter.items import Item
from adapter.policy import MetricPolicy
from adapter.resources import MetricEntry, ResourceRef, SourceSpec, VirtualMetric, VirtualMetricEvent
from adapter.sim.engine import run_scenario
from adapter.sim.metrics import PrescalerModel, RecordedResponse
from adapter.sim.scenario import parse_scenario
from adapter.sim.traffic import Trace, load_trace
from adapter.sources.base import CommonSourceSettings

TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
NOTICE = 7200.0
LEAD = 300.0
PEAK_PODS = 20
MAX_REPLICAS = 40
QUANTILE = 0.9
EFFECT_SHARE = 0.08
COEFFICIENT_REFIT = 6 * 3600.0  # beta is refitted every 6 hours (the base model every refit)
UNSERVED_COST = 20.0  # stated up front, as in bench/scaling.py: an unserved pod-hour costs 20 idle ones
FUSED_QUANTILES = (0.9, 0.95, 0.98)  # fused at 0.9 (as the others) and higher: its pods-vs-service curve


class Events:
    """Injected events: start, end, announced size, true extra load per unit (with noise)."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray, sizes: np.ndarray):
        self.starts, self.ends, self.sizes = starts, ends, sizes

    def announced(self, times: np.ndarray, published_by: float) -> np.ndarray:
        """The announced size at each time (0 = nothing announced), as known at `published_by`."""
        out = np.zeros(len(times))
        for s, e, a in zip(self.starts, self.ends, self.sizes):
            if s - NOTICE <= published_by:
                out[(times >= s) & (times < e)] = a
        return out

    def items(self, published_by: float, since: float) -> list[Item]:
        return [
            Item(start=float(s), end=float(e), values={"audience": float(a)})
            for s, e, a in zip(self.starts, self.ends, self.sizes)
            if s - NOTICE <= published_by and e > since
        ]


def inject(trace: Trace, window: tuple[float, float], seed: int) -> tuple[Trace, Events, float]:
    rng = np.random.default_rng(seed)
    lo, hi = window
    beta = EFFECT_SHARE * float(np.percentile(trace.values[(trace.timestamps >= lo) & (trace.timestamps < hi)], 95))
    starts, ends, sizes = [], [], []
    t = trace.start + 3600.0 * rng.uniform(2, 8)
    while t < trace.end - 7200:
        duration = max(trace.step, float(rng.choice([900.0, 1800.0, 3600.0])))
        s = trace.start + math.floor((t - trace.start) / trace.step) * trace.step  # on the trace grid
        starts.append(s)
        ends.append(s + math.ceil(duration / trace.step) * trace.step)
        sizes.append(int(rng.integers(1, 11)))
        t = s + 3600.0 * rng.uniform(4, 12)
    events = Events(np.array(starts), np.array(ends), np.array(sizes, dtype=float))
    values = trace.values.copy()
    for s, e, a in zip(events.starts, events.ends, events.sizes):
        idx = np.flatnonzero((trace.timestamps >= s) & (trace.timestamps < e))
        scale = (1 + rng.normal(0, 0.25)) * (1 + rng.normal(0, 0.1, len(idx)))
        values[idx] += np.maximum(a * beta * scale, 0.0)
    return Trace(trace.timestamps, values, trace.step), events, beta


def refit_forecasts(
    trace: Trace,
    events: Events,
    refits: list[float],
    lookback: int,
    horizon: int,
    fused: bool,
    quantile: float = QUANTILE,
) -> tuple[list[tuple[float, np.ndarray, np.ndarray, np.ndarray]], list[Effects]]:
    """(last history time, forecast, lower, upper) per refit; fused: with the announcement regressor."""
    step = trace.step
    rows, lasts, futures, effects_of = [], [], [], []
    effects: Effects | None = None
    fitted_at = -math.inf
    for r in refits:
        stamps, values = trace.history_until(r)
        stamps, values = stamps[-lookback:], values[-lookback:]
        last = float(stamps[-1])
        lasts.append(last)
        if fused:
            hist_x = events.announced(stamps, r)[:, None]
            future_t = last + step * np.arange(1, horizon + 1)
            futures.append(events.announced(future_t, r)[:, None])
            if effects is None or r - fitted_at >= COEFFICIENT_REFIT:
                effects, fitted_at = fit_effects(values, hist_x, ["audience"]), r
            effects_of.append(effects)
            values = remove_effects(values, hist_x, effects)
        rows.append(values)
    out = []
    batch = 64
    for lo in range(0, len(rows), batch):
        results = fit_predict_many(np.stack(rows[lo : lo + batch]), step, horizon, model="auto", quantile=quantile)
        for j, res in enumerate(results):
            i = lo + j
            f, low, up = res.forecast, res.lower, res.upper
            if fused:
                f, low, up = add_effects(f, low, up, futures[i], effects_of[i], quantile)
            out.append((lasts[i], f, low, up))
    return out, effects_of


def hpa_doc(capacity: str) -> dict:
    def external(name: str) -> dict:
        return {
            "type": "External",
            "external": {
                "metric": {"name": name, "selector": {"matchLabels": {"resource": "web"}}},
                "target": {"type": "AverageValue", "averageValue": capacity},
            },
        }

    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "bench"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 1,
            "maxReplicas": MAX_REPLICAS,
            "behavior": {},
            "metrics": [external("rps-now"), external("rps-forecast")],
        },
    }


def vme(name: str, expression: str) -> VirtualMetricEvent:
    return VirtualMetricEvent(
        name=name,
        source=SourceSpec(kind="api", config=None, common=CommonSourceSettings(interval=60.0), raw={}),
        metrics=(MetricEntry("rps-forecast", ResourceRef("bench", "web"), expression),),
    )


def forecast_items(fits: list[tuple[float, np.ndarray, np.ndarray, np.ndarray]], step: float) -> list[tuple[Item, ...]]:
    out = []
    for last, f, low, up in fits:
        out.append(
            tuple(
                Item(
                    start=last + (i + 1) * step,
                    end=last + (i + 2) * step,
                    values={"forecast": float(f[i]), "lower": float(low[i]), "upper": float(up[i])},
                )
                for i in range(len(f))
            )
        )
    return out


def simulate(trace: Trace, start: float, duration: float, capacity: str, recorded: dict, events_: list) -> dict:
    doc = {
        "hpa": hpa_doc(capacity),
        "tick": "15s",
        "start": start,
        "duration": duration,
        "workload": {"replicas": 1, "startupDelay": "5m", "capacityPerPod": float(capacity)},
        "traffic": {"points": np.column_stack([trace.timestamps, trace.values]).tolist(), "interpolation": "step"},
        "metrics": {"rps-now": {"from": "traffic"}, "rps-forecast": {"from": "prescaler"}},
        "manifests": [
            {
                "apiVersion": "prescaler.pingpong.ai/v1",
                "kind": "VirtualMetric",
                "metadata": {"name": "rps-forecast"},
                "spec": {"defaultValue": 0, "leadTime": "5m"},
            }
        ],
        "baselines": {"leadTime": "5m"},
    }
    scenario = parse_scenario(doc)
    model = PrescalerModel(
        [VirtualMetric(name="rps-forecast", metric_name="rps-forecast", policy=MetricPolicy(lead_time=LEAD))],
        events_,
        recorded=recorded,
        trace=trace,
    )
    result = run_scenario(scenario, prescaler=model)
    assert result.demand is not None
    cap, tick = float(capacity), scenario.tick

    def unserved_pod_hours(name: str) -> float:
        short = np.maximum(result.demand - result.runs[name].ready * cap, 0.0)
        return float(short.sum()) / cap * tick / 3600.0

    return {
        name: {
            "unserved": s.unserved_share,
            "pod_hours": s.pod_hours,
            "unserved_pod_hours": unserved_pod_hours(name),
        }
        for name, s in result.summaries.items()
    }


def stated_cost(row: dict) -> float:
    return row["pod_hours"] + UNSERVED_COST * row["unserved_pod_hours"]


def unserved_at(curve: list[dict], pod_hours: float) -> float | None:
    """Fused's unserved share at `pod_hours`, linear between its quantiles (None: outside their range)."""
    points = sorted((r["pod_hours"], r["unserved"]) for r in curve)
    for (h0, u0), (h1, u1) in zip(points, points[1:]):
        if h0 <= pod_hours <= h1:
            return u0 + (u1 - u0) * (pod_hours - h0) / (h1 - h0) if h1 > h0 else min(u0, u1)
    return None


def mae_at(fits: list, refits: list[float], trace: Trace, ahead: float, extra: np.ndarray | None = None) -> float:
    errors = []
    for k, ((last, f, _, _), r) in enumerate(zip(fits, refits)):
        target = r + ahead
        h = int(math.floor((target - last) / trace.step)) - 1
        if not 0 <= h < len(f):
            continue
        actual = trace.at(np.array([target]))[0]
        point = float(f[h]) + (float(extra[k]) if extra is not None else 0.0)
        errors.append(abs(point - actual))
    return float(np.mean(errors))


def bench_trace(path: Path, days: float, warmup_days: float, refit: float, seed: int) -> dict:
    raw = load_trace(path)
    span = (raw.end - raw.start) / 86400
    warm = min(warmup_days, span / 3)
    start = raw.start + warm * 86400
    duration = min(days * 86400, raw.end - start)
    trace, events, beta = inject(raw, (start, start + duration), seed + zlib.crc32(path.name.encode()))
    window = (trace.timestamps >= start) & (trace.timestamps < start + duration)
    capacity = f"{max(float(trace.values[window].max()) / PEAK_PODS, 0.001):.3f}"
    step = trace.step
    horizon = max(1, math.ceil((refit + LEAD + step) / step))
    lookback = int(min(14 * 86400.0, warm * 86400) // step)
    refits = np.arange(start, start + duration + refit, refit).tolist()
    began = time.perf_counter()
    plain, _ = refit_forecasts(trace, events, refits, lookback, horizon, fused=False)
    fused_at = {q: refit_forecasts(trace, events, refits, lookback, horizon, True, q) for q in FUSED_QUANTILES}
    fused, effects = fused_at[QUANTILE]
    ahead = 900.0
    announced_ahead = np.array([events.announced(np.array([r + ahead]), r)[0] for r in refits])
    rows: dict[str, dict] = {}
    plain_items = forecast_items(plain, step)
    announce = [tuple(events.items(r, r - 86400)) for r in refits]

    def recorded(items: list[tuple[Item, ...]]) -> list[RecordedResponse]:
        return [RecordedResponse(r, its) for r, its in zip(refits, items)]

    runs = {"forecast only": ({"fc": recorded(plain_items)}, [vme("fc", "upper")], mae_at(plain, refits, trace, ahead))}
    for g in (0.5, 2.0):
        guess = g * beta
        runs[f"hand-written x{g:g}"] = (
            {"fc": recorded(plain_items), "ann": recorded(announce)},
            [vme("fc", "upper"), vme("ann", f"audience * {guess:.6g}")],
            mae_at(plain, refits, trace, ahead, announced_ahead * guess),
        )
    for q, (fits, _) in fused_at.items():
        name = "fused" if q == QUANTILE else f"fused q={q:g}"
        runs[name] = (
            {"fc": recorded(forecast_items(fits, step))},
            [vme("fc", "upper")],
            mae_at(fits, refits, trace, ahead),
        )
    for name, (rec, vmes, mae) in runs.items():
        s = simulate(trace, start, duration, capacity, rec, vmes)
        rows[name] = {"mae": mae, **s["scenario"]}
        rows["_reactive"], rows["_oracle"] = s["reactive"], s["oracle"]
    last = effects[-1]
    return {
        "trace": path.name,
        "days": duration / 86400,
        "events": int(((events.starts >= start) & (events.starts < start + duration)).sum()),
        "beta": beta,
        "fitted": float(last.beta[0]),
        "stderr": float(last.stderr[0]),
        "rows": rows,
        "seconds": time.perf_counter() - began,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("traces", nargs="*", type=Path)
    parser.add_argument("--days", type=float, default=14.0)
    parser.add_argument("--warmup", type=float, default=7.0)
    parser.add_argument("--refit", default="30m")
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args(argv)
    paths = args.traces or sorted(TRACES.glob("*.csv"))
    print(
        f"stated cost = pod-hours + {UNSERVED_COST:g} x unserved pod-hours (fixed before any run); "
        f"every variant at quantile {QUANTILE:g} unless named"
    )
    wins = 0
    for path in paths:
        r = bench_trace(path, args.days, args.warmup, parse_duration(args.refit), args.seed)
        print(
            f"\n{r['trace']}: {r['days']:.1f} days, {r['events']} events in the window; true beta "
            f"{r['beta']:.4g}/unit, fitted (last refit) {r['fitted']:.4g} ± {r['stderr']:.3g}; {r['seconds']:.0f}s"
        )
        rows = r["rows"]
        re_, orc = rows["_reactive"], rows["_oracle"]
        print(
            f"  {'variant':20} {'MAE@15m':>10} {'unserved':>9} {'x react':>8} {'pod-h':>9} {'x oracle':>9} {'cost':>9}"
        )
        for name, row in [*((k, v) for k, v in rows.items() if not k.startswith("_")), ("reactive", re_)]:
            mae = f"{row['mae']:10.4g}" if "mae" in row else f"{'':>10}"
            print(
                f"  {name:20} {mae} {row['unserved']:9.3%} {row['unserved'] / re_['unserved']:8.2f} "
                f"{row['pod_hours']:9.1f} {row['pod_hours'] / orc['pod_hours']:9.2f} {stated_cost(row):9.1f}"
            )
        print(
            f"  {'oracle':20} {'':>10} {orc['unserved']:9.3%} {'':>8} {orc['pod_hours']:9.1f} {1:9.2f} "
            f"{stated_cost(orc):9.1f}"
        )
        fused = rows["fused"]
        others = {k: v for k, v in rows.items() if not k.startswith("_") and not k.startswith("fused")}
        best_mae = all(fused["mae"] < o["mae"] for o in others.values())
        best_cost = all(stated_cost(fused) < stated_cost(o) for o in others.values())
        x2 = rows["hand-written x2"]
        curve = {k: v for k, v in rows.items() if k.startswith("fused")}
        dominating = [
            k for k, v in curve.items() if v["pod_hours"] <= x2["pod_hours"] and v["unserved"] <= x2["unserved"]
        ]
        matched = unserved_at(list(curve.values()), x2["pod_hours"])
        if dominating:
            cheaper, equal = True, f"{dominating[0]} has fewer pod-hours and less unserved than x2"
        elif matched is not None:
            cheaper = matched < x2["unserved"]
            equal = (
                f"at x2's {x2['pod_hours']:.1f} pod-hours fused has {matched:.3%} unserved vs x2's {x2['unserved']:.3%}"
            )
        else:
            cheaper, equal = False, "x2's pod-hours are outside fused's range"
        print(
            f"  lowest MAE@15m: {'fused' if best_mae else 'NOT fused'}; lowest stated cost: "
            f"{'fused' if best_cost else 'NOT fused'}; equal pods: {equal} "
            f"({'fused cheaper at equal service' if cheaper else 'fused NOT cheaper at equal service'})"
        )
        wins += best_mae and best_cost and cheaper
    print(
        f"\nfused has the lowest MAE and stated cost, and less unserved at x2's pod-hours, on {wins} of {len(paths)} traces"
    )
    return 0 if wins == len(paths) else 1


if __name__ == "__main__":
    sys.exit(main())
