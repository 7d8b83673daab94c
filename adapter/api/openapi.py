"""Minimal, valid OpenAPI documents for the aggregator.

kube-aggregator downloads /openapi/v2 every minute and logs an error per minute when it is missing
or invalid; /openapi/v3 is a discovery document pointing at the per-group-version spec.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from adapter import __version__

GV = "external.metrics.k8s.io/v1beta1"
_VALUE_PATH = "/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/{metric}"


def _schemas(ref_prefix: str) -> dict[str, Any]:
    return {
        "io.k8s.metrics.pkg.apis.external_metrics.v1beta1.ExternalMetricValue": {
            "type": "object",
            "description": "One value of an external metric for one target.",
            "required": ["metricName", "metricLabels", "timestamp", "value"],
            "properties": {
                "metricName": {"type": "string"},
                "metricLabels": {"type": "object", "additionalProperties": {"type": "string"}},
                "timestamp": {"type": "string", "format": "date-time"},
                "window": {"type": "integer", "format": "int64"},
                "value": {"type": "string", "description": "a Kubernetes quantity"},
            },
        },
        "io.k8s.metrics.pkg.apis.external_metrics.v1beta1.ExternalMetricValueList": {
            "type": "object",
            "required": ["items"],
            "properties": {
                "kind": {"type": "string"},
                "apiVersion": {"type": "string"},
                "metadata": {"type": "object"},
                "items": {
                    "type": "array",
                    "items": {
                        "$ref": f"{ref_prefix}io.k8s.metrics.pkg.apis.external_metrics.v1beta1.ExternalMetricValue"
                    },
                },
            },
            "x-kubernetes-group-version-kind": [
                {"group": "external.metrics.k8s.io", "version": "v1beta1", "kind": "ExternalMetricValueList"}
            ],
        },
    }


def _parameters() -> list[dict[str, Any]]:
    return [
        {"name": "namespace", "in": "path", "required": True, "type": "string"},
        {"name": "metric", "in": "path", "required": True, "type": "string"},
        {
            "name": "labelSelector",
            "in": "query",
            "required": False,
            "type": "string",
            "uniqueItems": True,
            "description": "A selector over metricLabels, e.g. resource=service-a.",
        },
    ]


@functools.lru_cache(maxsize=1)
def v2_bytes() -> bytes:
    doc = {
        "swagger": "2.0",
        "info": {"title": "prescaler external metrics", "version": __version__},
        "paths": {
            _VALUE_PATH: {
                "get": {
                    "operationId": "listExternalMetricValue",
                    "produces": ["application/json"],
                    "schemes": ["https"],
                    "parameters": _parameters(),
                    "responses": {
                        "200": {
                            "description": "OK",
                            "schema": {
                                "$ref": "#/definitions/io.k8s.metrics.pkg.apis.external_metrics.v1beta1.ExternalMetricValueList"
                            },
                        },
                        "401": {"description": "Unauthorized"},
                    },
                    "x-kubernetes-action": "list",
                    "x-kubernetes-group-version-kind": {
                        "group": "external.metrics.k8s.io",
                        "version": "v1beta1",
                        "kind": "ExternalMetricValueList",
                    },
                }
            }
        },
        "definitions": _schemas("#/definitions/"),
    }
    return json.dumps(doc, separators=(",", ":")).encode()


@functools.lru_cache(maxsize=1)
def v3_bytes() -> bytes:
    params = []
    for p in _parameters():
        params.append(
            {
                "name": p["name"],
                "in": p["in"],
                "required": p["required"],
                "schema": {"type": "string"},
                **({"description": p["description"]} if "description" in p else {}),
            }
        )
    doc = {
        "openapi": "3.0.0",
        "info": {"title": "prescaler external metrics", "version": __version__},
        "paths": {
            _VALUE_PATH: {
                "get": {
                    "operationId": "listExternalMetricValue",
                    "parameters": params,
                    "responses": {
                        "200": {
                            "description": "OK",
                            "content": {
                                "application/json": {
                                    "schema": {
                                        "$ref": "#/components/schemas/io.k8s.metrics.pkg.apis.external_metrics.v1beta1.ExternalMetricValueList"
                                    }
                                }
                            },
                        }
                    },
                }
            }
        },
        "components": {"schemas": _schemas("#/components/schemas/")},
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def v3_root() -> dict[str, Any]:
    digest = hashlib.sha512(v3_bytes()).hexdigest()[:32].upper()
    return {
        "paths": {
            "apis/external.metrics.k8s.io/v1beta1": {
                "serverRelativeURL": f"/openapi/v3/apis/external.metrics.k8s.io/v1beta1?hash={digest}"
            }
        }
    }
