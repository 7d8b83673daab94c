"""Exact JSON bodies of external.metrics.k8s.io/v1beta1, as bytes.

Field order follows the Go types' serialisation so responses read like a real aggregated API
server's. Everything here is pure: no I/O, no framework.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import Any

from adapter.pipeline.query import TargetValue
from adapter.quantity import format_milli
from adapter.timefmt import rfc3339

GROUP = "external.metrics.k8s.io"
VERSION = "v1beta1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
PLACEHOLDER_RESOURCE = "externalmetrics"

_VERSION_ENTRY = {"groupVersion": GROUP_VERSION, "version": VERSION}


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def api_group_list() -> bytes:
    return dumps({"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group_body()]})


def api_group() -> bytes:
    return dumps({"kind": "APIGroup", "apiVersion": "v1", **_group_body()})


def _group_body() -> dict[str, Any]:
    return {"name": GROUP, "versions": [dict(_VERSION_ENTRY)], "preferredVersion": dict(_VERSION_ENTRY)}


def api_resource_list(metric_names: Iterable[str]) -> bytes:
    # Never an empty list: client-go discovery reports "Got empty response" to kubectl/helm.
    names = sorted(set(metric_names)) or [PLACEHOLDER_RESOURCE]
    resources = [
        {"name": n, "singularName": "", "namespaced": True, "kind": "ExternalMetricValueList", "verbs": ["get"]}
        for n in names
    ]
    return dumps({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION, "resources": resources})


def timestamp(now: float) -> str:
    """metav1.Time: RFC3339, UTC, whole seconds."""
    return _timestamp(int(now))


@functools.lru_cache(maxsize=8)
def _timestamp(second: int) -> str:
    return rfc3339(second)


def external_metric_value_list(metric: str, values: Iterable[TargetValue], now: float) -> bytes:
    stamp = timestamp(now)
    items = [
        {"metricName": metric, "metricLabels": dict(v.labels), "timestamp": stamp, "value": format_milli(v.value)}
        for v in values
    ]
    return dumps({"kind": "ExternalMetricValueList", "apiVersion": GROUP_VERSION, "metadata": {}, "items": items})


def status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return dumps(body)


def not_found_resource() -> bytes:
    return status(404, "NotFound", "the server could not find the requested resource", {})


def method_not_allowed(method: str) -> bytes:
    return status(
        405, "MethodNotAllowed", f"the server does not allow this method on the requested resource ({method})", {}
    )
