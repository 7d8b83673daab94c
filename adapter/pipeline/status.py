"""Object state -> the status each VirtualMetric / VirtualMetricEvent reports (conditions, counts).

Pure: the same state always gives the same dictionaries. A condition's reason changing (for
example to MetricNameConflict and back) is the hook for anything that reports transitions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from adapter.pipeline.objects import EventState, MetricNames, MetricState, resolve_metric_names
from adapter.pipeline.publish import Published
from adapter.resources import KIND_EVENT, KIND_METRIC
from adapter.timefmt import rfc3339

Statuses = dict[tuple[str, str], tuple[int, dict[str, Any]]]  # (kind, name) -> (generation, status)


def condition(kind: str, ok: bool | None, reason: str, message: str, generation: int) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "Unknown" if ok is None else ("True" if ok else "False"),
        "reason": reason,
        "message": message[:32768],
        "observedGeneration": generation,
    }


def metric_status(
    state: MetricState,
    names: MetricNames,
    published: Published,
    lead_times: Any = None,
    unknown_targets: Sequence[str] = (),
    tolerance_steps: Any = None,
) -> dict[str, Any]:
    """`unknown_targets`: "namespace/name" queried for this metric that nothing feeds (latest last)."""
    gen = state.generation
    status: dict[str, Any] = {"observedGeneration": gen, "targets": 0}
    conflict = names.conflicts.get(state.name)
    if state.metric is not None:
        status["metricName"] = state.metric.metric_name  # the Metric column: spec.name may have defaulted
    if state.metric is None or state.error is not None:
        status["conditions"] = [condition("Ready", False, "InvalidSpec", state.error or "not loaded", gen)]
    elif conflict is not None:
        status["conditions"] = [condition("Ready", False, "MetricNameConflict", conflict, gen)]
    else:
        status["targets"] = published.target_count(state.metric.metric_name)
        status["conditions"] = [condition("Ready", True, "Valid", "metric is served", gen)]
        if unknown_targets:
            # Served the defaultValue (an empty answer would stop the HPA), but findable: most often a
            # typo in an HPA's selector or namespace.
            status["unknownTargets"] = sorted(unknown_targets)
    learned = lead_times.status(state.metric) if lead_times is not None and state.metric is not None else None
    if learned is not None:
        status["learnedLeadTime"] = learned  # leadTime: Auto (adapter.store.leadtime)
    stepped = tolerance_steps.status(state.metric) if tolerance_steps is not None and state.metric is not None else None
    if stepped is not None:
        status["toleranceStep"] = stepped  # stepPastTolerance (adapter.pipeline.deadband)
    return status


def event_status(state: EventState, published: Published, now: float) -> dict[str, Any]:
    gen = state.generation
    if state.error is not None or state.vme is None:
        message = state.error or "not loaded"
        return {
            "observedGeneration": gen,
            "itemCount": 0,
            "stale": False,
            "conditions": [
                condition("Ready", False, "InvalidSpec", message, gen),
                condition("SourceHealthy", None, "NotStarted", "the object is invalid", gen),
                condition("ExpressionsValid", False, "InvalidSpec", message, gen),
            ],
        }
    runner = state.runner
    health = runner.health if runner else None
    stale = is_stale(state, now)
    if health is None or health.last_attempt is None:
        source = condition("SourceHealthy", None, "Pending", "waiting for the first fetch", gen)
    elif stale:
        source = condition(
            "SourceHealthy",
            False,
            "Stale",
            f"no successful fetch within staleAfter: {health.last_error or 'no data'}",
            gen,
        )
    elif health.last_error:
        source = condition("SourceHealthy", False, "FetchFailed", health.last_error, gen)
    else:
        warn = f"; {len(health.warnings)} warning(s): " + "; ".join(health.warnings[:3]) if health.warnings else ""
        source = condition("SourceHealthy", True, "FetchSucceeded", f"{health.item_count} item(s){warn}", gen)
    unknown_metrics = sorted(m for m in state.metric_names if m not in published.metrics)
    if state.contributions.dropped:
        exprs = condition("ExpressionsValid", False, "EvaluationFailed", "; ".join(state.contributions.reasons), gen)
    elif state.unreachable:
        exprs = condition(
            "ExpressionsValid",
            False,
            "UnreachableTarget",
            "no HPA can query these targets (an HPA's namespace and its selector's resource value "
            "must be valid label values): " + "; ".join(state.unreachable),
            gen,
        )
    else:
        exprs = condition("ExpressionsValid", True, "Valid", "all expressions compile and evaluate", gen)
    if unknown_metrics:
        ready = condition(
            "Ready", False, "UnknownMetric", f"no VirtualMetric defines {', '.join(unknown_metrics)}", gen
        )
    elif source["status"] == "True":
        ready = condition("Ready", True, "Serving", "values are served from this object", gen)
    else:
        ready = condition("Ready", False, source["reason"], source["message"], gen)
    status: dict[str, Any] = {
        "observedGeneration": gen,
        "sourceKind": state.vme.source.kind,
        "itemCount": health.item_count if health else 0,
        "stale": stale,
        "conditions": [ready, source, exprs],
    }
    if health is not None and health.last_success is not None:
        status["lastSuccessfulFetchTime"] = rfc3339(health.last_success)
    effects = getattr(runner.source, "last_effects", None) if runner else None
    if effects:
        status["regressors"] = effects  # forecast regressors: fitted effect per announced unit
    return status


def is_stale(state: EventState, now: float) -> bool:
    return bool(state.runner and state.runner.is_stale(now))


def all_statuses(
    metrics: Mapping[str, MetricState],
    events: Mapping[str, EventState],
    published: Published,
    now: float,
    lead_times: Any = None,
    unknown_targets: Mapping[str, Sequence[str]] | None = None,
    tolerance_steps: Any = None,
) -> Statuses:
    """`unknown_targets`: by metric name, targets queried that nothing feeds."""
    names = resolve_metric_names(metrics.values())
    unknown = unknown_targets or {}
    out: Statuses = {
        (KIND_METRIC, n): (
            s.generation,
            metric_status(
                s,
                names,
                published,
                lead_times,
                unknown.get(s.metric.metric_name, ()) if s.metric is not None else (),
                tolerance_steps,
            ),
        )
        for n, s in metrics.items()
    }
    for name, state in events.items():
        out[(KIND_EVENT, name)] = (state.generation, event_status(state, published, now))
    return out
