"""Authorization through the real aggregator: kube-apiserver authenticates the caller, authorizes it with
RBAC, and forwards its identity (X-Remote-User/Group over the front-proxy client certificate) to
prescaler, which checks it again with a SubjectAccessReview."""

from __future__ import annotations

import json
import ssl

import httpx

from tests.e2e.controlplane import ControlPlane
from tests.e2e.support import V1, raw, served, wait_for

HPA_CONTROLLER = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
VALUES = f"{V1}/namespaces/service-a/rps?labelSelector=resource%3Dservice-a"


def test_hpa_controller_identity_gets_values(plane: ControlPlane, seed: dict[str, str]) -> None:
    wait_for(lambda: served(plane, "service-a", "service-a") == ["100"], 30, "values")
    result = raw(
        plane,
        VALUES,
        as_user=HPA_CONTROLLER,
        as_groups=["system:serviceaccounts", "system:serviceaccounts:kube-system"],
    )
    assert result.returncode == 0, result.stderr
    assert [i["value"] for i in json.loads(result.stdout)["items"]] == ["100"]


def test_user_without_rbac_gets_403(plane: ControlPlane, seed: dict[str, str]) -> None:
    result = plane.kubectl("get", "--raw", VALUES, "-v=6", as_user="mallory", check=False)  # -v=6: status codes
    assert result.returncode != 0
    assert "403 Forbidden" in result.stderr, result.stderr
    assert 'User "mallory" cannot list resource "rps" in API group "external.metrics.k8s.io"' in result.stderr


def test_system_masters_gets_values(plane: ControlPlane, seed: dict[str, str]) -> None:
    wait_for(lambda: served(plane, "service-a", "service-a") == ["100"], 30, "values")
    # The admin kubeconfig's client certificate carries O=system:masters; impersonating the group too.
    result = raw(plane, VALUES, as_user="some-admin", as_groups=["system:masters"])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["items"][0]["value"] == "100"


def test_discovery_for_authenticated_users(plane: ControlPlane, seed: dict[str, str]) -> None:
    # Impersonated users get system:authenticated, which the built-in system:discovery role allows.
    result = raw(plane, V1, as_user="mallory")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["kind"] == "APIResourceList" and doc["groupVersion"] == "external.metrics.k8s.io/v1beta1"
    assert "rps" in {r["name"] for r in doc["resources"]}
    group = raw(plane, "/apis/external.metrics.k8s.io", as_user="mallory")
    assert group.returncode == 0, group.stderr


def test_anonymous_is_rejected(plane: ControlPlane, seed: dict[str, str]) -> None:
    # kubectl always sends credentials (or prompts for them); a bare HTTPS client is anonymous.
    context = ssl.create_default_context(cafile=plane.pki.path("ca.crt"))
    response = httpx.get(f"{plane.server}{VALUES}", verify=context, timeout=10)
    assert response.status_code == 403, response.text
    assert response.json()["message"].startswith('rps.external.metrics.k8s.io is forbidden: User "system:anonymous"'), (
        response.text
    )
