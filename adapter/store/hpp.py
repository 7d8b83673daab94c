"""HorizontalPodPrescaler (the seed's third kind): what it means for an HPA, checked, never enforced.

The seed's HPP rewrote an HPA so that it wanted ``ceil(currentMetric / targetMetric)`` replicas, where
``currentMetric`` is the VirtualMetric's value for the workload named like the HPP (the seed looks the
metrics up by the HPP's metadata). Here the HPA does that itself with one ``External`` metric entry::

    - type: External
      external:
        metric: {name: <metric>, selector: {matchLabels: {resource: <HPP name>}}}
        target: {type: AverageValue, averageValue: "<target.averageValue>"}

prescaler never writes an HPA. This module only computes, for an HPP and the HPA it names:

* whether the HPA already has every entry (`check_hpa` -> the ``HPAConfigured`` condition);
* the JSON patch that adds or corrects the missing entries, as a ready ``kubectl patch`` command;
* the full HPA manifest with the entries in place (`patched_manifest`).

Pure functions over dicts: no Kubernetes client here (adapter/store/hpp_kube.py watches and writes
status; adapter/migrate.py prints).
"""

from __future__ import annotations

import copy
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from adapter.quantity import format_quantity, parse_quantity
from adapter.resources import API_VERSION

KIND_HPP = "HorizontalPodPrescaler"
KIND_HPA = "HorizontalPodAutoscaler"
PLURAL_HPP = "horizontalpodprescalers"
CONDITION = "HPAConfigured"
# What an HPA without spec.metrics does (autoscaling/v2 default): keep it when adding entries.
DEFAULT_CPU_METRIC = {
    "type": "Resource",
    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
}
_SERVER_FIELDS = ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields", "selfLink")


class HPPError(ValueError):
    """An HPP document that cannot be understood; the message names the object and the field."""


@dataclass(frozen=True)
class HPPMetric:
    name: str
    average_value: str  # canonical Kubernetes quantity, e.g. "10", "2500m"


@dataclass(frozen=True)
class Prescaler:
    namespace: str
    name: str  # also the workload: the selector is resource=<name>
    hpa_name: str
    metrics: tuple[HPPMetric, ...]
    generation: int = 0

    @property
    def ref(self) -> str:
        return f"{KIND_HPP} {self.namespace}/{self.name}"


@dataclass
class Check:
    configured: bool
    reason: str  # HPAConfigured | HPANotFound | MetricMissing | TargetDiffers
    message: str
    ops: list[dict[str, Any]] = field(default_factory=list)
    command: str = ""


def parse_hpp(doc: Mapping[str, Any], default_namespace: str = "default") -> Prescaler:
    meta = doc.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise HPPError(f"{KIND_HPP}: metadata.name is required")
    namespace = meta.get("namespace") or default_namespace
    where = f"{KIND_HPP} {namespace}/{name}"
    if doc.get("apiVersion") != API_VERSION:
        raise HPPError(f"{where}: apiVersion must be {API_VERSION}, not {doc.get('apiVersion')!r}")
    spec = doc.get("spec")
    if not isinstance(spec, Mapping):
        raise HPPError(f"{where}: spec is required")
    ref = spec.get("scaleTargetRef")
    if not isinstance(ref, Mapping) or not isinstance(ref.get("name"), str) or not ref["name"]:
        raise HPPError(f"{where}: spec.scaleTargetRef.name (the HPA's name) is required")
    if ref.get("kind", KIND_HPA) != KIND_HPA:
        raise HPPError(f"{where}: spec.scaleTargetRef.kind must be {KIND_HPA}, not {ref.get('kind')!r}")
    raw_metrics = spec.get("metrics")
    if not isinstance(raw_metrics, list) or not raw_metrics:
        raise HPPError(f"{where}: spec.metrics must be a non-empty list")
    metrics = []
    for index, entry in enumerate(raw_metrics):
        path = f"spec.metrics[{index}]"
        if not isinstance(entry, Mapping):
            raise HPPError(f"{where}: {path} must be a mapping")
        metric = entry.get("metric")
        metric_name = metric.get("name") if isinstance(metric, Mapping) else None
        if not isinstance(metric_name, str) or not metric_name:
            raise HPPError(f"{where}: {path}.metric.name is required")
        target = entry.get("target")
        value = target.get("averageValue") if isinstance(target, Mapping) else None
        if value is None or isinstance(value, bool):
            raise HPPError(f"{where}: {path}.target.averageValue is required")
        try:
            quantity = parse_quantity(str(value))
        except ValueError as exc:
            raise HPPError(f"{where}: {path}.target.averageValue {value!r} is not a quantity: {exc}") from None
        if quantity <= 0:
            raise HPPError(f"{where}: {path}.target.averageValue must be greater than 0")
        metrics.append(HPPMetric(metric_name, format_quantity(quantity)))
    generation = meta.get("generation")
    return Prescaler(
        str(namespace), name, ref["name"], tuple(metrics), generation if isinstance(generation, int) else 0
    )


def external_entry(hpp: Prescaler, metric: HPPMetric) -> dict[str, Any]:
    """The HPA metric entry that gives the seed's behaviour for one HPP metric."""
    return {
        "type": "External",
        "external": {
            "metric": {"name": metric.name, "selector": {"matchLabels": {"resource": hpp.name}}},
            "target": {"type": "AverageValue", "averageValue": metric.average_value},
        },
    }


def hpa_metrics(hpa: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """spec.metrics in autoscaling/v2 form; None when absent (the HPA then uses CPU at 80 %)."""
    spec = hpa.get("spec") if isinstance(hpa.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    if str(hpa.get("apiVersion", "")).endswith("/v1"):
        pct = spec.get("targetCPUUtilizationPercentage")
        if pct is None:
            return None
        return [
            {
                "type": "Resource",
                "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": pct}},
            }
        ]
    metrics = spec.get("metrics")
    return [dict(m) for m in metrics if isinstance(m, Mapping)] if isinstance(metrics, list) else None


def _find(metrics: Sequence[Mapping[str, Any]], hpp: Prescaler, metric: HPPMetric) -> tuple[int | None, bool]:
    """(index of the entry for this metric and workload, whether its target is right)."""
    for index, entry in enumerate(metrics):
        external = entry.get("external") if entry.get("type") == "External" else None
        if not isinstance(external, Mapping):
            continue
        m = external.get("metric") if isinstance(external.get("metric"), Mapping) else {}
        assert isinstance(m, Mapping)
        selector = m.get("selector") if isinstance(m.get("selector"), Mapping) else {}
        assert isinstance(selector, Mapping)
        labels = selector.get("matchLabels") if isinstance(selector.get("matchLabels"), Mapping) else {}
        assert isinstance(labels, Mapping)
        if m.get("name") != metric.name or labels.get("resource") != hpp.name:
            continue
        target = external.get("target") if isinstance(external.get("target"), Mapping) else {}
        assert isinstance(target, Mapping)
        return index, (
            target.get("type") == "AverageValue" and _same_quantity(target.get("averageValue"), metric.average_value)
        )
    return None, False


def _same_quantity(a: Any, b: str) -> bool:
    try:
        return Decimal(parse_quantity(str(a))) == Decimal(parse_quantity(b))
    except (ValueError, TypeError):
        return False


def patch_ops(hpp: Prescaler, hpa: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """JSON patch (RFC 6902) adding or correcting the entries; empty when nothing is missing.

    Without the HPA at hand the entries are appended (``/spec/metrics/-``), which assumes the HPA
    lists its metrics; with it, a wrong entry is replaced in place (guarded by a ``test`` op, so the
    patch fails rather than overwrite an entry that moved), and an HPA without ``spec.metrics`` gets
    its implicit CPU metric written out so adding an entry does not drop it."""
    current = hpa_metrics(hpa) if hpa is not None else []
    ops: list[dict[str, Any]] = []
    appended: list[dict[str, Any]] = []
    for metric in hpp.metrics:
        index, right = _find(current or [], hpp, metric)
        if index is not None and right:
            continue
        entry = external_entry(hpp, metric)
        if index is not None:
            ops.append({"op": "test", "path": f"/spec/metrics/{index}/external/metric/name", "value": metric.name})
            ops.append({"op": "replace", "path": f"/spec/metrics/{index}", "value": entry})
        else:
            appended.append(entry)
    if appended:
        if hpa is not None and current is None:
            ops.append({"op": "add", "path": "/spec/metrics", "value": [DEFAULT_CPU_METRIC, *appended]})
        else:
            ops.extend({"op": "add", "path": "/spec/metrics/-", "value": e} for e in appended)
    return ops


def patch_command(hpp: Prescaler, ops: list[dict[str, Any]]) -> str:
    body = json.dumps(ops, separators=(",", ":"))
    return (
        f"kubectl -n {shlex.quote(hpp.namespace)} patch hpa {shlex.quote(hpp.hpa_name)} "
        f"--type=json -p {shlex.quote(body)}"
    )


def check_hpa(hpp: Prescaler, hpa: Mapping[str, Any] | None) -> Check:
    where = f"HPA {hpp.namespace}/{hpp.hpa_name}"
    wanted = ", ".join(f"{m.name} (selector resource={hpp.name}, averageValue {m.average_value})" for m in hpp.metrics)
    if hpa is None:
        ops = patch_ops(hpp, None)
        return Check(
            False,
            "HPANotFound",
            f"{where} not found. Create it with the External metric {wanted}; "
            f"`prescaler migrate --hpp <file>` prints a manifest.",
            ops,
            patch_command(hpp, ops),
        )
    ops = patch_ops(hpp, hpa)
    if not ops:
        return Check(True, "HPAConfigured", f"{where} has the External metric {wanted}.")
    command = patch_command(hpp, ops)
    reason = "TargetDiffers" if any(op["op"] == "replace" for op in ops) else "MetricMissing"
    what = "has a different target or selector for" if reason == "TargetDiffers" else "lacks"
    return Check(
        False,
        reason,
        f"{where} {what} the External metric {wanted}. prescaler never changes an HPA; apply: {command}",
        ops,
        command,
    )


def condition(check: Check) -> dict[str, Any]:
    return {
        "type": CONDITION,
        "status": "True" if check.configured else "False",
        "reason": check.reason,
        "message": check.message,
    }


def patched_manifest(hpp: Prescaler, hpa: Mapping[str, Any] | None) -> dict[str, Any]:
    """The HPA as it should be: the given one with the entries in place (server fields dropped), or,
    without one, a new autoscaling/v2 HPA for Deployment <HPP name> with placeholders to review."""
    if hpa is None:
        doc: dict[str, Any] = {
            "apiVersion": "autoscaling/v2",
            "kind": KIND_HPA,
            "metadata": {"name": hpp.hpa_name, "namespace": hpp.namespace},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": hpp.name},
                "minReplicas": 1,
                "maxReplicas": 10,
                "metrics": [external_entry(hpp, m) for m in hpp.metrics],
            },
        }
        return doc
    doc = copy.deepcopy(dict(hpa))
    doc.pop("status", None)
    meta = doc.setdefault("metadata", {})
    for key in _SERVER_FIELDS:
        meta.pop(key, None)
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
        if not annotations:
            meta.pop("annotations")
    spec = doc.setdefault("spec", {})
    if str(doc.get("apiVersion", "")).endswith("/v1"):
        spec.pop("targetCPUUtilizationPercentage", None)
    doc["apiVersion"] = "autoscaling/v2"
    metrics = hpa_metrics(hpa)
    metrics = [copy.deepcopy(DEFAULT_CPU_METRIC)] if metrics is None else metrics
    for metric in hpp.metrics:
        index, right = _find(metrics, hpp, metric)
        if index is None:
            metrics.append(external_entry(hpp, metric))
        elif not right:
            metrics[index] = external_entry(hpp, metric)
    spec["metrics"] = metrics
    return doc
