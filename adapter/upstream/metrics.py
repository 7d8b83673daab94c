"""Prometheus metrics of the upstream passthrough, registered in the server's /metrics registry."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from adapter.observability import REGISTRY

UPSTREAM_REQUESTS = Counter(
    "prescaler_upstream_requests_total",
    "Requests sent to the upstream external-metrics adapter, by kind (value|discovery) and answer code "
    "(the upstream's HTTP code, or timeout|unavailable|too_large when there was no usable answer).",
    ["kind", "code"],
    registry=REGISTRY,
)
UPSTREAM_ERRORS = Counter(
    "prescaler_upstream_errors_total",
    "Upstream requests without a usable answer, by kind and reason (timeout|unavailable|too_large|invalid).",
    ["kind", "reason"],
    registry=REGISTRY,
)
UPSTREAM_SECONDS = Histogram(
    "prescaler_upstream_request_duration_seconds",
    "Latency of upstream requests, by kind.",
    ["kind"],
    registry=REGISTRY,
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
UPSTREAM_DISCOVERY_SUCCESS = Gauge(
    "prescaler_upstream_discovery_last_success_timestamp_seconds",
    "Unix time of the last successful refresh of the upstream's metric names.",
    registry=REGISTRY,
)
UPSTREAM_METRICS = Gauge(
    "prescaler_upstream_metrics",
    "Metric names the upstream lists in its discovery (cached).",
    registry=REGISTRY,
)
UPSTREAM_SHADOWED = Gauge(
    "prescaler_upstream_shadowed_metrics",
    "Metric names defined by both prescaler and the upstream (prescaler's win).",
    registry=REGISTRY,
)
