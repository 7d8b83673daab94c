"""The simulation loop: HPA controller + workload + metric feeds, tick by tick; and the baselines.

Per tick t:
1. pods whose start-up delay has passed become Ready (`ready_at <= t`);
2. the controller reads spec (its own last write), status (= pods, ready or not), ready pods and the
   metric readings, and writes spec.replicas;
3. the ReplicaSet creates or deletes pods at once; new pods become Ready after their delay.
Demand at t is served by the pods that were Ready for the reconcile; the rest is unserved for the
tick's duration. Pod-hours count every pod that exists (starting pods cost money too).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from adapter.errors import ValidationError
from adapter.sim.controller import ControllerConfig, HpaController, TickInputs
from adapter.sim.hpa_spec import HpaSpec
from adapter.sim.metrics import ExternalFeed, Feed, PrescalerModel, SteppedFeed, served_milli, traffic_feed
from adapter.sim.scenario import MetricSource, Scenario
from adapter.sim.workload import Pods, StartupDelay


@dataclass
class RunResult:
    name: str
    times: np.ndarray  # absolute seconds
    replicas: np.ndarray  # spec.replicas after each tick's reconcile
    ready: np.ndarray  # Ready pods seen by the reconcile
    pods: np.ndarray  # all pods after the tick (status.replicas for the next one)
    desired: list[int | None]  # prenormalized recommendation (None when aborted / not computed)
    outcomes: list[str]
    metric_values: dict[str, list[float | None]] = field(default_factory=dict)


@dataclass
class Summary:
    ticks: int
    unserved_share: float | None
    pod_hours: float
    time_in_band: float | None
    max_replicas: int
    scale_changes: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "ticks": self.ticks,
            "unservedShare": self.unserved_share,
            "podHours": self.pod_hours,
            "timeInBand": self.time_in_band,
            "maxReplicas": self.max_replicas,
            "scaleChanges": self.scale_changes,
        }


def simulate_hpa(
    hpa: HpaSpec,
    times: np.ndarray,
    feeds: Sequence[Feed],
    replicas: int,
    delay: StartupDelay,
    config: ControllerConfig | None = None,
    name: str = "hpa",
) -> RunResult:
    """Run the controller over the tick times with one feed per HPA metric (in the HPA's order)."""
    controller = HpaController(hpa, config)
    pods = Pods(replicas, delay)
    spec = replicas
    n = len(times)
    out_replicas = np.empty(n, dtype=np.int64)
    out_ready = np.empty(n, dtype=np.int64)
    out_pods = np.empty(n, dtype=np.int64)
    desired: list[int | None] = []
    outcomes: list[str] = []
    values: dict[str, list[float | None]] = {f.name: [] for f in feeds}
    for k, t in enumerate(times.tolist()):
        pods.advance(t)
        ready, starting = pods.ready_count, len(pods.starting)
        inputs = TickInputs(
            spec=spec,
            status=pods.total,
            ready=ready,
            npods=pods.total,
            readings=[f.reading(k, ready, starting, spec) for f in feeds],
        )
        decision = controller.reconcile(t, inputs)
        spec = decision.replicas
        pods.scale_to(spec, t)
        out_replicas[k], out_ready[k], out_pods[k] = spec, ready, pods.total
        desired.append(decision.prenormalized)
        outcomes.append(decision.outcome)
        for f in feeds:
            values[f.name].append(f.value(k, ready))
    return RunResult(name, np.asarray(times, dtype=float), out_replicas, out_ready, out_pods, desired, outcomes, values)


def simulate_oracle(
    times: np.ndarray,
    demand: np.ndarray,
    capacity: float,
    lead_time: float,
    tick: float,
    hpa: HpaSpec,
    replicas: int,
    delay: StartupDelay,
) -> RunResult:
    """Perfect foresight: at t, ask for the pods the true peak demand over [t, t + leadTime + tick) needs."""
    steps = math.ceil(lead_time / tick) + 1
    peak = demand.copy()
    for shift in range(1, steps):
        peak[:-shift] = np.maximum(peak[:-shift], demand[shift:])
    want = np.clip(np.ceil(peak / capacity - 1e-9), hpa.min_replicas, hpa.max_replicas).astype(np.int64)
    pods = Pods(replicas, delay)
    n = len(times)
    out_ready = np.empty(n, dtype=np.int64)
    out_pods = np.empty(n, dtype=np.int64)
    for k, t in enumerate(times.tolist()):
        pods.advance(t)
        out_ready[k] = pods.ready_count
        pods.scale_to(int(want[k]), t)
        out_pods[k] = pods.total
    return RunResult("oracle", np.asarray(times, dtype=float), want, out_ready, out_pods, [None] * n, ["oracle"] * n)


def summarize(
    run: RunResult, demand: np.ndarray | None, capacity: float | None, tick: float, band: float, min_replicas: int
) -> Summary:
    pod_hours = float(run.pods.sum()) * tick / 3600.0
    changes = int(np.count_nonzero(np.diff(np.concatenate([[run.replicas[0]], run.replicas]))))
    unserved_share = in_band = None
    if demand is not None and capacity is not None:
        served = np.minimum(demand, run.ready * capacity)
        total = float(demand.sum())
        unserved_share = float((demand - served).sum() / total) if total > 0 else 0.0
        needed = np.ceil(demand / capacity - 1e-9)
        upper = np.maximum(min_replicas, np.ceil(needed * (1.0 + band) - 1e-9))
        in_band = float(np.mean((run.ready >= needed) & (run.ready <= upper)))
    return Summary(len(run.times), unserved_share, pod_hours, in_band, int(run.replicas.max(initial=0)), changes)


# ---------------------------------------------------------------- scenarios


@dataclass
class SimulationResult:
    scenario: Scenario
    runs: dict[str, RunResult]  # "scenario" (the HPA as given), and baselines "reactive", "oracle"
    summaries: dict[str, Summary]
    demand: np.ndarray | None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        main = self.runs["scenario"]
        sc = self.scenario
        cap = sc.workload.capacity_per_pod
        ticks = []
        for k in range(len(main.times)):
            row: dict[str, Any] = {
                "time": _number(float(main.times[k] - sc.start)),
                "replicas": int(main.replicas[k]),
                "readyReplicas": int(main.ready[k]),
                "desiredReplicas": main.desired[k],
                "pods": int(main.pods[k]),
                "outcome": main.outcomes[k],
            }
            if not sc.is_replay:
                row["timestamp"] = float(main.times[k])
            if self.demand is not None:
                row["demand"] = float(self.demand[k])
                if cap is not None:
                    served = min(float(self.demand[k]), int(main.ready[k]) * cap)
                    row.update(
                        capacity=int(main.ready[k]) * cap, served=served, unserved=float(self.demand[k]) - served
                    )
            row["metrics"] = {name: vals[k] for name, vals in main.metric_values.items()}
            ticks.append(row)
        out: dict[str, Any] = {"ticks": ticks, "summary": self.summaries["scenario"].as_dict()}
        baselines = {name: s.as_dict() for name, s in self.summaries.items() if name != "scenario"}
        if baselines:
            out["baselines"] = baselines
        if self.notes:
            out["notes"] = self.notes
        return out


def _number(x: float) -> int | float:
    """Whole seconds as JSON integers (`"time": 15`), other values unchanged."""
    return int(x) if x.is_integer() else x


def run_scenario(sc: Scenario, prescaler: PrescalerModel | None = None) -> SimulationResult:
    """Simulate the scenario's HPA and its baselines. `prescaler` replaces the model built from the
    scenario's manifests (benchmarks build VirtualMetricEvents in code)."""
    times = sc.times
    demand = sc.trace.at(times, sc.interpolation) if sc.trace is not None else None
    notes: list[str] = []
    if prescaler is None and any(m.kind == "prescaler" for m in sc.metrics.values()):
        prescaler = _prescaler_model(sc)
    feeds = [
        _feed(sc, metric.name, metric.type, sc.metrics[metric.name], times, prescaler) for metric in sc.hpa.metrics
    ]
    if prescaler is not None:
        notes.extend(prescaler.notes)
    runs = {
        "scenario": simulate_hpa(
            sc.hpa, times, feeds, sc.workload.replicas, sc.workload.startup_delay, sc.controller, "scenario"
        )
    }
    capacity = sc.workload.capacity_per_pod
    if sc.baselines.enabled and demand is not None and capacity is not None:
        reactive = [m for m in sc.hpa.metrics if sc.metrics[m.name].kind == "traffic"]
        if reactive and len(reactive) < len(sc.hpa.metrics):
            hpa = replace(sc.hpa, metrics=tuple(reactive))
            runs["reactive"] = simulate_hpa(
                hpa,
                times,
                [f for f, m in zip(feeds, sc.hpa.metrics) if m in reactive],
                sc.workload.replicas,
                sc.workload.startup_delay,
                sc.controller,
                "reactive",
            )
        elif not reactive:
            notes.append("no reactive baseline: the HPA has no metric from traffic")
        lead = sc.baselines.lead_time if sc.baselines.lead_time is not None else _mean_delay(sc.workload.startup_delay)
        runs["oracle"] = simulate_oracle(
            times, demand, capacity, lead, sc.tick, sc.hpa, sc.workload.replicas, sc.workload.startup_delay
        )
    summaries = {
        name: summarize(run, demand, capacity, sc.tick, sc.workload.band, sc.hpa.min_replicas)
        for name, run in runs.items()
    }
    return SimulationResult(sc, runs, summaries, demand, notes)


def _mean_delay(delay: StartupDelay) -> float:
    if delay.distribution == "uniform":
        return (delay.low + delay.high) / 2
    return delay.value


def _feed(
    sc: Scenario, name: str, metric_type: str, source: MetricSource, times: np.ndarray, prescaler: PrescalerModel | None
) -> Feed:
    read_at = times - source.latency
    if source.kind == "replay":
        n = len(times)
        return ExternalFeed(name, np.array(source.values[:n], dtype=float), list(source.milli[:n]))
    if source.kind == "traffic":
        assert sc.trace is not None
        return traffic_feed(metric_type, name, sc.trace.at(read_at, sc.interpolation))
    assert prescaler is not None and source.resource is not None and source.namespace is not None
    values = prescaler.values(name, source.namespace, source.resource, read_at)
    vm = prescaler.metrics[name]
    if vm.policy.tolerance_step is not None and metric_type == "External":
        # stepPastTolerance: stepped at each tick against this HPA and the workload's replicas.
        return SteppedFeed(name, values, sc.hpa, source.resource, vm)
    return ExternalFeed.from_values(name, values, served_milli)


def _prescaler_model(sc: Scenario) -> PrescalerModel:
    from adapter.pipeline.contributions import compile_entries
    from adapter.resources import KIND_EVENT, KIND_METRIC, parse_virtual_metric, parse_virtual_metric_event

    parsers = _source_parsers()
    metrics, events = [], []
    for i, doc in enumerate(sc.manifests):
        kind = doc.get("kind")
        try:
            if kind == KIND_METRIC:
                metrics.append(parse_virtual_metric(doc))
            elif kind == KIND_EVENT:
                vme = parse_virtual_metric_event(doc, parsers)
                compile_entries(vme)  # reject a bad expression at load time, as the server does
                events.append(vme)
            else:
                raise ValidationError("kind", f"expected VirtualMetric or VirtualMetricEvent, got {kind!r}")
        except ValidationError as exc:
            raise ValidationError(f"manifests[{i}]", str(exc)) from None
    model = PrescalerModel(metrics, events, sc.recorded, sc.trace, sc.forecast)
    for name, source in sc.metrics.items():
        if source.kind == "prescaler" and name not in model.metrics:
            raise ValidationError(f"metrics.{name}", f"no VirtualMetric among the manifests serves {name!r}")
    return model


def _source_parsers() -> dict[str, Any]:
    """The server's own config parsers: a scenario's manifests are checked exactly as `serve` checks them
    (in the simulator `api`/`prometheus` are then replayed from recorded responses and `forecast` reads
    the trace)."""
    from adapter.sources.registry import config_parsers

    return dict(config_parsers())


__all__ = [
    "RunResult",
    "SimulationResult",
    "Summary",
    "run_scenario",
    "simulate_hpa",
    "simulate_oracle",
    "summarize",
]
