"""stepPastTolerance in cluster mode: the HPAs' targets, scale-up tolerance and replica counts are read
(list only) from the API and drive the same rule the simulator uses."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from adapter.labels import parse_selector
from adapter.pipeline.deadband import STEPPED, UNKNOWN
from adapter.store.hpa_bands import HpaBands, bands_from_hpas, refresh_forever, stepping_namespaces
from tests.fakekube import FakeKube, ResourceType
from tests.helpers import NOW, entry, external_hpa, loaded_engine, metric, schedule_event, settle

HPAS = ResourceType("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", True, True)


def hpa(name: str, resource: str, behavior: dict | None = None, target_type: str = "AverageValue") -> dict[str, Any]:
    return external_hpa(name, "shop", resource, behavior, max_replicas=50, target_type=target_type)


def test_bands_from_hpa_objects() -> None:
    with_status = {**hpa("web", "web", {"scaleUp": {"tolerance": 0.05}}), "status": {"currentReplicas": 20}}
    no_status = hpa("new", "new")  # not reconciled yet: its replica count is unknown
    broken = {**hpa("bad", "bad"), "status": {"currentReplicas": 3}}
    broken["spec"]["metrics"] = "nope"
    bands = bands_from_hpas("shop", [with_status, no_status, broken])
    assert set(bands) == {("rps", "shop", "web")}
    band = bands[("rps", "shop", "web")]
    assert (band.target_milli, band.tolerance_up, band.replicas, band.hpa) == (10_000, 0.05, 20, "shop/web")
    twice = bands_from_hpas("shop", [with_status, {**with_status, "metadata": {"name": "web2"}}])
    assert twice == {}  # two HPAs reading one target: which one to step for is not defined


@pytest.fixture
def kube():
    with FakeKube() as fake:
        fake.register_type(HPAS)
        yield fake


def test_cluster_reads_hpas_and_the_engine_steps_the_answer(kube: FakeKube) -> None:
    kube.apply(hpa("web", "web"))
    kube.set_status("HorizontalPodAutoscaler", "web", {"currentReplicas": 20, "desiredReplicas": 20}, "shop")
    docs = [
        metric("rps", stepPastTolerance={}),
        schedule_event(
            "ev",
            [{"start": NOW - 60, "end": NOW + 600, "values": {"n": 210}}],
            [entry("shop", "web", "n"), entry("shop", "api", "n")],
        ),
    ]

    async def go() -> tuple:
        engine = await loaded_engine(docs)
        assert stepping_namespaces(engine) == {"shop"}
        bands = HpaBands(kube.api_client())
        task = asyncio.get_running_loop().create_task(refresh_forever(engine, bands, interval=0.05))
        for _ in range(100):
            await asyncio.sleep(0.02)
            if bands.bands:
                break
        web = engine.query("rps", "shop", parse_selector("resource=web"), NOW)
        api = engine.query("rps", "shop", parse_selector("resource=api"), NOW)
        await settle(engine)
        status = engine.statuses()[("VirtualMetric", "rps")][1]["toleranceStep"]
        task.cancel()
        await engine.stop()
        return web, api, status

    web, api, status = asyncio.run(go())
    assert [v.value for v in web.values] == [220.001]  # 21 pods needed at 20: stepped past 1.1
    assert [v.value for v in api.values] == [210.0]  # no HPA reads shop/api: unchanged
    reasons = {row["target"]: row["reason"] for row in status["targets"]}
    assert reasons == {"shop/web": STEPPED, "shop/api": UNKNOWN}
    reads = kube.requests_matching(path_regex="horizontalpodautoscalers")
    assert reads and {r.method for r in reads} == {"GET"}  # read-only


def test_a_namespace_whose_hpas_cannot_be_listed_is_warned_once_then_said_when_it_works(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with FakeKube() as fake:  # no HPA type registered yet: the list fails as a missing RBAC rule would
        bands = HpaBands(fake.api_client())
        with caplog.at_level(logging.DEBUG, logger="prescaler.deadband"):
            bands.refresh(["shop"])
            bands.refresh(["shop"])
            fake.register_type(HPAS)
            fake.apply(hpa("web", "web"))
            fake.set_status("HorizontalPodAutoscaler", "web", {"currentReplicas": 20}, "shop")
            bands.refresh(["shop"])
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "namespace shop" in warnings[0] and "served unchanged" in warnings[0]
    assert any("works again" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)
    assert ("rps", "shop", "web") in bands.bands
