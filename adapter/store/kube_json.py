"""Requests to the core/v1 and apps/v1 endpoints prescaler uses, as plain JSON, through the official
client's `ApiClient`.

Why not the generated `CoreV1Api`: in kubernetes 37 it is a 63 000-line module of pydantic-validated
methods, and importing it took 0.6 s of every cluster-mode start (`python -c "from kubernetes import
client; client.CoreV1Api"`), before a single object could be listed. Its model classes would also
parse every field of answers of which prescaler reads two or three. The `ApiClient` still does what
matters: the kubeconfig or in-cluster configuration, TLS, the bearer token (and its refresh), the
connection pool, and the same `ApiException` on an answer that is not 2xx.

Only the calls prescaler makes are here: reading a Secret, a ConfigMap (and watching it), a
Deployment, listing Pods and HorizontalPodAutoscalers, creating an Event. Each returns the object as a dict.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from kubernetes.client.exceptions import ApiException


def _path(template: str, **names: str) -> str:
    # Names and namespaces are DNS labels, but quote them anyway: a path never carries a stray "/".
    return template.format(**{key: quote(value, safe="") for key, value in names.items()})


def _send(
    api_client: Any,
    method: str,
    path: str,
    query: Sequence[tuple[str, Any]] = (),
    body: Mapping[str, Any] | None = None,
    timeout: Any = None,
) -> Any:
    """The request, authenticated as the client's configuration says; the raw response (not read)."""
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    request = api_client.param_serialize(
        method=method,
        resource_path=path,
        query_params=[(key, value) for key, value in query if value is not None],
        header_params=headers,
        body=dict(body) if body is not None else None,
        auth_settings=["BearerToken"],
    )
    response = api_client.call_api(*request, _request_timeout=timeout)
    if not 200 <= response.status <= 299:
        response.read()
        raise ApiException.from_response(http_resp=response, body=None, data=None)
    return response


def request_json(
    api_client: Any,
    method: str,
    path: str,
    query: Sequence[tuple[str, Any]] = (),
    body: Mapping[str, Any] | None = None,
    timeout: Any = None,
) -> dict[str, Any]:
    """The answer's JSON object; ApiException for an answer that is not 2xx."""
    data = json.loads(_send(api_client, method, path, query, body, timeout).read() or b"{}")
    if not isinstance(data, dict):
        raise ApiException(status=0, reason=f"{method} {path}: the answer is not a JSON object")
    return data


def read_secret(api_client: Any, namespace: str, name: str, timeout: float) -> dict[str, Any]:
    return request_json(
        api_client, "GET", _path("/api/v1/namespaces/{ns}/secrets/{name}", ns=namespace, name=name), timeout=timeout
    )


def read_config_map(api_client: Any, namespace: str, name: str, timeout: float) -> dict[str, Any]:
    path = _path("/api/v1/namespaces/{ns}/configmaps/{name}", ns=namespace, name=name)
    return request_json(api_client, "GET", path, timeout=timeout)


def config_map_lister(api_client: Any, namespace: str) -> Callable[..., Any]:
    """A list call for `kubernetes.watch.Watch().stream`, which adds ``watch=True`` and
    ``_preload_content=False`` and reads the stream it returns. It has no return annotation, so the
    watch hands each event's object over as the parsed dict."""
    path = _path("/api/v1/namespaces/{ns}/configmaps", ns=namespace)

    def list_config_maps(  # type: ignore[no-untyped-def]  # no annotation: see above
        field_selector: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int | None = None,
        watch: bool = False,
        _preload_content: bool = True,
        _request_timeout: Any = None,
    ):
        query = [
            ("fieldSelector", field_selector),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", timeout_seconds),
            ("watch", "true" if watch else None),
        ]
        response = _send(api_client, "GET", path, query, timeout=_request_timeout)
        return response.response if not _preload_content else json.loads(response.read() or b"{}")

    return list_config_maps


def read_deployment(api_client: Any, namespace: str, name: str, timeout: float | None = None) -> dict[str, Any]:
    path = _path("/apis/apps/v1/namespaces/{ns}/deployments/{name}", ns=namespace, name=name)
    return request_json(api_client, "GET", path, timeout=timeout)


def list_pods(api_client: Any, namespace: str, label_selector: str, timeout: float | None = None) -> dict[str, Any]:
    path = _path("/api/v1/namespaces/{ns}/pods", ns=namespace)
    return request_json(api_client, "GET", path, [("labelSelector", label_selector)], timeout=timeout)


def list_hpas(api_client: Any, namespace: str, timeout: float | None = None) -> dict[str, Any]:
    path = _path("/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers", ns=namespace)
    return request_json(api_client, "GET", path, timeout=timeout)


def create_event(api_client: Any, namespace: str, body: Mapping[str, Any], timeout: float) -> dict[str, Any]:
    path = _path("/api/v1/namespaces/{ns}/events", ns=namespace)
    return request_json(api_client, "POST", path, body=body, timeout=timeout)


def secret_resolver(api_client: Any, timeout: float = 10.0) -> Callable[[str, str, str], str]:
    """`(namespace, name, key) -> value` of a Secret's key, for sources' credentials; LookupError for
    a missing key, ApiException for a Secret that cannot be read."""
    import base64

    def resolve(namespace: str, name: str, key: str) -> str:
        data = (read_secret(api_client, namespace, name, timeout).get("data") or {}).get(key)
        if data is None:
            raise LookupError(f"secret {namespace}/{name} has no key {key!r}")
        return base64.b64decode(data).decode()

    return resolve
