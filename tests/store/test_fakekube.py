"""The fake API server itself, driven through the official kubernetes client (real TLS, real JSON)."""

from __future__ import annotations

import threading

import pytest
from kubernetes import client, config, watch

from tests.fakekube import FakeKube

G, V = "prescaler.pingpong.ai", "v1"


def vm(name: str, default: float = 0) -> dict:
    return {
        "apiVersion": f"{G}/{V}",
        "kind": "VirtualMetric",
        "metadata": {"name": name},
        "spec": {"defaultValue": default},
    }


def custom(fake: FakeKube, token: str | None = None) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(fake.api_client(token))


def test_list_get_and_metadata_bookkeeping(fake):
    created = fake.apply(vm("rps"))
    assert created["metadata"]["generation"] == 1 and created["metadata"]["uid"]
    updated = fake.apply(vm("rps", default=5))
    assert updated["metadata"]["generation"] == 2
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert updated["metadata"]["uid"] == created["metadata"]["uid"]
    same = fake.apply(vm("rps", default=5))  # no-op: nothing changes
    assert same["metadata"]["resourceVersion"] == updated["metadata"]["resourceVersion"]

    listed = custom(fake).list_cluster_custom_object(G, V, "virtualmetrics")
    assert listed["kind"] == "VirtualMetricList"
    assert listed["metadata"]["resourceVersion"] == str(fake.resource_version)
    assert [i["spec"]["defaultValue"] for i in listed["items"]] == [5]
    one = custom(fake).get_cluster_custom_object(G, V, "virtualmetrics", "rps")
    assert one["metadata"]["name"] == "rps"
    with pytest.raises(client.ApiException) as err:
        custom(fake).get_cluster_custom_object(G, V, "virtualmetrics", "missing")
    assert err.value.status == 404


def test_bearer_token_required(fake):
    with pytest.raises(client.ApiException) as err:
        custom(fake, token="wrong").list_cluster_custom_object(G, V, "virtualmetrics")
    assert err.value.status == 401
    assert '"Unauthorized"' in err.value.body


def test_kubeconfig_file_works_with_load_kube_config(fake, tmp_path):
    fake.apply(vm("rps"))
    path = fake.write_kubeconfig(tmp_path / "kubeconfig")
    api_client = config.new_client_from_config(config_file=str(path))
    items = client.CustomObjectsApi(api_client).list_cluster_custom_object(G, V, "virtualmetrics")["items"]
    assert [i["metadata"]["name"] for i in items] == ["rps"]


def test_status_subresource_patch_and_put(fake):
    fake.apply(vm("rps"))
    api = custom(fake)
    patched = api.patch_cluster_custom_object_status(
        G, V, "virtualmetrics", "rps", {"status": {"observedGeneration": 1, "targets": []}}
    )
    assert patched["status"] == {"observedGeneration": 1, "targets": []}
    assert patched["metadata"]["generation"] == 1  # status writes never bump generation
    assert fake.requests_matching("PATCH", "/status$")[-1].headers["content-type"] == "application/merge-patch+json"
    # spec in a status write is ignored, status in a main-resource write is ignored
    api.patch_cluster_custom_object_status(G, V, "virtualmetrics", "rps", {"spec": {"defaultValue": 9}})
    assert fake.get("VirtualMetric", "rps")["spec"] == {"defaultValue": 0}
    fake.apply({**vm("rps"), "status": {"bogus": True}})
    assert fake.get("VirtualMetric", "rps")["status"] == {"observedGeneration": 1, "targets": []}
    # PUT with a stale resourceVersion is a conflict
    current = fake.get("VirtualMetric", "rps")
    stale = {**current, "metadata": {**current["metadata"], "resourceVersion": "1"}, "status": {}}
    with pytest.raises(client.ApiException) as err:
        api.replace_cluster_custom_object_status(G, V, "virtualmetrics", "rps", stale)
    assert err.value.status == 409
    ok = api.replace_cluster_custom_object_status(G, V, "virtualmetrics", "rps", {**current, "status": {"x": 1}})
    assert ok["status"] == {"x": 1}


def _collect(fake: FakeKube, events: list, **kwargs) -> threading.Thread:
    def run() -> None:
        w = watch.Watch()
        try:
            for ev in w.stream(
                custom(fake).list_cluster_custom_object, G, V, "virtualmetrics", timeout_seconds=10, **kwargs
            ):
                events.append((ev["type"], ev["raw_object"]))
        except client.ApiException as exc:
            events.append(("EXC", exc.status))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_watch_events_bookmarks_and_clean_drop(fake):
    fake.apply(vm("a"))
    rv = fake.resource_version
    events: list = []
    thread = _collect(fake, events, resource_version=str(rv), allow_watch_bookmarks=True)
    fake.wait_for(lambda: fake.watch_count("virtualmetrics") == 1)
    fake.apply(vm("a", 1))
    fake.apply(vm("b"))
    fake.delete("VirtualMetric", "a")
    assert fake.send_bookmark() == 1
    fake.wait_for(lambda: len(events) == 4)
    assert [t for t, _ in events] == ["MODIFIED", "ADDED", "DELETED", "BOOKMARK"]
    assert events[-1][1]["metadata"]["resourceVersion"] == str(fake.resource_version)
    assert fake.drop_watches() == 1
    thread.join(5)
    assert not thread.is_alive()


def test_watch_replays_history_since_resource_version(fake):
    fake.apply(vm("a"))
    rv = fake.resource_version
    fake.apply(vm("b"))
    fake.delete("VirtualMetric", "a")
    events: list = []
    _collect(fake, events, resource_version=str(rv))
    fake.wait_for(lambda: len(events) == 2)
    assert [(t, o["metadata"]["name"]) for t, o in events] == [("ADDED", "b"), ("DELETED", "a")]
    fake.drop_watches()


def test_watch_after_compaction_is_gone(fake):
    fake.apply(vm("a"))
    old = fake.resource_version
    fake.apply(vm("a", 2))
    fake.compact()
    events: list = []
    _collect(fake, events, resource_version=str(old)).join(5)
    assert events == [("EXC", 410)]

    fake.gone_on_start = "http"
    with pytest.raises(client.ApiException) as err:
        custom(fake).list_cluster_custom_object(
            G, V, "virtualmetrics", watch=True, resource_version=str(old), _preload_content=False
        )
    assert err.value.status == 410


def test_expire_watches_sends_410_error_event(fake):
    events: list = []
    thread = _collect(fake, events, resource_version=str(fake.resource_version))
    fake.wait_for(lambda: fake.watch_count() == 1)
    fake.compact()
    fake.expire_watches()
    thread.join(5)
    assert events[-1] == ("EXC", 410)


def test_injected_errors_and_request_recording(fake):
    fake.inject_error("GET", "/virtualmetrics$", code=500, times=1)
    with pytest.raises(client.ApiException) as err:
        custom(fake).list_cluster_custom_object(G, V, "virtualmetrics")
    assert err.value.status == 500
    assert custom(fake).list_cluster_custom_object(G, V, "virtualmetrics")["items"] == []
    recorded = fake.requests_matching("GET", "/virtualmetrics$")
    assert len(recorded) == 2 and recorded[0].headers["authorization"] == f"Bearer {fake.token}"


def test_token_review_and_subject_access_review(fake):
    fake.tokens["good"] = {"username": "system:serviceaccount:kube-system:hpa", "groups": ["system:authenticated"]}
    fake.sar_policy = lambda spec: (spec.get("user") == "alice", "fake policy")
    auth = client.AuthenticationV1Api(fake.api_client())
    good = auth.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token="good")))
    assert good.status.authenticated and good.status.user.username.endswith(":hpa")
    bad = auth.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token="nope")))
    assert not bad.status.authenticated
    assert [r["spec"]["token"] for r in fake.token_reviews] == ["good", "nope"]

    authz = client.AuthorizationV1Api(fake.api_client())
    attrs = client.V1ResourceAttributes(verb="list", group="external.metrics.k8s.io", resource="rps")
    allowed = authz.create_subject_access_review(
        client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(user="alice", resource_attributes=attrs))
    )
    denied = authz.create_subject_access_review(
        client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(user="bob", resource_attributes=attrs))
    )
    assert allowed.status.allowed and not denied.status.allowed and denied.status.denied
    assert fake.subject_access_reviews[0]["spec"]["resourceAttributes"]["resource"] == "rps"


def test_auth_configmap_get_list_and_watch(fake):
    fake.set_auth_configmap({"requestheader-allowed-names": '["front-proxy-client"]'})
    core = client.CoreV1Api(fake.api_client())
    cm = core.read_namespaced_config_map("extension-apiserver-authentication", "kube-system")
    assert cm.data["requestheader-allowed-names"] == '["front-proxy-client"]'
    listed = core.list_namespaced_config_map(
        "kube-system", field_selector="metadata.name=extension-apiserver-authentication"
    )
    assert len(listed.items) == 1
    events: list = []

    def run() -> None:
        for ev in watch.Watch().stream(
            core.list_namespaced_config_map,
            "kube-system",
            field_selector="metadata.name=extension-apiserver-authentication",
            resource_version=listed.metadata.resource_version,
            timeout_seconds=10,
        ):
            events.append(ev["object"].data)

    threading.Thread(target=run, daemon=True).start()
    fake.wait_for(lambda: fake.watch_count("configmaps") == 1)
    fake.set_auth_configmap({"client-ca-file": "PEM"})
    fake.wait_for(lambda: events == [{"client-ca-file": "PEM"}])
    fake.drop_watches()


def test_leases_create_and_optimistic_replace(fake):
    coord = client.CoordinationV1Api(fake.api_client())
    lease = coord.create_namespaced_lease(
        "default",
        client.V1Lease(metadata=client.V1ObjectMeta(name="prescaler"), spec=client.V1LeaseSpec(holder_identity="a")),
    )
    lease.spec.holder_identity = "b"
    replaced = coord.replace_namespaced_lease("prescaler", "default", lease)
    assert replaced.spec.holder_identity == "b"
    lease.spec.holder_identity = "c"  # still carries the old resourceVersion
    with pytest.raises(client.ApiException) as err:
        coord.replace_namespaced_lease("prescaler", "default", lease)
    assert err.value.status == 409
