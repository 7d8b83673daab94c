"""adapter.store.kube_json against the fake API server: each call, its errors, and that cluster mode
never imports the generated CoreV1Api (0.6 s of every start)."""

from __future__ import annotations

import base64
import subprocess
import sys
from collections.abc import Iterator

import pytest
from kubernetes.client.exceptions import ApiException

from adapter.store import kube_json
from tests.fakekube import FakeKube, ResourceType

SECRETS = ResourceType("", "v1", "secrets", "Secret", True, has_generation=False)
PODS = ResourceType("", "v1", "pods", "Pod", True, status_subresource=True, has_generation=False)


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with FakeKube() as server:
        server.register_type(SECRETS)
        server.register_type(PODS)
        yield server


def test_a_secret_key_is_read_and_decoded(fake: FakeKube) -> None:
    token = base64.b64encode(b"s3cr\xc3\xa9t").decode()
    fake.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "api", "namespace": "shop"},
            "data": {"token": token},
        }
    )
    resolve = kube_json.secret_resolver(fake.api_client())
    assert resolve("shop", "api", "token") == "s3crét"
    with pytest.raises(LookupError, match="secret shop/api has no key 'password'"):
        resolve("shop", "api", "password")
    with pytest.raises(ApiException) as missing:
        resolve("shop", "nope", "token")
    assert missing.value.status == 404


def test_pods_are_listed_by_label_selector(fake: FakeKube) -> None:
    for name, app in (("web-1", "web"), ("web-2", "web"), ("db-1", "db")):
        fake.apply(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "shop", "labels": {"app": app}},
                "spec": {},
            }
        )
    listed = kube_json.list_pods(fake.api_client(), "shop", "app=web", timeout=5)
    assert sorted(p["metadata"]["name"] for p in listed["items"]) == ["web-1", "web-2"]
    assert [r.query.get("labelSelector") for r in fake.requests_matching("GET", "/pods$")] == ["app=web"]


def test_an_event_is_created_with_the_body_given(fake: FakeKube) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "x.1", "namespace": "prescaler"},
        "reason": "Ready",
    }
    created = kube_json.create_event(fake.api_client(), "prescaler", body, timeout=5)
    assert created["metadata"]["name"] == "x.1"
    assert [e["reason"] for e in fake.list_objects("Event")] == ["Ready"]


def test_an_error_answer_raises_the_clients_api_exception(fake: FakeKube) -> None:
    fake.inject_error("GET", "/configmaps/", code=500, times=1)
    with pytest.raises(ApiException) as failed:
        kube_json.read_config_map(fake.api_client(), "kube-system", "extension-apiserver-authentication", timeout=5)
    assert failed.value.status == 500
    fake.set_auth_configmap({"requestheader-username-headers": '["X-Remote-User"]'})
    cm = kube_json.read_config_map(fake.api_client(), "kube-system", "extension-apiserver-authentication", timeout=5)
    assert cm["data"]["requestheader-username-headers"] == '["X-Remote-User"]'


CONSTRUCT_WHAT_CLUSTER_MODE_STARTS = """
import sys
from kubernetes import client
from adapter.auth.kubeapi import KubernetesAuthAPI
from adapter.store.events import EventRecorder
from adapter.store.hpa_bands import HpaBands
from adapter.store.hpp_kube import HPPStatusController
from adapter.store.kube import KubeStore
from adapter.store.kube_json import secret_resolver
from adapter.store.leadtime import AutoLeadTimes, hpa_reader
from adapter.store.lease import LeaseElector
from adapter.store.status import StatusWriter

api = client.ApiClient(client.Configuration(host="https://127.0.0.1:9"))  # never dialled
KubernetesAuthAPI(api)
secret_resolver(api)
AutoLeadTimes(api, hpa_for=hpa_reader(api))
HpaBands(api)
KubeStore(api, sink=None)
elector = LeaseElector(api, "prescaler")
StatusWriter(api, dict, elector=elector, events=EventRecorder(api))
HPPStatusController(api, is_leader=lambda: False)
print([m for m in sys.modules if m.endswith(("core_v1_api", "apps_v1_api"))])
"""


def test_cluster_mode_does_not_import_the_generated_core_api() -> None:
    # What _start_kube and the delegated auth build, built (not started) in a fresh interpreter.
    run = subprocess.run([sys.executable, "-c", CONSTRUCT_WHAT_CLUSTER_MODE_STARTS], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"
