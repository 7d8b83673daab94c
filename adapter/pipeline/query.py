"""Published snapshot -> typed answers. A lookup and a binary search: nothing is rebuilt per query.

The outcomes say what happened, not how HTTP reports it (adapter.api maps them to responses).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from adapter.labels import Selector
from adapter.pipeline.publish import PartitionView, Published, Target
from adapter.sources.runner import SourceRunner


@dataclass(frozen=True)
class TargetValue:
    name: str
    namespace: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True)
class Values:
    values: tuple[TargetValue, ...] = ()
    # The answer stays the same until this time while the snapshot is the same (lets the HTTP
    # layer reuse a response body).
    valid_until: float = math.inf
    # Resources the selector named that nothing feeds (served the default): usually a typo in an
    # HPA's selector. The engine counts, logs and reports them.
    unknown: tuple[str, ...] = ()


@dataclass(frozen=True)
class MetricNotFound:
    metric: str
    message: str


@dataclass(frozen=True)
class SourceOnHold:
    """A target's source is stale and its event says onStale: Hold; lasts until a new snapshot."""

    metric: str
    message: str


Outcome = Values | MetricNotFound | SourceOnHold


def query(published: Published, metric: str, namespace: str, selector: Selector, now: float) -> Outcome:
    vm = published.metrics.get(metric)
    if vm is None:
        return MetricNotFound(metric, f"the server could not find the metric {metric} for namespaces")
    pinned = selector.equality_values("resource")
    candidates: list[tuple[str, PartitionView, Target]] = []
    found: PartitionView | None = None
    if namespace == "*":
        for (m, ns), part in published.partitions.items():
            if m == metric:
                candidates.extend((ns, part, t) for t in part.targets)
    else:
        found = published.partitions.get((metric, namespace))
        if found is not None:
            if pinned is not None:
                # The HPA's usual query (resource=<name>): direct lookups, whatever the number of targets.
                candidates = [
                    (namespace, found, found.by_resource[r]) for r in sorted(pinned) if r in found.by_resource
                ]
            else:
                candidates = [(namespace, found, t) for t in found.targets]
    values: list[TargetValue] = []
    seen: set[str] = set()
    unknown: list[str] = []
    valid_until = math.inf
    default = vm.clamp(vm.default_value)
    for ns, part, target in candidates:
        if not selector.matches(target.labels):
            continue
        for runner, owner in zip(target.holders, target.holder_names):
            # onStale: Hold also covers a source that never succeeded: it knows nothing yet, and the
            # default value would contradict a replica that has fetched.
            if owner in target.never_fetched or runner.is_stale(now):
                return SourceOnHold(metric, _stale_message(metric, ns, target.resource, owner, runner, now))
            valid_until = min(valid_until, runner.stale_at())
        reading = target.timeline_set(part).value_and_next_change((metric, ns, target.resource), now)
        if reading is None:
            value = default
        else:
            value, next_change = reading
            valid_until = min(valid_until, next_change)
        values.append(TargetValue(target.resource, ns, target.labels, value))
        seen.add(target.resource)
    # A selector that names a resource nothing feeds always gets an item: an empty list would make
    # the HPA treat the metric as failed and stop scaling down. A resource that is fed but that the
    # selector's other terms exclude (resource=a,tier!=gold on a target labelled tier=gold) gets none:
    # its real labels decided, not the {resource: a} of a target that does not exist.
    if namespace != "*":
        fed = found.by_resource if found is not None else {}
        for resource in sorted(pinned or ()):
            labels = {"resource": resource}
            if resource not in seen and resource not in fed and selector.matches(labels):
                if found is not None and found.waiting:
                    runner, owner = found.waiting[0]
                    return SourceOnHold(metric, _stale_message(metric, namespace, resource, owner, runner, now))
                values.append(TargetValue(resource, namespace, labels, default))
                unknown.append(resource)
    values.sort(key=lambda v: (v.namespace, v.name))
    return Values(tuple(values), valid_until, tuple(unknown))


def values_over(published: Published, metric: str, namespace: str, resource: str, times: np.ndarray) -> np.ndarray:
    """V(t) of one target at many times (the same timeline a query reads; staleness aside)."""
    vm = published.metrics[metric]
    times = np.asarray(times, dtype=float)
    part = published.partitions.get((metric, namespace))
    key = (metric, namespace, resource)
    target = part.by_resource.get(resource) if part is not None else None
    if part is None or target is None or key not in target.timeline_set(part):
        return np.full(len(times), vm.clamp(vm.default_value))
    return target.timeline_set(part).values_at(key, times)


def _stale_message(metric: str, ns: str, resource: str, owner: str, runner: SourceRunner, now: float) -> str:
    last = runner.health.last_success
    error = f"; last error: {runner.health.last_error}" if runner.health.last_error else ""
    if last is None:
        return (
            f"metric {metric} for {ns}/{resource} is on hold: the source of VirtualMetricEvent {owner} has "
            f"not fetched successfully yet (onStale: Hold){error}"
        )
    return (
        f"metric {metric} for {ns}/{resource} is on hold: the source of VirtualMetricEvent {owner} is "
        f"stale (last successful fetch {now - last:.0f}s ago, staleAfter "
        f"{runner.source.common.stale_after:g}s, onStale: Hold){error}"
    )
