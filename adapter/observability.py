"""Prometheus metrics of the server itself, served on /metrics.

A private registry keeps the exposition to what prescaler owns (no duplicate-registration surprises
when tests build several apps in one process).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections import OrderedDict
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

REQUEST_SECONDS = Histogram(
    "prescaler_request_duration_seconds",
    "Latency of API requests by route and code.",
    ["route", "code"],
    registry=REGISTRY,
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
SOURCE_FETCHES = Counter(
    "prescaler_source_fetches_total",
    "Source fetches by kind and result (success|error).",
    ["kind", "result"],
    registry=REGISTRY,
)
SOURCE_LOOP_ERRORS = Counter(
    "prescaler_source_loop_errors_total",
    "Unexpected exceptions caught in a source's fetch loop, by kind "
    "and stage (fetch|publish|loop); the loop logs them and retries with backoff.",
    ["kind", "stage"],
    registry=REGISTRY,
)
SOURCE_FETCH_SECONDS = Histogram(
    "prescaler_source_fetch_duration_seconds",
    "Duration of source fetches.",
    ["kind"],
    registry=REGISTRY,
)
SOURCE_LAST_SUCCESS = Gauge(
    "prescaler_source_last_success_timestamp_seconds",
    "Unix time of the last successful fetch.",
    ["event"],
    registry=REGISTRY,
)
SOURCE_STALE = Gauge(
    "prescaler_source_stale",
    "1 when the source of a VirtualMetricEvent is stale.",
    ["event"],
    registry=REGISTRY,
)
TIMELINE_REBUILDS = Counter(
    "prescaler_timeline_recomputes_total",
    "Timeline recomputations.",
    registry=REGISTRY,
)
TIMELINE_REBUILD_SECONDS = Histogram(
    "prescaler_timeline_recompute_duration_seconds",
    "Duration of timeline recomputations.",
    registry=REGISTRY,
)
TIMELINE_REBUILD_FAILURES = Counter(
    "prescaler_timeline_recompute_failures_total",
    "Timeline recomputations that failed (the previous values stay served; retried with backoff).",
    registry=REGISTRY,
)
TIMELINE_KEYS = Gauge("prescaler_timeline_targets", "(metric, target) pairs served.", registry=REGISTRY)
CONTRIBUTIONS_DROPPED = Counter(
    "prescaler_contributions_dropped_total",
    "Contributions dropped because their expression failed or gave a non-finite value.",
    ["event"],
    registry=REGISTRY,
)
OBJECTS_INVALID = Gauge(
    "prescaler_objects_invalid",
    "Objects rejected by validation, by kind.",
    ["kind"],
    registry=REGISTRY,
)

# ---------------------------------------------------------------- what an operator alerts on
# Label cardinality is bounded everywhere: `event` and `metric` are names of objects the operator
# created, `code` a handful of HTTP codes; the (metric, namespace, resource) of served values is an
# LRU of the targets HPAs actually queried (see ServedValues).

EVENT_FETCHES = Counter(
    "prescaler_event_fetches_total",
    "Source fetches per VirtualMetricEvent by result (success|error).",
    ["event", "result"],
    registry=REGISTRY,
)
EVENT_VERSIONS = Counter(
    "prescaler_event_versions_total",
    "VirtualMetricEvent versions received (lists, watch events, file reloads), by outcome: parsed, or "
    "unchanged (the uid, generation and labels of the one loaded: a status write coming back, a re-list), "
    "which is not parsed again.",
    ["outcome"],
    registry=REGISTRY,
)
EXPRESSION_FAILURES = Counter(
    "prescaler_expression_failures_total",
    "Expression evaluations that failed (error, missing value, non-finite result) per VirtualMetricEvent; "
    "each drops one contribution.",
    ["event"],
    registry=REGISTRY,
)
QUERIES = Counter(
    "prescaler_queries_total",
    'External metric value queries by metric and HTTP status code (metric is "<unknown>" for a name no '
    "VirtualMetric serves, so typos cannot grow the series).",
    ["metric", "code"],
    registry=REGISTRY,
)
UNKNOWN_TARGET_QUERIES = Counter(
    "prescaler_unknown_target_queries_total",
    "Queries for a target that no VirtualMetricEvent names (served the defaultValue), per metric.",
    ["metric"],
    registry=REGISTRY,
)
SERVED_VALUE = Gauge(
    "prescaler_served_value",
    "Value last served for a target an HPA queried (the most recently queried targets only; see "
    "prescaler_served_value_targets_evicted_total).",
    ["metric", "namespace", "resource"],
    registry=REGISTRY,
)
SERVED_EVICTED = Counter(
    "prescaler_served_value_targets_evicted_total",
    "Targets dropped from prescaler_served_value because more targets were queried than it keeps.",
    registry=REGISTRY,
)
BUILD_INFO = Gauge(
    "prescaler_build_info",
    "Always 1; the labels say which prescaler is running.",
    ["version", "commit"],
    registry=REGISTRY,
)
UNKNOWN_METRIC = "<unknown>"
DEFAULT_MAX_SERVED_TARGETS = 500


class ServedValues:
    """prescaler_served_value for at most `max_targets` targets: the ones most recently queried.

    Every HPA asks about its own target every 15 s, so the set of queried targets is the set of HPAs
    using prescaler; the LRU keeps that set and forgets targets nobody asks about any more (their
    series disappear instead of going stale). Unqueried targets are never exported, however many
    targets the VirtualMetricEvents name.
    """

    def __init__(self, gauge: Gauge, max_targets: int = DEFAULT_MAX_SERVED_TARGETS) -> None:
        self.gauge = gauge
        self.max_targets = max_targets
        # key -> the gauge's child for it (resolving a labelled child is the expensive part)
        self._recent: OrderedDict[tuple[str, str, str], Any] = OrderedDict()
        self._lock = threading.Lock()

    def record(self, metric: str, namespace: str, resource: str, value: float) -> None:
        key = (metric, namespace, resource)
        evicted = []
        with self._lock:
            child = self._recent.get(key)
            if child is None:
                child = self._recent[key] = self.gauge.labels(*key)
                while len(self._recent) > self.max_targets:
                    evicted.append(self._recent.popitem(last=False)[0])
            else:
                self._recent.move_to_end(key)
        child.set(value)
        for old in evicted:
            with contextlib.suppress(KeyError):
                self.gauge.remove(*old)
            SERVED_EVICTED.inc()

    def resize(self, max_targets: int) -> None:
        if max_targets < 1:
            raise ValueError(f"the number of served-value targets must be >= 1, got {max_targets}")
        self.max_targets = max_targets


SERVED = ServedValues(SERVED_VALUE)


def record_fetch(event: str, kind: str, success: bool, seconds: float | None = None) -> None:
    """One source fetch of a VirtualMetricEvent (called by the source runner)."""
    result = "success" if success else "error"
    SOURCE_FETCHES.labels(kind=kind, result=result).inc()
    EVENT_FETCHES.labels(event=event, result=result).inc()
    if seconds is not None:
        SOURCE_FETCH_SECONDS.labels(kind=kind).observe(seconds)


def record_rebuild_failure() -> None:
    TIMELINE_REBUILD_FAILURES.inc()


def record_rebuild(seconds: float, keys: int) -> None:
    """One publication of the timelines: how long it took and how many targets it serves."""
    TIMELINE_REBUILDS.inc()
    TIMELINE_REBUILD_SECONDS.observe(seconds)
    TIMELINE_KEYS.set(keys)


def record_invalid_objects(metrics: int, events: int) -> None:
    OBJECTS_INVALID.labels(kind="VirtualMetric").set(metrics)
    OBJECTS_INVALID.labels(kind="VirtualMetricEvent").set(events)


def record_expression_failures(event: str, count: int = 1) -> None:
    if count > 0:
        EXPRESSION_FAILURES.labels(event=event).inc(count)
        CONTRIBUTIONS_DROPPED.labels(event=event).inc(count)


def record_query(metric: str, code: int, known_metric: bool) -> None:
    _query_child(metric if known_metric else UNKNOWN_METRIC, code).inc()


@functools.lru_cache(maxsize=1024)
def _query_child(metric: str, code: int) -> Any:
    # On the hot path: resolving a labelled child costs a lock and a dict build; few combinations exist.
    return QUERIES.labels(metric=metric, code=str(code))


def record_served(metric: str, namespace: str, resource: str, value: float) -> None:
    SERVED.record(metric, namespace, resource, value)


def record_unknown_target(metric: str) -> None:
    """A query for a target nothing names (served the defaultValue): a typo in an HPA's selector."""
    UNKNOWN_TARGET_QUERIES.labels(metric=metric).inc()


def forget_event(event: str) -> None:
    """Drop the per-event series of a deleted VirtualMetricEvent."""
    for metric in (SOURCE_STALE, SOURCE_LAST_SUCCESS, CONTRIBUTIONS_DROPPED, EXPRESSION_FAILURES):
        with contextlib.suppress(KeyError):
            metric.remove(event)
    for result in ("success", "error"):
        with contextlib.suppress(KeyError):
            EVENT_FETCHES.remove(event, result)


def set_build_info(version: str, commit: str) -> None:
    BUILD_INFO.clear()
    BUILD_INFO.labels(version=version, commit=commit).set(1)
