"""Object state -> the status each VirtualMetric / VirtualMetricEvent reports (conditions, counts).

Pure: the same state always gives the same dictionaries. An event's status is made from a tuple
of values (EventStatusInputs) only, which lets EventStatusMemo keep the statuses whose tuple did
not change between refreshes. A condition's reason changing (for example to MetricNameConflict and
back) is the hook for anything that reports transitions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from adapter.pipeline.objects import EventState, MetricNames, MetricState, resolve_metric_names
from adapter.pipeline.publish import Published
from adapter.resources import KIND_METRIC
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


class HealthView(NamedTuple):
    """What an event's status shows of its source's health (SourceHealth is mutated in place)."""

    attempted: bool
    last_success: float | None
    last_error: str | None
    item_count: int
    warnings: tuple[str, ...]


class EventStatusInputs(NamedTuple):
    """Everything an event's status is made of, as values: equal inputs make an equal status, so a
    refresh can keep the status of an event whose inputs did not change (EventStatusMemo)."""

    generation: int
    error: str | None  # None when the object is loaded and valid
    source_kind: str
    health: HealthView | None
    stale: bool
    unknown_metrics: tuple[str, ...]  # metric names of its entries that nothing serves
    dropped: int
    reasons: tuple[str, ...]
    unreachable: tuple[str, ...]
    effects: Any  # a forecast source's fitted regressors (replaced at each refit, never mutated)


def event_status_inputs(state: EventState, published: Published, now: float) -> EventStatusInputs:
    vme, runner = state.vme, state.runner
    if state.error is not None or vme is None:
        # `stale` feeds only the staleness gauge here: an invalid object's status says false.
        error = state.error or "not loaded"
        return EventStatusInputs(state.generation, error, "", None, is_stale(state, now), (), 0, (), (), None)
    health = runner.health if runner else None
    view = None
    if health is not None:
        view = HealthView(
            health.last_attempt is not None,
            health.last_success,
            health.last_error,
            health.item_count,
            tuple(health.warnings),
        )
    served = published.metrics
    unknown = [m for m in state.metric_names if m not in served]
    contributions = state.contributions
    return EventStatusInputs(
        state.generation,
        None,
        vme.source.kind,
        view,
        is_stale(state, now),
        tuple(sorted(unknown)) if unknown else (),
        contributions.dropped,
        contributions.reasons,
        state.unreachable,
        getattr(runner.source, "last_effects", None) if runner else None,
    )


def event_status(state: EventState, published: Published, now: float) -> dict[str, Any]:
    return status_of_event(event_status_inputs(state, published, now))


def status_of_event(inputs: EventStatusInputs) -> dict[str, Any]:
    gen = inputs.generation
    if inputs.error is not None:
        message = inputs.error
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
    health, stale = inputs.health, inputs.stale
    if health is None or not health.attempted:
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
    if inputs.dropped:
        exprs = condition("ExpressionsValid", False, "EvaluationFailed", "; ".join(inputs.reasons), gen)
    elif inputs.unreachable:
        exprs = condition(
            "ExpressionsValid",
            False,
            "UnreachableTarget",
            "no HPA can query these targets (an HPA's namespace and its selector's resource value "
            "must be valid label values): " + "; ".join(inputs.unreachable),
            gen,
        )
    else:
        exprs = condition("ExpressionsValid", True, "Valid", "all expressions compile and evaluate", gen)
    if inputs.unknown_metrics:
        ready = condition(
            "Ready", False, "UnknownMetric", f"no VirtualMetric defines {', '.join(inputs.unknown_metrics)}", gen
        )
    elif source["status"] == "True":
        ready = condition("Ready", True, "Serving", "values are served from this object", gen)
    else:
        ready = condition("Ready", False, source["reason"], source["message"], gen)
    status: dict[str, Any] = {
        "observedGeneration": gen,
        "sourceKind": inputs.source_kind,
        "itemCount": health.item_count if health else 0,
        "stale": stale,
        "conditions": [ready, source, exprs],
    }
    if health is not None and health.last_success is not None:
        status["lastSuccessfulFetchTime"] = rfc3339(health.last_success)
    if inputs.effects:
        status["regressors"] = inputs.effects  # forecast regressors: fitted effect per announced unit
    return status


class EventStatusMemo:
    """The last status made for each event and what it was made from. Every successful fetch changes
    its event's status (lastSuccessfulFetchTime), so the board refreshes about once a second; with
    1 000 events polled every 30 s some 33 of them change in that second, and making all 1 000
    statuses again took about 11 ms of the loop. Statuses handed out are shared between refreshes:
    read them, never change them (the status writer copies what it sends)."""

    def __init__(self) -> None:
        self._made: dict[str, tuple[EventStatusInputs, object, dict[str, Any]]] = {}

    def status(
        self, name: str, state: EventState, published: Published, now: float
    ) -> tuple[EventStatusInputs, dict[str, Any], bool]:
        """(inputs, status, whether either changed since the last call) for the event `name` now. The
        object itself is compared too: an edited file keeps generation 0, and what is logged about an
        event (Notices.warn_once) depends on its entries, which its status does not show."""
        inputs = event_status_inputs(state, published, now)
        made = self._made.get(name)
        if made is not None and made[0] == inputs and made[1] is state.vme:
            return inputs, made[2], False
        status = status_of_event(inputs)
        self._made[name] = (inputs, state.vme, status)
        return inputs, status, True

    def forget_gone(self, names: Iterable[str]) -> None:
        for gone in self._made.keys() - set(names):
            del self._made[gone]


def is_stale(state: EventState, now: float) -> bool:
    return bool(state.runner and state.runner.is_stale(now))


def metric_statuses(
    metrics: Mapping[str, MetricState],
    published: Published,
    lead_times: Any = None,
    unknown_targets: Mapping[str, Sequence[str]] | None = None,
    tolerance_steps: Any = None,
) -> Statuses:
    """Every VirtualMetric's status (events' statuses come from EventStatusMemo, a piece at a time).
    `unknown_targets`: by metric name, targets queried that nothing feeds."""
    names = resolve_metric_names(metrics.values())
    unknown = unknown_targets or {}
    return {
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
