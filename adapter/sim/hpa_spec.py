"""An `autoscaling/v2` HorizontalPodAutoscaler manifest, parsed into what the controller uses.

Defaults follow `pkg/apis/autoscaling/v2/defaults.go` (docs/hpa-algorithm.md §6.2): they are filled in only when a
`behavior` block exists, because the controller picks the legacy path when `behavior` is nil.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from adapter.errors import ValidationError
from adapter.sim.quantity import QuantityError, approximate_float, milli_value, parse_quantity

METRIC_TYPES = ("External", "Pods", "Object", "Resource", "ContainerResource")
SUPPORTED_METRIC_TYPES = ("External", "Pods")
SELECT_POLICIES = ("Max", "Min", "Disabled")
POLICY_TYPES = ("Pods", "Percent")


@dataclass(frozen=True)
class ScalingPolicy:
    type: str  # Pods | Percent
    value: int
    period: float  # seconds


@dataclass(frozen=True)
class ScalingRules:
    window: float | None  # stabilizationWindowSeconds; None = the controller's downscale flag (300 s)
    select_policy: str
    policies: tuple[ScalingPolicy, ...]
    tolerance: float | None = None  # per-HPA tolerance (KEP-4951); None = the controller's flag


@dataclass(frozen=True)
class Behavior:
    scale_up: ScalingRules
    scale_down: ScalingRules


@dataclass(frozen=True)
class MetricSpec:
    type: str  # External | Pods
    name: str
    target_type: str  # Value | AverageValue
    target_milli: int
    selector: Mapping[str, Any] = field(default_factory=dict)

    @property
    def resource_label(self) -> str | None:
        """`selector.matchLabels.resource`: the prescaler target a selector names (docs/api.md)."""
        labels = self.selector.get("matchLabels") or {}
        value = labels.get("resource") if isinstance(labels, Mapping) else None
        return value if isinstance(value, str) else None


@dataclass(frozen=True)
class HpaSpec:
    name: str
    namespace: str
    min_replicas: int
    max_replicas: int
    metrics: tuple[MetricSpec, ...]
    behavior: Behavior | None  # None = legacy normalization (docs/hpa-algorithm.md §6.1)


def default_scale_up(tolerance: float | None = None) -> ScalingRules:
    return ScalingRules(0.0, "Max", (ScalingPolicy("Pods", 4, 15.0), ScalingPolicy("Percent", 100, 15.0)), tolerance)


def default_scale_down(tolerance: float | None = None) -> ScalingRules:
    # The window stays None: the controller fills it from its flag (maybeInitScaleDownStabilizationWindow).
    return ScalingRules(None, "Max", (ScalingPolicy("Percent", 100, 15.0),), tolerance)


def parse_hpa(doc: Any, path: str = "hpa") -> HpaSpec:
    """Validate an HPA manifest; errors name the field (`hpa.spec.metrics[0].external.target`)."""
    doc = _mapping(doc, path)
    if doc.get("apiVersion") not in (None, "autoscaling/v2"):
        raise ValidationError(f"{path}.apiVersion", f"expected autoscaling/v2, got {doc.get('apiVersion')!r}")
    if doc.get("kind") not in (None, "HorizontalPodAutoscaler"):
        raise ValidationError(f"{path}.kind", f"expected HorizontalPodAutoscaler, got {doc.get('kind')!r}")
    meta = _mapping(doc.get("metadata") or {}, f"{path}.metadata")
    spec = _mapping(doc.get("spec"), f"{path}.spec")
    min_r = _int(spec, "minReplicas", f"{path}.spec", default=1, minimum=0)
    max_r = _int(spec, "maxReplicas", f"{path}.spec", required=True, minimum=1)
    if min_r > max_r:
        raise ValidationError(f"{path}.spec.minReplicas", f"{min_r} is greater than maxReplicas {max_r}")
    raw_metrics = spec.get("metrics")
    if not isinstance(raw_metrics, list) or not raw_metrics:
        raise ValidationError(f"{path}.spec.metrics", "expected a non-empty list of metrics")
    metrics = tuple(_metric(m, f"{path}.spec.metrics[{i}]") for i, m in enumerate(raw_metrics))
    if min_r == 0 and not any(m.type == "External" for m in metrics):
        raise ValidationError(f"{path}.spec.minReplicas", "0 needs at least one External or Object metric")
    behavior = None
    if spec.get("behavior") is not None:
        behavior = _behavior(spec["behavior"], f"{path}.spec.behavior")
    return HpaSpec(
        name=str(meta.get("name", "hpa")),
        namespace=str(meta.get("namespace", "default")),
        min_replicas=min_r,
        max_replicas=max_r,
        metrics=metrics,
        behavior=behavior,
    )


def _metric(raw: Any, path: str) -> MetricSpec:
    raw = _mapping(raw, path)
    kind = raw.get("type")
    if kind not in METRIC_TYPES:
        raise ValidationError(f"{path}.type", f"expected one of {', '.join(METRIC_TYPES)}, got {kind!r}")
    if kind not in SUPPORTED_METRIC_TYPES:
        raise ValidationError(f"{path}.type", f"{kind} metrics are not simulated (use External or Pods)")
    key = "external" if kind == "External" else "pods"
    body = _mapping(raw.get(key), f"{path}.{key}")
    metric = _mapping(body.get("metric"), f"{path}.{key}.metric")
    name = metric.get("name")
    if not isinstance(name, str) or not name:
        raise ValidationError(f"{path}.{key}.metric.name", "required")
    selector = metric.get("selector") or {}
    if not isinstance(selector, Mapping):
        raise ValidationError(f"{path}.{key}.metric.selector", "expected an object")
    target = _mapping(body.get("target"), f"{path}.{key}.target")
    target_type = target.get("type")
    allowed = ("Value", "AverageValue") if kind == "External" else ("AverageValue",)
    if target_type not in allowed:
        raise ValidationError(f"{path}.{key}.target.type", f"expected {' or '.join(allowed)}, got {target_type!r}")
    field_name = "value" if target_type == "Value" else "averageValue"
    milli = _quantity_milli(target.get(field_name), f"{path}.{key}.target.{field_name}")
    if milli <= 0:
        raise ValidationError(f"{path}.{key}.target.{field_name}", "must be greater than 0")
    return MetricSpec(type=kind, name=name, target_type=str(target_type), target_milli=milli, selector=dict(selector))


def _behavior(raw: Any, path: str) -> Behavior:
    raw = _mapping(raw, path)
    up = _rules(raw.get("scaleUp"), f"{path}.scaleUp", default_scale_up())
    down = _rules(raw.get("scaleDown"), f"{path}.scaleDown", default_scale_down())
    return Behavior(scale_up=up, scale_down=down)


def _rules(raw: Any, path: str, defaults: ScalingRules) -> ScalingRules:
    """Each unset field takes its default separately; `policies` replaces the whole default list."""
    if raw is None:
        return defaults
    raw = _mapping(raw, path)
    window: float | None = defaults.window
    if raw.get("stabilizationWindowSeconds") is not None:
        window = float(_int(raw, "stabilizationWindowSeconds", path, minimum=0, maximum=3600))
    select = raw.get("selectPolicy", defaults.select_policy)
    if select not in SELECT_POLICIES:
        raise ValidationError(f"{path}.selectPolicy", f"expected one of {', '.join(SELECT_POLICIES)}, got {select!r}")
    policies = defaults.policies
    if raw.get("policies") is not None:
        if not isinstance(raw["policies"], list) or not raw["policies"]:
            raise ValidationError(f"{path}.policies", "expected a non-empty list")
        policies = tuple(_policy(p, f"{path}.policies[{i}]") for i, p in enumerate(raw["policies"]))
    tolerance = None
    if raw.get("tolerance") is not None:
        try:
            tolerance = approximate_float(raw["tolerance"])
        except QuantityError as exc:
            raise ValidationError(f"{path}.tolerance", str(exc)) from None
        if tolerance < 0:
            raise ValidationError(f"{path}.tolerance", "must not be negative")
    return ScalingRules(window=window, select_policy=select, policies=policies, tolerance=tolerance)


def _policy(raw: Any, path: str) -> ScalingPolicy:
    raw = _mapping(raw, path)
    kind = raw.get("type")
    if kind not in POLICY_TYPES:
        raise ValidationError(f"{path}.type", f"expected Pods or Percent, got {kind!r}")
    value = _int(raw, "value", path, required=True, minimum=1)
    period = _int(raw, "periodSeconds", path, required=True, minimum=1, maximum=1800)
    return ScalingPolicy(type=kind, value=value, period=float(period))


def _quantity_milli(value: Any, path: str) -> int:
    if value is None:
        raise ValidationError(path, 'required (a quantity such as "10" or "500m")')
    try:
        return milli_value(parse_quantity(value))
    except QuantityError as exc:
        raise ValidationError(path, str(exc)) from None


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValidationError(
            path, "required: expected an object" if value is None else f"expected an object, got {type(value).__name__}"
        )
    return value


def _int(
    obj: Mapping[str, Any],
    key: str,
    path: str,
    default: int | None = None,
    required: bool = False,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    value = obj.get(key)
    if value is None:
        if required or default is None:
            raise ValidationError(f"{path}.{key}", "required")
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{path}.{key}", f"expected an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValidationError(f"{path}.{key}", f"must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise ValidationError(f"{path}.{key}", f"must be at most {maximum}")
    return value
