"""The few Kubernetes API calls delegated auth needs, behind a small interface.

Tests pass their own implementation (or point :class:`KubernetesAuthAPI` at a fake HTTPS server via
a ``kubernetes.client.Configuration`` with host + CA).  All methods are blocking; callers run them
in threads (``asyncio.to_thread``) so the event loop never waits on the network.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol


class KubeAPIError(Exception):
    """The Kubernetes API could not be reached or answered with an error."""


class KubeAuthAPI(Protocol):
    def get_configmap(self, namespace: str, name: str) -> tuple[dict[str, str] | None, str]:
        """(data, resourceVersion); data None when the ConfigMap does not exist. Raises KubeAPIError."""

    def watch_configmap(
        self, namespace: str, name: str, resource_version: str, timeout_seconds: int
    ) -> Iterator[tuple[str, dict[str, str] | None, str]]:
        """Yield (event type, data, resourceVersion) until the watch times out. Raises KubeAPIError."""

    def create_token_review(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST authentication.k8s.io/v1 tokenreviews; returns the response object as a dict."""

    def create_subject_access_review(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST authorization.k8s.io/v1 subjectaccessreviews; returns the response object."""


REVIEW_TIMEOUT_SECONDS = 10  # AS delegating defaults: TokenReview and SAR client timeout 10 s


class KubernetesAuthAPI:
    """KubeAuthAPI over the official ``kubernetes`` client."""

    def __init__(self, api_client: Any) -> None:
        # Plain JSON requests through the client's ApiClient, not the generated API classes: CoreV1Api
        # alone took 0.6 s to import, before the server could listen (adapter.store.kube_json).
        self._api_client = api_client

    @classmethod
    def from_kubeconfig(cls, path: str | None) -> KubernetesAuthAPI:
        """``path`` None -> in-cluster service account configuration."""
        from kubernetes import client, config

        try:
            if path:
                api_client = config.new_client_from_config(config_file=path)
            else:
                configuration = client.Configuration()
                config.load_incluster_config(client_configuration=configuration)
                api_client = client.ApiClient(configuration)
        except (config.ConfigException, OSError, ValueError, TypeError) as exc:
            where = path or "in-cluster service account"
            raise KubeAPIError(f"cannot load Kubernetes client configuration from {where}: {exc}") from None
        return cls(api_client)

    @classmethod
    def from_configuration(cls, configuration: Any) -> KubernetesAuthAPI:
        from kubernetes import client

        return cls(client.ApiClient(configuration))

    @staticmethod
    def _wrap(exc: Exception, what: str) -> KubeAPIError:
        status = getattr(exc, "status", None)
        reason = getattr(exc, "reason", None) or str(exc)
        return KubeAPIError(f"{what} failed: {status or ''} {reason}".strip())

    def get_configmap(self, namespace: str, name: str) -> tuple[dict[str, str] | None, str]:
        from kubernetes.client.exceptions import ApiException

        from adapter.store.kube_json import read_config_map

        try:
            cm = read_config_map(self._api_client, namespace, name, timeout=REVIEW_TIMEOUT_SECONDS)
        except ApiException as exc:
            if exc.status == 404:
                return None, ""
            raise self._wrap(exc, f"reading ConfigMap {namespace}/{name}") from None
        except Exception as exc:  # noqa: BLE001 - urllib3/socket errors of every kind
            raise self._wrap(exc, f"reading ConfigMap {namespace}/{name}") from None
        return _string_map(cm.get("data")), str((cm.get("metadata") or {}).get("resourceVersion") or "")

    def watch_configmap(
        self, namespace: str, name: str, resource_version: str, timeout_seconds: int
    ) -> Iterator[tuple[str, dict[str, str] | None, str]]:
        from kubernetes import watch

        from adapter.store.kube_json import config_map_lister

        stream = watch.Watch().stream(
            config_map_lister(self._api_client, namespace),
            field_selector=f"metadata.name={name}",
            resource_version=resource_version or None,
            timeout_seconds=timeout_seconds,
            _request_timeout=timeout_seconds + 10,
        )
        try:
            for event in stream:
                obj = event.get("object")
                kind = event.get("type", "")
                if kind == "ERROR":
                    raise KubeAPIError(f"watch of ConfigMap {namespace}/{name} failed: {event.get('raw_object')}")
                obj = obj if isinstance(obj, dict) else {}
                data = None if kind == "DELETED" else _string_map(obj.get("data"))
                yield kind, data, str((obj.get("metadata") or {}).get("resourceVersion") or "")
        except KubeAPIError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise self._wrap(exc, f"watching ConfigMap {namespace}/{name}") from None

    def _post_raw(self, path: str, body: dict[str, Any], what: str) -> dict[str, Any]:
        from adapter.store.kube_json import request_json

        try:
            return request_json(self._api_client, "POST", path, body=body, timeout=REVIEW_TIMEOUT_SECONDS)
        except Exception as exc:  # noqa: BLE001 - ApiException, urllib3, JSON errors alike
            raise self._wrap(exc, what) from None

    def create_token_review(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._post_raw("/apis/authentication.k8s.io/v1/tokenreviews", body, "TokenReview")

    def create_subject_access_review(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._post_raw("/apis/authorization.k8s.io/v1/subjectaccessreviews", body, "SubjectAccessReview")


def _string_map(data: Any) -> dict[str, str]:
    """A ConfigMap's data as strings (a malformed answer gives what can be read)."""
    if not isinstance(data, dict):
        return {}
    return {str(key): value for key, value in data.items() if isinstance(value, str)}
