"""Prometheus metrics of the server itself, served on /metrics.

A private registry keeps the exposition to what prescaler owns (no duplicate-registration surprises
when tests build several apps in one process).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

REQUEST_SECONDS = Histogram(
    "prescaler_request_duration_seconds", "Latency of API requests by route and code.",
    ["route", "code"], registry=REGISTRY,
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
SOURCE_FETCHES = Counter(
    "prescaler_source_fetches_total", "Source fetches by kind and result (success|error).",
    ["kind", "result"], registry=REGISTRY,
)
SOURCE_LOOP_ERRORS = Counter(
    "prescaler_source_loop_errors_total", "Unexpected exceptions caught in a source's fetch loop, by kind "
    "and stage (fetch|publish|loop); the loop logs them and retries with backoff.", ["kind", "stage"],
    registry=REGISTRY,
)
SOURCE_FETCH_SECONDS = Histogram(
    "prescaler_source_fetch_duration_seconds", "Duration of source fetches.", ["kind"], registry=REGISTRY,
)
SOURCE_LAST_SUCCESS = Gauge(
    "prescaler_source_last_success_timestamp_seconds", "Unix time of the last successful fetch.",
    ["event"], registry=REGISTRY,
)
SOURCE_STALE = Gauge(
    "prescaler_source_stale", "1 when the source of a VirtualMetricEvent is stale.", ["event"], registry=REGISTRY,
)
TIMELINE_REBUILDS = Counter(
    "prescaler_timeline_recomputes_total", "Timeline recomputations.", registry=REGISTRY,
)
TIMELINE_REBUILD_SECONDS = Histogram(
    "prescaler_timeline_recompute_duration_seconds", "Duration of timeline recomputations.", registry=REGISTRY,
)
TIMELINE_KEYS = Gauge("prescaler_timeline_targets", "(metric, target) pairs served.", registry=REGISTRY)
CONTRIBUTIONS_DROPPED = Counter(
    "prescaler_contributions_dropped_total",
    "Contributions dropped because their expression failed or gave a non-finite value.",
    ["event"], registry=REGISTRY,
)
OBJECTS_INVALID = Gauge(
    "prescaler_objects_invalid", "Objects rejected by validation, by kind.", ["kind"], registry=REGISTRY,
)
