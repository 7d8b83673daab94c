"""Scenario files for `prescaler simulate`: parsing and validation (every error names its field).

Replay form (fixed, so results can be checked independently of this code):
    hpa: {...}                     # autoscaling/v2 HPA manifest (External metrics)
    tick: 15s
    workload: {replicas: 2, startupDelay: 0s}
    metrics: {rps: [20, 200, null, ...]}   # summed value per tick; null = the fetch fails

Full form (see examples/sim/): the same keys plus `traffic` (a `timestamp,value` CSV), metric
producers (`{from: traffic}`, `{from: prescaler}`), prescaler `manifests`/`manifestFiles`, `recorded`
api responses, `forecast` settings, `adapterLatency`, `controller` flags and `baselines`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from adapter.durations import DurationError, parse_duration
from adapter.errors import ValidationError
from adapter.items import ItemError, parse_item
from adapter.sim.controller import ControllerConfig
from adapter.sim.hpa_spec import HpaSpec, parse_hpa
from adapter.sim.metrics import ForecastSettings, RecordedResponse
from adapter.sim.quantity import QuantityError, milli_value, parse_quantity
from adapter.sim.traffic import INTERPOLATIONS, Trace, load_trace, trace_from_arrays
from adapter.sim.workload import StartupDelay, parse_startup_delay
from adapter.yamlload import SafeLoader

TOP_LEVEL = (
    "hpa",
    "tick",
    "start",
    "duration",
    "workload",
    "traffic",
    "metrics",
    "manifests",
    "manifestFiles",
    "recorded",
    "adapterLatency",
    "forecast",
    "controller",
    "baselines",
)
PRODUCERS = ("traffic", "prescaler", "replay")
MAX_TICKS = 5_000_000


@dataclass(frozen=True)
class MetricSource:
    """How one HPA metric (by name) gets its value."""

    kind: str  # traffic | prescaler | replay
    latency: float = 0.0  # L_adapter: the value read at tick t is the one for t - latency
    values: tuple[float, ...] = ()  # replay: per tick, NaN = failed fetch
    milli: tuple[int | None, ...] = ()  # replay: the exact MilliValue() of each value (None = failed)
    namespace: str | None = None  # prescaler target; default: the HPA's namespace
    resource: str | None = None  # default: selector.matchLabels.resource


@dataclass(frozen=True)
class Workload:
    replicas: int
    startup_delay: StartupDelay
    capacity_per_pod: float | None = None
    band: float = 0.2


@dataclass(frozen=True)
class Baselines:
    enabled: bool = True
    lead_time: float | None = None  # oracle look-ahead; default: the mean start-up delay


@dataclass
class Scenario:
    hpa: HpaSpec
    hpa_doc: Mapping[str, Any]
    tick: float
    start: float
    ticks: int
    workload: Workload
    metrics: dict[str, MetricSource]
    trace: Trace | None = None
    interpolation: str = "step"
    manifests: list[Mapping[str, Any]] = field(default_factory=list)
    recorded: dict[str, list[RecordedResponse]] = field(default_factory=dict)
    forecast: ForecastSettings = field(default_factory=ForecastSettings)
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    baselines: Baselines = field(default_factory=Baselines)
    # VirtualMetric name -> the lead learnt for `leadTime: Auto` (adapter.sim.leadtime's rule)
    learned_lead_times: dict[str, Any] = field(default_factory=dict)

    @property
    def times(self) -> np.ndarray:
        return self.start + self.tick * np.arange(self.ticks, dtype=float)

    @property
    def is_replay(self) -> bool:
        return self.trace is None


def load_scenario(path: Path) -> Scenario:
    """Read and validate a scenario YAML file; relative file names are resolved next to it."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValidationError("", f"cannot read scenario {path}: {exc.strerror or exc}") from None
    try:
        doc = yaml.load(text, Loader=SafeLoader)
    except yaml.YAMLError as exc:
        raise ValidationError("", f"{path} is not valid YAML: {exc}") from None
    return parse_scenario(doc, base_dir=path.parent)


def parse_scenario(doc: Any, base_dir: Path | None = None) -> Scenario:
    base_dir = base_dir or Path(".")
    doc = _mapping(doc, "scenario")
    for key in doc:
        if key not in TOP_LEVEL:
            raise ValidationError(str(key), f"unknown field (allowed: {', '.join(TOP_LEVEL)})")
    if "hpa" not in doc:
        raise ValidationError("hpa", "required: an autoscaling/v2 HorizontalPodAutoscaler manifest")
    hpa = parse_hpa(doc["hpa"], "hpa")
    tick = _duration(doc.get("tick", "15s"), "tick")
    if tick <= 0:
        raise ValidationError("tick", "must be greater than 0")
    workload = _workload(doc.get("workload"), hpa)
    trace, interpolation = _traffic(doc.get("traffic"), base_dir)
    metrics = _metric_sources(doc.get("metrics"), hpa, trace is not None)
    replay_lengths = {len(m.values) for m in metrics.values() if m.kind == "replay"}
    if len(replay_lengths) > 1:
        raise ValidationError(
            "metrics",
            f"replay lists differ in length ({sorted(replay_lengths)}); give one value per tick for every metric",
        )

    start = _number(doc["start"], "start") if doc.get("start") is not None else (trace.start if trace else 0.0)
    if doc.get("duration") is not None:
        duration = _duration(doc["duration"], "duration")
        ticks = math.floor(duration / tick + 1e-9)
    elif replay_lengths:
        ticks = replay_lengths.pop()
    elif trace is not None:
        ticks = math.floor((trace.end - start) / tick + 1e-9)
    else:
        raise ValidationError("duration", "required when there is neither a traffic trace nor a replay list")
    if ticks < 1:
        raise ValidationError("duration", "the scenario has no tick to simulate")
    if ticks > MAX_TICKS:
        raise ValidationError("duration", f"{ticks} ticks is more than the limit of {MAX_TICKS}")
    for name, source in metrics.items():
        if source.kind == "replay" and len(source.values) < ticks:
            raise ValidationError(f"metrics.{name}", f"{len(source.values)} values for {ticks} ticks")

    manifests = _manifests(doc.get("manifests"), doc.get("manifestFiles"), base_dir)
    manifests, learned = _resolve_auto_lead_times(manifests, hpa, workload)
    if any(m.kind == "prescaler" for m in metrics.values()) and not manifests:
        raise ValidationError(
            "manifests",
            "a metric comes from the prescaler: give the VirtualMetric and "
            "VirtualMetricEvent manifests (manifests or manifestFiles)",
        )
    return Scenario(
        hpa=hpa,
        hpa_doc=doc["hpa"],
        tick=tick,
        start=start,
        ticks=ticks,
        workload=workload,
        metrics=metrics,
        trace=trace,
        interpolation=interpolation,
        manifests=manifests,
        recorded=_recorded(doc.get("recorded"), start),
        forecast=_forecast(doc.get("forecast")),
        controller=_controller(doc.get("controller")),
        baselines=_baselines(doc.get("baselines")),
        learned_lead_times=learned,
    )


AUTO_LEAD_SAMPLES = 50  # simulated pods whose start-up the rule sees (as many as it keeps in a cluster)


def _resolve_auto_lead_times(
    manifests: list[Mapping[str, Any]], hpa: HpaSpec, workload: Workload
) -> tuple[list[Mapping[str, Any]], dict[str, Any]]:
    """`leadTime: Auto` in the simulator: the cluster rule applied to the workload model's pods.

    Start-up delays of AUTO_LEAD_SAMPLES pods are drawn from `workload.startupDelay` (its own seed),
    then lead = p90 start-up + sync period + the ramp the HPA's scale-up policy needs; the manifest
    gets that value in seconds."""
    from adapter.sim.leadtime import learn_lead_time

    learned: dict[str, Any] = {}
    out: list[Mapping[str, Any]] = []
    for doc in manifests:
        spec = doc.get("spec") if isinstance(doc, Mapping) else None
        if doc.get("kind") == "VirtualMetric" and isinstance(spec, Mapping) and spec.get("leadTime") == "Auto":
            delays = workload.startup_delay.sampler().draw(AUTO_LEAD_SAMPLES)
            estimate = learn_lead_time(
                [(f"sim-pod-{i}", d) for i, d in enumerate(delays)], hpa, max(workload.replicas, hpa.min_replicas, 1)
            )
            name = str((doc.get("metadata") or {}).get("name", ""))
            learned[name] = estimate
            doc = {**doc, "spec": {**spec, "leadTime": f"{estimate.seconds:.3f}s"}}
        out.append(doc)
    return out, learned


# ---------------------------------------------------------------- sections


def _workload(raw: Any, hpa: HpaSpec) -> Workload:
    raw = _mapping(raw if raw is not None else {}, "workload")
    _known(raw, ("replicas", "startupDelay", "capacityPerPod", "band"), "workload")
    replicas = raw.get("replicas", max(hpa.min_replicas, 1))
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 0 <= replicas <= 100_000:
        raise ValidationError("workload.replicas", "expected an integer between 0 and 100000")
    capacity = raw.get("capacityPerPod")
    if capacity is not None:
        capacity = _number(capacity, "workload.capacityPerPod")
        if capacity <= 0:
            raise ValidationError("workload.capacityPerPod", "must be greater than 0")
    band = _number(raw.get("band", 0.2), "workload.band")
    if not 0 <= band <= 10:
        raise ValidationError("workload.band", "expected a fraction between 0 and 10")
    return Workload(
        replicas=replicas,
        startup_delay=parse_startup_delay(raw.get("startupDelay"), "workload.startupDelay"),
        capacity_per_pod=capacity,
        band=band,
    )


def _traffic(raw: Any, base_dir: Path) -> tuple[Trace | None, str]:
    if raw is None:
        return None, "step"
    raw = _mapping(raw, "traffic")
    _known(raw, ("file", "points", "interpolation", "scale"), "traffic")
    interpolation = raw.get("interpolation", "step")
    if interpolation not in INTERPOLATIONS:
        raise ValidationError("traffic.interpolation", f"expected step or linear, got {interpolation!r}")
    if (raw.get("file") is None) == (raw.get("points") is None):
        raise ValidationError("traffic", "exactly one of file or points is required")
    if raw.get("file") is not None:
        if not isinstance(raw["file"], str):
            raise ValidationError("traffic.file", "expected a path")
        trace = load_trace(_resolve(raw["file"], base_dir), "traffic.file")
    else:
        points = raw["points"]
        if not isinstance(points, list) or not all(isinstance(p, list) and len(p) == 2 for p in points):
            raise ValidationError("traffic.points", "expected a list of [timestamp, value] pairs")
        try:
            arr = np.array(points, dtype=float)
        except (TypeError, ValueError):
            raise ValidationError("traffic.points", "expected numbers") from None
        trace = trace_from_arrays(arr[:, 0], arr[:, 1], "traffic.points")
    scale = _number(raw.get("scale", 1.0), "traffic.scale")
    if scale <= 0:
        raise ValidationError("traffic.scale", "must be greater than 0")
    if scale != 1.0:
        trace = Trace(trace.timestamps, trace.values * scale, trace.step)
    return trace, interpolation


def _metric_sources(raw: Any, hpa: HpaSpec, has_traffic: bool) -> dict[str, MetricSource]:
    raw = _mapping(raw, "metrics")
    hpa_names = {m.name: m for m in hpa.metrics}
    out: dict[str, MetricSource] = {}
    for name, spec in raw.items():
        path = f"metrics.{name}"
        if name not in hpa_names:
            raise ValidationError(path, f"the HPA has no metric named {name!r} (it has {', '.join(hpa_names)})")
        if isinstance(spec, list):
            spec = {"from": "replay", "values": spec}
        spec = _mapping(spec, path)
        _known(spec, ("from", "values", "latency", "namespace", "resource"), path)
        kind = spec.get("from")
        if kind not in PRODUCERS:
            raise ValidationError(f"{path}.from", f"expected one of {', '.join(PRODUCERS)}, got {kind!r}")
        latency = _duration(spec.get("latency", 0), f"{path}.latency")
        if latency < 0:
            raise ValidationError(f"{path}.latency", "must not be negative")
        metric = hpa_names[name]
        if kind == "replay":
            if metric.type != "External":
                raise ValidationError(path, "replay values are for External metrics")
            values, milli = _replay_values(spec.get("values"), path)
            out[name] = MetricSource("replay", latency, values, milli)
            continue
        if kind == "traffic" and not has_traffic:
            raise ValidationError(path, "from: traffic needs a traffic section")
        if kind == "prescaler" and metric.type != "External":
            raise ValidationError(path, "prescaler values are served as External metrics")
        resource = spec.get("resource", metric.resource_label)
        if kind == "prescaler" and not isinstance(resource, str):
            raise ValidationError(
                f"{path}.resource",
                "required: the target resource name (or put matchLabels.resource in the HPA metric's selector)",
            )
        namespace = spec.get("namespace", hpa.namespace)
        out[name] = MetricSource(kind, latency, namespace=str(namespace), resource=resource)
    for name in hpa_names:
        if name not in out:
            raise ValidationError(
                f"metrics.{name}",
                "required: say how the HPA metric gets its value "
                "(a list of values per tick, or {from: traffic|prescaler})",
            )
    return out


def _replay_values(raw: Any, path: str) -> tuple[tuple[float, ...], tuple[int | None, ...]]:
    """Values per tick as floats (for output) and as exact milli-units (what the HPA computes with)."""
    if not isinstance(raw, list) or not raw:
        raise ValidationError(f"{path}", "expected a non-empty list of values (null = failed fetch)")
    values: list[float] = []
    milli: list[int | None] = []
    for i, value in enumerate(raw):
        if value is None:
            values.append(math.nan)
            milli.append(None)
            continue
        try:
            exact = parse_quantity(value)
        except QuantityError as exc:
            raise ValidationError(f"{path}[{i}]", str(exc)) from None
        if abs(exact) > 9e15:
            raise ValidationError(f"{path}[{i}]", "value out of range (|value| <= 9e15)")
        values.append(float(exact))
        milli.append(milli_value(exact))
    return tuple(values), tuple(milli)


def _manifests(inline: Any, files: Any, base_dir: Path) -> list[Mapping[str, Any]]:
    docs: list[Mapping[str, Any]] = []
    if inline is not None:
        if not isinstance(inline, list):
            raise ValidationError("manifests", "expected a list of VirtualMetric/VirtualMetricEvent manifests")
        docs.extend(_mapping(d, f"manifests[{i}]") for i, d in enumerate(inline))
    if files is not None:
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            raise ValidationError("manifestFiles", "expected a list of file paths")
        for i, name in enumerate(files):
            path = _resolve(name, base_dir)
            try:
                loaded = list(yaml.load_all(path.read_text(), Loader=SafeLoader))
            except OSError as exc:
                raise ValidationError(f"manifestFiles[{i}]", f"cannot read {path}: {exc.strerror or exc}") from None
            except yaml.YAMLError as exc:
                raise ValidationError(f"manifestFiles[{i}]", f"{path} is not valid YAML: {exc}") from None
            docs.extend(_mapping(d, f"manifestFiles[{i}]") for d in loaded if d is not None)
    return docs


def _recorded(raw: Any, start: float) -> dict[str, list[RecordedResponse]]:
    if raw is None:
        return {}
    raw = _mapping(raw, "recorded")
    out: dict[str, list[RecordedResponse]] = {}
    for name, responses in raw.items():
        path = f"recorded.{name}"
        if not isinstance(responses, list):
            raise ValidationError(path, "expected a list of {at, items} responses")
        parsed = []
        for i, response in enumerate(responses):
            where = f"{path}[{i}]"
            response = _mapping(response, where)
            _known(response, ("at", "items"), where)
            # `at` is relative to the scenario start; the items carry absolute unix seconds (seed format).
            at = start + _duration(response.get("at", 0), f"{where}.at")
            items_raw = response.get("items")
            if not isinstance(items_raw, list):
                raise ValidationError(f"{where}.items", "expected a list of items")
            try:
                items = tuple(parse_item(item, f"{where}.items[{j}]") for j, item in enumerate(items_raw))
            except ItemError as exc:
                raise ValidationError(where, str(exc)) from None
            parsed.append(RecordedResponse(at, items))
        out[str(name)] = parsed
    return out


def _forecast(raw: Any) -> ForecastSettings:
    if raw is None:
        return ForecastSettings()
    raw = _mapping(raw, "forecast")
    _known(raw, ("refit", "lookback", "model", "season", "quantile", "horizon"), "forecast")
    refit = _duration(raw.get("refit", "30m"), "forecast.refit")
    if refit < 60:
        raise ValidationError("forecast.refit", "must be at least 1m")
    quantile = _number(raw.get("quantile", 0.9), "forecast.quantile")
    if not 0.5 <= quantile < 1:
        raise ValidationError("forecast.quantile", "expected a number in [0.5, 1)")
    model = raw.get("model", "auto")
    if not isinstance(model, str):
        raise ValidationError("forecast.model", "expected a model name")
    return ForecastSettings(
        refit=refit,
        lookback=_duration(raw.get("lookback", "336h"), "forecast.lookback"),
        model=model,
        quantile=quantile,
        season=_duration(raw["season"], "forecast.season") if raw.get("season") is not None else None,
        horizon=_duration(raw["horizon"], "forecast.horizon") if raw.get("horizon") is not None else None,
    )


def _controller(raw: Any) -> ControllerConfig:
    if raw is None:
        return ControllerConfig()
    raw = _mapping(raw, "controller")
    _known(raw, ("tolerance", "downscaleStabilization", "configurableTolerance"), "controller")
    tolerance = _number(raw.get("tolerance", 0.1), "controller.tolerance")
    if not 0 <= tolerance < 1:
        raise ValidationError("controller.tolerance", "expected a fraction in [0, 1)")
    configurable = raw.get("configurableTolerance", True)
    if not isinstance(configurable, bool):
        raise ValidationError("controller.configurableTolerance", "expected true or false")
    return ControllerConfig(
        tolerance=tolerance,
        downscale_stabilization=_duration(raw.get("downscaleStabilization", "5m"), "controller.downscaleStabilization"),
        configurable_tolerance=configurable,
    )


def _baselines(raw: Any) -> Baselines:
    if raw is None:
        return Baselines()
    if isinstance(raw, bool):
        return Baselines(enabled=raw)
    raw = _mapping(raw, "baselines")
    _known(raw, ("enabled", "leadTime"), "baselines")
    enabled = raw.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ValidationError("baselines.enabled", "expected true or false")
    lead = _duration(raw["leadTime"], "baselines.leadTime") if raw.get("leadTime") is not None else None
    return Baselines(enabled=enabled, lead_time=lead)


# ---------------------------------------------------------------- small readers


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValidationError(
            path, "required: expected an object" if value is None else f"expected an object, got {type(value).__name__}"
        )
    return value


def _known(obj: Mapping[str, Any], allowed: tuple[str, ...], path: str) -> None:
    for key in obj:
        if key not in allowed:
            raise ValidationError(f"{path}.{key}", f"unknown field (allowed: {', '.join(allowed)})")


def _duration(value: Any, path: str) -> float:
    try:
        seconds = parse_duration(value)
    except DurationError as exc:
        raise ValidationError(path, str(exc)) from None
    if not math.isfinite(seconds):
        raise ValidationError(path, "must be finite")
    return seconds


def _number(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(path, f"expected a number, got {value!r}")
    if not math.isfinite(float(value)):
        raise ValidationError(path, "must be finite")
    return float(value)


def _resolve(name: str, base_dir: Path) -> Path:
    path = Path(name)
    return path if path.is_absolute() else base_dir / path
