"""The HTTP API per docs/api.md §1–4 and the §10 checklist (items that need no cluster)."""

from __future__ import annotations

import json
import re

import pytest

from tests.helpers import NOW, client, entry, loaded_engine, metric, run, schedule_event

V1 = "/apis/external.metrics.k8s.io/v1beta1"
SEED_ITEM = {"start": NOW, "end": NOW + 60, "values": {"scheduledMessage": 50}}


def seed_docs(**metric_spec):
    return [
        metric("rps", **metric_spec),
        schedule_event(
            "stage-vme",
            [SEED_ITEM],
            [
                entry("service-a", "service-a", "scheduledMessage * 2"),
                entry("service-b", "service-b", "scheduledMessage"),
            ],
            labels={"team": "chat"},
        ),
    ]


async def _get(docs, path, now=NOW, headers=None, method="GET"):
    engine = await loaded_engine(docs)
    engine.test_clock["now"] = now
    async with client(engine) as c:
        response = await c.request(method, path, headers=headers)
    await engine.stop()
    return response


def get(docs, path, **kw):
    return run(_get(docs, path, **kw))


def test_discovery_documents_exact() -> None:
    r = get(seed_docs(), "/apis")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.json() == {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {
                "name": "external.metrics.k8s.io",
                "versions": [{"groupVersion": "external.metrics.k8s.io/v1beta1", "version": "v1beta1"}],
                "preferredVersion": {"groupVersion": "external.metrics.k8s.io/v1beta1", "version": "v1beta1"},
            }
        ],
    }
    r = get(seed_docs(), "/apis/external.metrics.k8s.io")
    assert r.json()["kind"] == "APIGroup" and r.json()["name"] == "external.metrics.k8s.io"
    r = get(seed_docs(), V1)
    assert r.json() == {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "external.metrics.k8s.io/v1beta1",
        "resources": [
            {"name": "rps", "singularName": "", "namespaced": True, "kind": "ExternalMetricValueList", "verbs": ["get"]}
        ],
    }


def test_discovery_v2_accept_still_gets_legacy_json() -> None:
    accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    r = get(seed_docs(), "/apis", headers={"Accept": accept})
    assert r.status_code == 200 and r.json()["kind"] == "APIGroupList"


def test_resource_list_never_empty() -> None:
    r = get([], V1)
    assert [res["name"] for res in r.json()["resources"]] == ["externalmetrics"]


def test_every_metric_listed_sorted() -> None:
    r = get([metric("zeta"), metric("alpha"), metric("rps")], V1)
    assert [res["name"] for res in r.json()["resources"]] == ["alpha", "rps", "zeta"]


def test_value_list_shape_and_seed_values() -> None:
    r = get(seed_docs(), f"{V1}/namespaces/service-a/rps?labelSelector=resource%3Dservice-a", now=NOW + 10)
    assert r.status_code == 200
    body = r.json()
    assert list(body) == ["kind", "apiVersion", "metadata", "items"]
    assert body["kind"] == "ExternalMetricValueList" and body["apiVersion"] == "external.metrics.k8s.io/v1beta1"
    assert body["metadata"] == {}
    (item,) = body["items"]
    assert item == {
        "metricName": "rps",
        "metricLabels": {"resource": "service-a", "team": "chat"},
        "timestamp": "2023-11-21T05:50:10Z",
        "value": "100",
    }
    assert "window" not in item
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", item["timestamp"])
    r = get(seed_docs(), f"{V1}/namespaces/service-b/rps?labelSelector=resource%3Dservice-b", now=NOW + 10)
    assert r.json()["items"][0]["value"] == "50"


def test_default_value_outside_window_and_lead_time_moves_rise_earlier() -> None:
    path = f"{V1}/namespaces/service-a/rps?labelSelector=resource%3Dservice-a"
    assert get(seed_docs(defaultValue=3), path, now=NOW - 120).json()["items"][0]["value"] == "3"
    assert get(seed_docs(defaultValue=3), path, now=NOW + 60).json()["items"][0]["value"] == "3"
    assert get(seed_docs(leadTime="5m"), path, now=NOW - 300).json()["items"][0]["value"] == "100"
    assert get(seed_docs(leadTime="5m"), path, now=NOW - 301).json()["items"][0]["value"] == "0"


@pytest.mark.parametrize(
    "query, expected",
    [
        ("", ["service-a"]),
        ("?labelSelector=resource%3Dservice-a", ["service-a"]),
        ("?labelSelector=resource%3D%3Dservice-a", ["service-a"]),
        ("?labelSelector=resource+in+%28service-a%2Cservice-x%29", ["service-a", "service-x"]),
        ("?labelSelector=resource%21%3Dservice-a", []),
        ("?labelSelector=resource+notin+%28service-b%29", ["service-a"]),
        ("?labelSelector=team", ["service-a"]),
        ("?labelSelector=%21team", []),
        ("?labelSelector=team%3Dchat%2Cresource%3Dservice-a", ["service-a"]),
        ("?labelSelector=example.com%2Ftier%3Dgold", []),
    ],
)
def test_label_selector_filtering(query: str, expected: list[str]) -> None:
    r = get(seed_docs(), f"{V1}/namespaces/service-a/rps{query}", now=NOW + 1)
    assert r.status_code == 200
    assert [i["metricLabels"]["resource"] for i in r.json()["items"]] == expected


def test_selector_naming_unknown_resource_gets_default_item() -> None:
    r = get(seed_docs(defaultValue=7), f"{V1}/namespaces/other/rps?labelSelector=resource%3Dsvc-new")
    assert r.json()["items"] == [
        {
            "metricName": "rps",
            "metricLabels": {"resource": "svc-new"},
            "timestamp": "2023-11-21T05:50:00Z",
            "value": "7",
        }
    ]


@pytest.mark.parametrize(
    "selector", ["a+in+%28b", "%3Dx", "a%3D%3D%3Db", "a%3Db%3Dc", "a+notin", "%21%21a", "a%3Eb", "a+b"]
)
def test_malformed_selector_is_400_status(selector: str) -> None:
    r = get(seed_docs(), f"{V1}/namespaces/service-a/rps?labelSelector={selector}")
    assert r.status_code == 400
    body = r.json()
    assert list(body) == ["kind", "apiVersion", "metadata", "status", "message", "reason", "code"]
    assert body["reason"] == "BadRequest" and body["code"] == 400 and body["status"] == "Failure"
    assert body["message"]


def test_upstream_selector_error_message() -> None:
    r = get(seed_docs(), f"{V1}/namespaces/service-a/rps?labelSelector=a+in+%28b")
    assert r.json()["message"] == "unable to parse requirement: found '', expected: ',' or ')'"


def test_unknown_metric_404_status() -> None:
    r = get(seed_docs(), f"{V1}/namespaces/default/queue_depth")
    assert r.status_code == 404
    assert r.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server could not find the metric queue_depth for namespaces",
        "reason": "NotFound",
        "code": 404,
    }


@pytest.mark.parametrize(
    "path",
    [
        f"{V1}/rps",
        f"{V1}/namespaces/service-a",
        f"{V1}/namespaces/a/rps/extra",
        f"{V1}/namespaces//rps",
        f"{V1}/pods/x/y",
    ],
)
def test_non_namespaced_and_extra_paths_404_status(path: str) -> None:
    r = get(seed_docs(), path)
    assert r.status_code == 404
    assert r.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server could not find the requested resource",
        "reason": "NotFound",
        "details": {},
        "code": 404,
    }


def test_paths_outside_the_group_are_plain_404() -> None:
    for path in ("/apis/apps/v1", "/api/v1/pods", "/nothing"):
        r = get(seed_docs(), path)
        assert r.status_code == 404 and r.text == "404 page not found\n"


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_non_get_is_405_status(method: str) -> None:
    r = get(seed_docs(), f"{V1}/namespaces/service-a/rps", method=method)
    assert r.status_code == 405
    assert r.json()["reason"] == "MethodNotAllowed" and r.json()["code"] == 405


def test_protobuf_accept_gets_json() -> None:
    r = get(
        seed_docs(),
        f"{V1}/namespaces/service-a/rps?labelSelector=resource%3Dservice-a",
        headers={"Accept": "application/vnd.kubernetes.protobuf, */*"},
    )
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    json.loads(r.content)


def test_metric_name_is_url_decoded() -> None:
    doc = metric("queue-depth")
    doc["spec"]["name"] = "queue|depth"  # spec.name may differ from metadata.name
    r = get([doc], f"{V1}/namespaces/x/queue%7Cdepth")
    assert r.status_code == 200


def test_wildcard_namespace_lists_all_targets() -> None:
    r = get(seed_docs(), f"{V1}/namespaces/*/rps", now=NOW + 1)
    assert [i["metricLabels"]["resource"] for i in r.json()["items"]] == ["service-a", "service-b"]


def test_health_version_metrics_openapi() -> None:
    for path in ("/healthz", "/livez", "/readyz"):
        r = get(seed_docs(), path)
        assert r.status_code == 200 and r.text == "ok"
    version = get(seed_docs(), "/version").json()
    assert version["gitVersion"].startswith("v") and version["gitCommit"]
    metrics = get(seed_docs(), "/metrics").text
    for name in (
        "prescaler_request_duration_seconds",
        "prescaler_source_fetches_total",
        "prescaler_timeline_recomputes_total",
        "prescaler_source_stale",
    ):
        assert name in metrics
    v2 = get(seed_docs(), "/openapi/v2").json()
    assert v2["swagger"] == "2.0" and v2["paths"] and v2["definitions"]
    v3root = get(seed_docs(), "/openapi/v3").json()
    url = v3root["paths"]["apis/external.metrics.k8s.io/v1beta1"]["serverRelativeURL"]
    v3 = get(seed_docs(), url.split("?")[0]).json()
    assert v3["openapi"].startswith("3.") and v3["components"]["schemas"]


def test_openapi_v2_is_valid_swagger() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    doc = get(seed_docs(), "/openapi/v2").json()
    # Structural checks of Swagger 2.0 that kube-aggregator's loader relies on.
    assert set(doc) >= {"swagger", "info", "paths"}
    for path, ops in doc["paths"].items():
        assert path.startswith("/")
        for op in ops.values():
            assert "responses" in op
    for ref in re.findall(r'"\$ref":\s*"#/definitions/([^"]+)"', json.dumps(doc)):
        assert ref in doc["definitions"]
    jsonschema.Draft4Validator.check_schema(doc["definitions"][next(iter(doc["definitions"]))])


def test_readyz_503_before_objects_loaded() -> None:
    from adapter.engine import Engine
    from tests.helpers import client as make_client

    async def go():
        engine = Engine(start_sources=False)
        await engine.start()
        async with make_client(engine) as c:
            return await c.get("/readyz")

    r = run(go())
    assert r.status_code == 503


def test_reused_responses_follow_time_changes_and_new_snapshots() -> None:
    """The response cache never serves a value past a breakpoint, a second boundary, staleness or a
    new snapshot."""
    from tests.announcer_server import Announcer
    from tests.helpers import fetch_all

    announcer = Announcer()
    announcer.set_items([{"start": NOW, "end": NOW + 0.5, "values": {"scheduledMessage": 5}}])
    event = {
        "apiVersion": "prescaler.pingpong.ai/v1",
        "kind": "VirtualMetricEvent",
        "metadata": {"name": "ev"},
        "spec": {
            "source": {"api": {"url": announcer.url}, "interval": "10s"},
            "metrics": [entry("service-a", "service-a", "scheduledMessage")],
        },
    }
    path = f"{V1}/namespaces/service-a/rps?labelSelector=resource%3Dservice-a"

    async def go():
        engine = await loaded_engine([metric(defaultValue=1), event])
        seen = []
        async with client(engine) as c:

            async def value(at):
                engine.test_clock["now"] = at
                r = await c.get(path)
                return r.json()["items"][0]["value"] if r.status_code == 200 else r.status_code

            seen.append(await value(NOW + 0.1))
            seen.append(await value(NOW + 0.2))  # reused
            seen.append(await value(NOW + 0.6))  # past the item's end within the same second
            announcer.set_items([{"start": NOW, "end": NOW + 100, "values": {"scheduledMessage": 9}}])
            await fetch_all(engine)  # a new snapshot
            seen.append(await value(NOW + 0.7))
            announcer.set_raw(b"down", status=500)
            await fetch_all(engine)
            seen.append(await value(NOW + 50.6))  # last success at NOW + 0.7: stale after 50 s, not yet
            seen.append(await value(NOW + 50.8))  # same second, now stale -> 503 (onStale: Hold)
        await engine.stop()
        return seen

    try:
        assert run(go()) == ["5", "5", "1", "9", "9", 503]
    finally:
        announcer.close()
