"""The HTTP layer against a fake provider: outcomes map to exact bodies, no engine involved."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import httpx

from adapter.api.app import PrescalerApp
from adapter.api.provider import MetricNotFound, Outcome, SourceOnHold, TargetValue, Values
from adapter.labels import Selector
from adapter.pipeline.preview import PreviewRequest
from tests.helpers import run

V1 = "/apis/external.metrics.k8s.io/v1beta1"
NOW = 1_700_000_000.25


@dataclass
class FakeProvider:
    """Answers what it is told to; counts the queries it is asked."""

    outcomes: dict[str, Outcome] = field(default_factory=dict)
    now: float = NOW
    token: object = field(default_factory=object)
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    synced: bool = True

    def clock(self) -> float:
        return self.now

    def metric_names(self) -> list[str]:
        return sorted(self.outcomes)

    def query(self, metric: str, namespace: str, selector: Selector, now: float | None = None) -> Outcome:
        self.calls.append((metric, namespace, repr(selector)))
        return self.outcomes.get(metric) or MetricNotFound(metric, f"no metric {metric}")

    def snapshot(self) -> object:
        return self.token

    def preview(self, request: PreviewRequest) -> dict[str, Any] | MetricNotFound:
        if request.metric not in self.outcomes:
            return MetricNotFound(request.metric, f"no VirtualMetric serves metric {request.metric!r}")
        return {"metric": request.metric, "steps": []}


def get_all(provider: FakeProvider, *paths: str) -> list[httpx.Response]:
    async def go() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=PrescalerApp(provider))
        async with httpx.AsyncClient(transport=transport, base_url="https://prescaler.test") as c:
            return [await c.get(p) for p in paths]

    return run(go())


def test_values_become_an_exact_value_list() -> None:
    provider = FakeProvider({"rps": Values((TargetValue("svc", "ns", {"resource": "svc", "team": "a"}, 1.5),))})
    discovery, value = get_all(provider, V1, f"{V1}/namespaces/ns/rps?labelSelector=resource%3Dsvc")
    assert [r["name"] for r in discovery.json()["resources"]] == ["rps"]
    assert value.status_code == 200
    assert value.content == (
        b'{"kind":"ExternalMetricValueList","apiVersion":"external.metrics.k8s.io/v1beta1",'
        b'"metadata":{},"items":[{"metricName":"rps","metricLabels":{"resource":"svc",'
        b'"team":"a"},"timestamp":"2023-11-14T22:13:20Z","value":"1500m"}]}'
    )


def test_metric_not_found_is_a_404_status() -> None:
    (response,) = get_all(FakeProvider(), f"{V1}/namespaces/ns/nope")
    assert response.status_code == 404
    assert response.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "no metric nope",
        "reason": "NotFound",
        "code": 404,
    }


def test_source_on_hold_is_a_503_status() -> None:
    provider = FakeProvider({"rps": SourceOnHold("rps", "metric rps for ns/svc is on hold")})
    (response,) = get_all(provider, f"{V1}/namespaces/ns/rps")
    assert response.status_code == 503
    body = response.json()
    assert body["reason"] == "ServiceUnavailable" and body["code"] == 503 and "on hold" in body["message"]


def test_answers_are_reused_until_valid_until_or_a_new_snapshot() -> None:
    provider = FakeProvider(
        {"rps": Values((TargetValue("svc", "ns", {"resource": "svc"}, 1.0),), valid_until=NOW + 0.5)}
    )
    path = f"{V1}/namespaces/ns/rps"

    async def go() -> list[int]:
        transport = httpx.ASGITransport(app=PrescalerApp(provider))
        counts = []
        async with httpx.AsyncClient(transport=transport, base_url="https://prescaler.test") as c:
            await c.get(path)
            await c.get(path)  # same snapshot, before valid_until: reused
            counts.append(len(provider.calls))
            provider.now = NOW + 0.6  # past valid_until
            await c.get(path)
            counts.append(len(provider.calls))
            provider.token = object()  # a new snapshot
            await c.get(path)
            counts.append(len(provider.calls))
        return counts

    assert run(go()) == [1, 2, 3]


def test_preview_outcomes_become_status_bodies() -> None:
    provider = FakeProvider({"rps": Values(valid_until=math.inf)})
    ok, missing, bad = get_all(
        provider,
        "/prescaler/v1/preview?metric=rps&namespace=ns&resource=svc",
        "/prescaler/v1/preview?metric=nope&namespace=ns&resource=svc",
        "/prescaler/v1/preview?metric=rps&namespace=ns&resource=svc&start=inf",
    )
    assert ok.status_code == 200 and ok.json() == {"metric": "rps", "steps": []}
    assert missing.status_code == 404 and missing.json()["reason"] == "NotFound"
    assert bad.status_code == 400 and bad.json()["kind"] == "Status" and "start" in bad.json()["message"]
