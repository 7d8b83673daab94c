"""Typed models of the two custom resources, parsed from plain dicts (YAML or API JSON).

`prescaler.pingpong.ai/v1`, cluster-scoped: `VirtualMetric` and `VirtualMetricEvent`. Parsing is
strict (unknown fields are errors, as with a structural CRD schema) and every error names the object
and the field path. The kind-specific part of a source is validated by its own class
(`adapter.sources.registry`), so a new source kind needs no change here.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from adapter.errors import ValidationError
from adapter.fields import expect_mapping, read_bool, read_duration, read_number, read_string, reject_unknown
from adapter.labels import is_dns1123_label
from adapter.policy import DEFAULT_TOLERANCE, MERGE_STRATEGIES, MetricPolicy, ToleranceStep

GROUP = "prescaler.pingpong.ai"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND_METRIC = "VirtualMetric"
KIND_EVENT = "VirtualMetricEvent"

ON_STALE = ("Hold", "UseKnown")
COMMON_SOURCE_FIELDS = ("interval", "timeout", "staleAfter", "onStale")

# A metric name becomes a URL path segment: no '/', '%', and not '.' or '..'.
_METRIC_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.:|]{0,251}[A-Za-z0-9_])?\Z")
# \Z, not $: `$` also matches before a trailing newline, and "ns\n" is no name.
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\Z")
MAX_METRIC_ENTRIES = 1000


@dataclass(frozen=True)
class VirtualMetric:
    name: str  # metadata.name
    metric_name: str  # spec.name: the external metric served
    # Everything the timeline needs (default, merge strategy, lead/hold time, bounds), held once.
    policy: MetricPolicy = MetricPolicy()
    generation: int = 0
    uid: str = ""
    lead_time_auto: bool = False  # `leadTime: Auto`: lead_time is replaced by the learnt value

    # Read-only views of the policy for callers that name one field; the policy is the one copy.
    @property
    def default_value(self) -> float:
        return self.policy.default_value

    @property
    def merge_strategy(self) -> str:
        return self.policy.merge_strategy

    @property
    def lead_time(self) -> float:
        return self.policy.lead_time

    @property
    def hold_time(self) -> float:
        return self.policy.hold_time

    @property
    def min(self) -> float | None:
        return self.policy.min

    @property
    def max(self) -> float | None:
        return self.policy.max

    def clamp(self, value: float) -> float:
        return self.policy.clamp(value)

    def with_lead_time(self, seconds: float) -> VirtualMetric:
        """This object with another lead time (a learnt one, for `leadTime: Auto`)."""
        return dataclasses.replace(self, policy=dataclasses.replace(self.policy, lead_time=seconds))


@dataclass(frozen=True)
class CommonSourceSettings:
    """Fields every source kind shares: how often to fetch, how long to wait, when data is stale."""

    interval: float = 30.0
    timeout: float = 5.0
    stale_after: float = 150.0
    on_stale: str = "Hold"  # Hold | UseKnown


@dataclass(frozen=True, slots=True)  # slots: 100 000 entries are made (and kept) at a large start
class ResourceRef:
    namespace: str
    name: str | None = None
    # Take the target's name from this label of each item (prometheus series); exclusive with name.
    name_from_label: str | None = None


@dataclass(frozen=True, slots=True)
class MetricEntry:
    metric: str  # the VirtualMetric's spec.name
    resource: ResourceRef
    expression: str


@dataclass(frozen=True)
class SourceSpec:
    kind: str
    config: Any  # the kind's own parsed config (opaque here)
    common: CommonSourceSettings
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class VirtualMetricEvent:
    name: str
    source: SourceSpec
    metrics: tuple[MetricEntry, ...]
    labels: Mapping[str, str] = field(default_factory=dict)
    generation: int = 0
    uid: str = ""


class SourceKindParser(Protocol):
    """How the resource parser sees one source kind; `adapter.sources.registry` provides them.

    Resources cannot import the sources (they sit above), so the kinds are passed in.
    """

    @property
    def default_interval(self) -> float: ...

    def __call__(self, kind: str, spec: Mapping[str, Any], path: str) -> Any: ...


# ---------------------------------------------------------------- metadata


def _metadata(doc: Mapping[str, Any], kind: str) -> tuple[str, Mapping[str, Any]]:
    meta = expect_mapping(doc.get("metadata"), "metadata") if "metadata" in doc else None
    if meta is None:
        raise ValidationError("metadata", "required", obj=kind)
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ValidationError("metadata.name", "required", obj=kind)
    if not _DNS1123_SUBDOMAIN.match(name):
        raise ValidationError("metadata.name", f"{name!r} is not a valid DNS-1123 subdomain", obj=f"{kind}/{name}")
    if meta.get("namespace"):
        # Cluster-scoped resources: a namespace in the manifest is a mistake worth reporting.
        raise ValidationError(
            "metadata.namespace", f"{kind} is cluster-scoped; remove the namespace", obj=f"{kind}/{name}"
        )
    return name, meta


def _generation(meta: Mapping[str, Any]) -> int:
    gen = meta.get("generation", 0)
    return gen if isinstance(gen, int) and not isinstance(gen, bool) else 0


def object_id(doc: Mapping[str, Any]) -> str:
    """'Kind/name' for messages, best effort on malformed input."""
    kind = doc.get("kind") if isinstance(doc, Mapping) else None
    meta = doc.get("metadata") if isinstance(doc, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return f"{kind or '?'}/{name or '?'}"


# ---------------------------------------------------------------- VirtualMetric


def parse_virtual_metric(doc: Mapping[str, Any]) -> VirtualMetric:
    name, meta = _metadata(doc, KIND_METRIC)
    obj = f"{KIND_METRIC}/{name}"
    try:
        _check_type(doc, KIND_METRIC)
        spec = expect_mapping(doc.get("spec", {}) or {}, "spec")
        reject_unknown(
            spec,
            ("name", "defaultValue", "mergeStrategy", "leadTime", "holdTime", "min", "max", "stepPastTolerance"),
            "spec",
        )
        metric_name = read_string(spec, "name", "spec", default=name) or name
        if not _METRIC_NAME.match(metric_name) or metric_name in (".", ".."):
            raise ValidationError(
                "spec.name",
                f"{metric_name!r} is not a valid metric name (a URL path segment: letters, digits, '-', '_', '.', ':')",
            )
        minimum = read_number(spec, "min", "spec")
        maximum = read_number(spec, "max", "spec")
        if minimum is not None and maximum is not None and minimum > maximum:
            raise ValidationError("spec.min", f"min ({minimum:g}) is greater than max ({maximum:g})")
        return VirtualMetric(
            name=name,
            metric_name=metric_name,
            policy=MetricPolicy(
                default_value=read_number(spec, "defaultValue", "spec", default=0.0) or 0.0,
                merge_strategy=read_string(spec, "mergeStrategy", "spec", default="Sum", choices=MERGE_STRATEGIES)
                or "Sum",
                # Auto: learnt in cluster mode (adapter.store.leadtime); 5m until a measurement exists.
                lead_time=300.0
                if spec.get("leadTime") == "Auto"
                else read_duration(spec, "leadTime", "spec", 0.0, maximum=7 * 86400.0),
                hold_time=read_duration(spec, "holdTime", "spec", 0.0, maximum=7 * 86400.0),
                min=minimum,
                max=maximum,
                tolerance_step=_tolerance_step(spec),
            ),
            lead_time_auto=spec.get("leadTime") == "Auto",
            generation=_generation(meta),
            uid=str(meta.get("uid", "")),
        )
    except ValidationError as exc:
        raise exc.for_object(obj) from None


MAX_TOLERANCE = 1.0  # a tolerance of 100 % would make the HPA ignore a doubling


def _tolerance_step(spec: Mapping[str, Any]) -> ToleranceStep | None:
    """`stepPastTolerance: {scaleUp: true, tolerance: 0.1}`; absent or `scaleUp: false`: None (off)."""
    if spec.get("stepPastTolerance") is None:
        return None
    raw = expect_mapping(spec["stepPastTolerance"], "spec.stepPastTolerance")
    reject_unknown(raw, ("scaleUp", "tolerance"), "spec.stepPastTolerance")
    scale_up = read_bool(raw, "scaleUp", "spec.stepPastTolerance", default=True)
    tolerance = read_number(raw, "tolerance", "spec.stepPastTolerance", default=DEFAULT_TOLERANCE)
    assert tolerance is not None
    if not 0.0 <= tolerance < MAX_TOLERANCE:
        raise ValidationError(
            "spec.stepPastTolerance.tolerance", f"{tolerance:g} is not a fraction in [0, {MAX_TOLERANCE:g})"
        )
    return ToleranceStep(scale_up=True, tolerance=tolerance) if scale_up else None


def _check_type(doc: Mapping[str, Any], kind: str) -> None:
    if doc.get("apiVersion") != API_VERSION:
        raise ValidationError("apiVersion", f"expected {API_VERSION}, got {doc.get('apiVersion')!r}")
    if doc.get("kind") != kind:
        raise ValidationError("kind", f"expected {kind}, got {doc.get('kind')!r}")
    reject_unknown(doc, ("apiVersion", "kind", "metadata", "spec", "status"), "")


# ---------------------------------------------------------------- VirtualMetricEvent


def parse_virtual_metric_event(
    doc: Mapping[str, Any], source_parsers: Mapping[str, SourceKindParser]
) -> VirtualMetricEvent:
    """Parse a VirtualMetricEvent. `source_parsers[kind](kind, spec, path)` validates a source's block."""
    name, meta = _metadata(doc, KIND_EVENT)
    obj = f"{KIND_EVENT}/{name}"
    try:
        _check_type(doc, KIND_EVENT)
        spec = expect_mapping(doc.get("spec"), "spec")
        reject_unknown(spec, ("source", "metrics"), "spec")
        source = _parse_source(spec.get("source"), source_parsers)
        metrics = _parse_metric_entries(spec.get("metrics"))
        labels = meta.get("labels") or {}
        if not isinstance(labels, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            raise ValidationError("metadata.labels", "expected a map of string to string")
        return VirtualMetricEvent(
            name=name,
            source=source,
            metrics=metrics,
            labels=dict(labels),
            generation=_generation(meta),
            uid=str(meta.get("uid", "")),
        )
    except ValidationError as exc:
        raise exc.for_object(obj) from None


def _parse_source(raw: Any, source_parsers: Mapping[str, SourceKindParser]) -> SourceSpec:
    if raw is None:
        raise ValidationError("spec.source", "required")
    src = expect_mapping(raw, "spec.source")
    known = tuple(source_parsers)  # the registry is the one list of source kinds
    reject_unknown(src, known + COMMON_SOURCE_FIELDS, "spec.source")
    kinds = [k for k in known if k in src]
    if len(kinds) != 1:
        raise ValidationError(
            "spec.source",
            f"exactly one of {', '.join(known)} is required" + (f" (got {', '.join(kinds)})" if kinds else ""),
        )
    kind = kinds[0]
    block = dict(expect_mapping(src[kind], f"spec.source.{kind}"))
    # The shared settings may sit beside the kind or inside its block; the same field in
    # both places must agree, so a manifest can never mean two things.
    common_raw: dict[str, Any] = {}
    for key in COMMON_SOURCE_FIELDS:
        outer, inner = src.get(key), block.pop(key, None)
        if outer is not None and inner is not None and outer != inner:
            raise ValidationError(f"spec.source.{kind}.{key}", f"conflicts with spec.source.{key}")
        if outer is not None or inner is not None:
            common_raw[key] = outer if outer is not None else inner
    parser = source_parsers[kind]
    default_interval = parser.default_interval
    interval = read_duration(common_raw, "interval", "spec.source", default_interval, minimum=1.0)
    timeout = read_duration(common_raw, "timeout", "spec.source", min(5.0, interval), minimum=0.1, maximum=300.0)
    stale_after = read_duration(common_raw, "staleAfter", "spec.source", 5 * interval, minimum=interval)
    on_stale = read_string(common_raw, "onStale", "spec.source", default="Hold", choices=ON_STALE) or "Hold"
    common = CommonSourceSettings(interval=interval, timeout=timeout, stale_after=stale_after, on_stale=on_stale)
    config = parser(kind, block, f"spec.source.{kind}")
    return SourceSpec(kind=kind, config=config, common=common, raw=dict(src))


def _parse_metric_entries(raw: Any) -> tuple[MetricEntry, ...]:
    if raw is None:
        raise ValidationError("spec.metrics", "required")
    if not isinstance(raw, list) or not raw:
        raise ValidationError("spec.metrics", "expected a non-empty list")
    if len(raw) > MAX_METRIC_ENTRIES:
        raise ValidationError("spec.metrics", f"more than {MAX_METRIC_ENTRIES} entries")
    entries = []
    metric_ok: dict[str, bool] = {}
    namespace_ok: dict[str, bool] = {}
    for index, item in enumerate(raw):
        fast = _common_entry(item, metric_ok, namespace_ok)
        if fast is not None:
            entries.append(fast)
            continue
        path = f"spec.metrics[{index}]"
        entry = expect_mapping(item, path)
        reject_unknown(entry, ("name", "resource", "value"), path)
        metric = read_string(entry, "name", path, required=True) or ""
        if not _METRIC_NAME.match(metric):
            raise ValidationError(f"{path}.name", f"{metric!r} is not a valid metric name")
        resource = _parse_resource(entry.get("resource"), f"{path}.resource")
        value = expect_mapping(entry.get("value"), f"{path}.value") if "value" in entry else None
        if value is None:
            raise ValidationError(f"{path}.value", "required")
        reject_unknown(value, ("expression",), f"{path}.value")
        expression = value.get("expression")
        if isinstance(expression, (int, float)) and not isinstance(expression, bool):
            expression = repr(expression)  # `expression: 5` in YAML is a constant
        if not isinstance(expression, str) or not expression.strip():
            raise ValidationError(f"{path}.value.expression", "required: a non-empty expression string")
        entries.append(MetricEntry(metric=metric, resource=resource, expression=expression))
    return tuple(entries)


_ENTRY_FIELDS = frozenset(("name", "resource", "value"))
_RESOURCE_FIELDS = frozenset(("name", "namespace"))


def _common_entry(item: Any, metric_ok: dict[str, bool], namespace_ok: dict[str, bool]) -> MetricEntry | None:
    """The usual entry ({name, resource: {name, namespace}, value: {expression}}, all valid) checked
    in one go: 100 000 entries load in a fraction of the field-by-field time. None for anything else,
    which then takes the field-by-field path that words the error. Metric names and namespaces repeat,
    so their checks are remembered per call."""
    if type(item) is not dict or item.keys() != _ENTRY_FIELDS:
        return None
    metric, resource, value = item["name"], item["resource"], item["value"]
    if (
        type(metric) is not str
        or type(resource) is not dict
        or type(value) is not dict
        or resource.keys() != _RESOURCE_FIELDS
        or len(value) != 1
    ):
        return None
    namespace, name, expression = resource["namespace"], resource["name"], value.get("expression")
    if type(namespace) is not str or type(name) is not str or type(expression) is not str:
        return None
    if len(metric) > 4096 or len(namespace) > 4096 or len(name) > 4096 or len(expression) > 4096:
        return None
    ok = metric_ok.get(metric)
    if ok is None:
        ok = metric_ok[metric] = bool(metric) and _METRIC_NAME.match(metric) is not None
    known = namespace_ok.get(namespace)
    if known is None:
        known = namespace_ok[namespace] = is_dns1123_label(namespace)
    if not (ok and known and _DNS1123_SUBDOMAIN.match(name) and expression.strip()):
        return None
    return MetricEntry(metric=metric, resource=ResourceRef(namespace=namespace, name=name), expression=expression)


def _parse_resource(raw: Any, path: str) -> ResourceRef:
    if raw is None:
        raise ValidationError(path, "required")
    res = expect_mapping(raw, path)
    reject_unknown(res, ("name", "namespace", "nameFromLabel"), path)
    namespace = read_string(res, "namespace", path, required=True) or ""
    if not is_dns1123_label(namespace):
        raise ValidationError(f"{path}.namespace", f"{namespace!r} is not a valid namespace name")
    name = read_string(res, "name", path)
    from_label = read_string(res, "nameFromLabel", path)
    if (name is None) == (from_label is None):
        raise ValidationError(path, "exactly one of name or nameFromLabel is required")
    if name is not None and not _DNS1123_SUBDOMAIN.match(name):
        raise ValidationError(f"{path}.name", f"{name!r} is not a valid resource name")
    return ResourceRef(namespace=namespace, name=name, name_from_label=from_label)
