"""The few Kubernetes API calls delegated auth needs, behind a small interface.

Tests pass their own implementation (or point :class:`KubernetesAuthAPI` at a fake HTTPS server via
a ``kubernetes.client.Configuration`` with host + CA).  All methods are blocking; callers run them
in threads (``asyncio.to_thread``) so the event loop never waits on the network.
"""

from __future__ import annotations

import json
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
        from kubernetes import client

        self._api_client = api_client
        self._core = client.CoreV1Api(api_client)
        self._authn = client.AuthenticationV1Api(api_client)
        self._authz = client.AuthorizationV1Api(api_client)

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

        try:
            cm = self._core.read_namespaced_config_map(name, namespace, _request_timeout=REVIEW_TIMEOUT_SECONDS)
        except ApiException as exc:
            if exc.status == 404:
                return None, ""
            raise self._wrap(exc, f"reading ConfigMap {namespace}/{name}") from None
        except Exception as exc:  # noqa: BLE001 - urllib3/socket errors of every kind
            raise self._wrap(exc, f"reading ConfigMap {namespace}/{name}") from None
        return dict(cm.data or {}), (cm.metadata.resource_version if cm.metadata else "") or ""

    def watch_configmap(
        self, namespace: str, name: str, resource_version: str, timeout_seconds: int
    ) -> Iterator[tuple[str, dict[str, str] | None, str]]:
        from kubernetes import watch

        stream = watch.Watch().stream(
            self._core.list_namespaced_config_map,
            namespace,
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
                data = None if kind == "DELETED" else dict(getattr(obj, "data", None) or {})
                rv = getattr(getattr(obj, "metadata", None), "resource_version", "") or ""
                yield kind, data, rv
        except KubeAPIError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise self._wrap(exc, f"watching ConfigMap {namespace}/{name}") from None

    def _post_raw(self, call: Any, body: dict[str, Any], what: str) -> dict[str, Any]:
        try:
            response = call(body=body, _preload_content=False, _request_timeout=REVIEW_TIMEOUT_SECONDS)
            return json.loads(response.data)
        except Exception as exc:  # noqa: BLE001 - ApiException, urllib3, JSON errors alike
            raise self._wrap(exc, what) from None

    def create_token_review(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._post_raw(self._authn.create_token_review, body, "TokenReview")

    def create_subject_access_review(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._post_raw(self._authz.create_subject_access_review, body, "SubjectAccessReview")
