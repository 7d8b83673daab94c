"""`leadTime: Auto`: p90 pod start-up + HPA sync period + scale-up ramp, in the simulator and in a cluster."""

from __future__ import annotations

import datetime as dt

import pytest

from adapter.policy import MetricPolicy
from adapter.resources import parse_virtual_metric
from adapter.sim.hpa_spec import parse_hpa
from adapter.sim.scenario import parse_scenario
from adapter.store.leadtime import (
    FALLBACK_LEAD,
    MAX_LEAD,
    learn_lead_time,
    measure_lead_time,
    pod_startups,
    ramp_seconds,
)
from tests.fakekube import FakeKube, ResourceType
from tests.helpers import external_hpa


def hpa(behavior: dict | None = None, max_replicas: int = 40) -> dict:
    return external_hpa(behavior=behavior, max_replicas=max_replicas)


ONE_POD_A_MINUTE = {
    "scaleUp": {
        "stabilizationWindowSeconds": 0,
        "selectPolicy": "Max",
        "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
    }
}


def test_default_policy_doubles_in_one_period_so_no_ramp():
    assert ramp_seconds(parse_hpa(hpa({})), current=4, target=8) == 0.0


def test_restrictive_policy_needs_a_ramp_from_the_real_controller():
    # 2 -> 4 with one pod per minute: the second pod comes one policy period after the first.
    assert ramp_seconds(parse_hpa(hpa(ONE_POD_A_MINUTE)), current=2, target=4) == 60.0


def test_rule_adds_sync_period_and_ramp_to_the_p90_start_up():
    startups = [(f"p{i}", 100.0 + i) for i in range(11)]  # p90 = 109
    estimate = learn_lead_time(startups, parse_hpa(hpa(ONE_POD_A_MINUTE)), current=2)
    assert estimate.startup == pytest.approx(109.0)
    assert estimate.seconds == pytest.approx(109.0 + 15.0 + 60.0)
    assert estimate.reason == "Measured" and estimate.pods[-1] == "p10"
    assert estimate.status()["startupSeconds"] == pytest.approx(109.0)


def test_bounds_and_fallback():
    assert learn_lead_time([("a", 1e6)] * 5, None, 1).seconds == MAX_LEAD
    few = learn_lead_time([("a", 100.0)], None, 1)
    assert few.seconds == FALLBACK_LEAD and few.reason == "Fallback" and "need 3" in few.message


def scenario_doc(startup: object, behavior: dict) -> dict:
    return {
        "hpa": hpa(behavior),
        "tick": "15s",
        "duration": "10m",
        "workload": {"replicas": 2, "startupDelay": startup, "capacityPerPod": 10},
        "metrics": {"rps": {"from": "prescaler"}},
        "traffic": {"points": [[0, 10], [600, 10]]},
        "manifests": [
            {
                "apiVersion": "prescaler.pingpong.ai/v1",
                "kind": "VirtualMetric",
                "metadata": {"name": "rps"},
                "spec": {"leadTime": "Auto"},
            }
        ],
    }


def test_simulator_learns_start_up_delay_plus_ramp():
    sc = parse_scenario(scenario_doc("4m", ONE_POD_A_MINUTE))
    learned = sc.learned_lead_times["rps"]
    assert learned.seconds == pytest.approx(240.0 + 15.0 + 60.0)
    vm = parse_virtual_metric(sc.manifests[0])
    assert vm.lead_time == pytest.approx(learned.seconds) and not vm.lead_time_auto


def test_simulator_estimate_converges_to_the_distribution_p90_plus_ramp():
    # normal(300 s, 20 s): p90 = 300 + 1.2816 * 20
    sc = parse_scenario(scenario_doc({"distribution": "normal", "mean": "5m", "stddev": "20s", "seed": 3}, {}))
    assert sc.learned_lead_times["rps"].seconds == pytest.approx(300 + 1.2816 * 20 + 15.0, abs=8.0)


def test_virtual_metric_accepts_auto():
    vm = parse_virtual_metric(
        {
            "apiVersion": "prescaler.pingpong.ai/v1",
            "kind": "VirtualMetric",
            "metadata": {"name": "rps"},
            "spec": {"leadTime": "Auto"},
        }
    )
    assert vm.lead_time_auto and vm.lead_time == FALLBACK_LEAD


# ---------------------------------------------------------------- cluster mode, against the fake API server

PODS = ResourceType("", "v1", "pods", "Pod", True, status_subresource=True, has_generation=False)
DEPLOYMENTS = ResourceType("apps", "v1", "deployments", "Deployment", True, status_subresource=True)


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ts(value: str) -> float:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


@pytest.fixture
def kube():
    with FakeKube() as fake:
        fake.register_type(PODS)
        fake.register_type(DEPLOYMENTS)
        yield fake


def add_pod(fake: FakeKube, name: str, startup: float | None, labels: dict | None = None) -> None:
    stored = fake.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "shop", "labels": labels or {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        }
    )
    created = _ts(stored["metadata"]["creationTimestamp"])
    ready = "False" if startup is None else "True"
    fake.set_status(
        "Pod",
        name,
        {"conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": _iso(created + (startup or 0))}]},
        "shop",
    )


def test_cluster_lead_from_the_targets_pods_read_only(kube):
    kube.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}},
        }
    )
    for i, startup in enumerate([60, 70, 80, 90, 100]):
        add_pod(kube, f"web-{i}", startup)
    add_pod(kube, "web-starting", None)  # not Ready yet: not measurable
    add_pod(kube, "other-0", 5, labels={"app": "other"})  # another workload's pod
    estimate = measure_lead_time(kube.api_client(), "shop", {"kind": "Deployment", "name": "web"}, parse_hpa(hpa({})))
    assert estimate.reason == "Measured"
    assert sorted(estimate.pods) == [f"web-{i}" for i in range(5)]
    assert estimate.startup == pytest.approx(96.0)  # p90 of 60..100
    assert estimate.seconds == pytest.approx(96.0 + 15.0)
    api_calls = [r for r in kube.requests if "/pods" in r.path or "/deployments" in r.path]
    assert api_calls and all(r.method == "GET" for r in api_calls)


def test_cluster_missing_target_falls_back_and_says_why(kube):
    estimate = measure_lead_time(kube.api_client(), "shop", {"kind": "Deployment", "name": "nope"})
    assert estimate.reason == "Fallback" and estimate.seconds == FALLBACK_LEAD
    assert "Deployment/shop/nope" in estimate.message


def test_pod_startups_skip_pods_without_ready_time():
    pods = [
        {
            "metadata": {"name": "a", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:02:00Z"}]
            },
        },
        {"metadata": {"name": "b", "creationTimestamp": "2026-01-01T00:00:00Z"}, "status": {}},
    ]
    assert pod_startups(pods) == [("a", 120.0)]


def test_auto_lead_times_per_virtual_metric_from_its_targets(kube):
    from adapter.resources import MetricEntry, ResourceRef, SourceSpec, VirtualMetric, VirtualMetricEvent
    from adapter.sources.base import CommonSourceSettings
    from adapter.store.leadtime import AutoLeadTimes

    kube.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}},
        }
    )
    for i, startup in enumerate([100, 110, 120, 130]):
        add_pod(kube, f"web-{i}", startup)
    auto = VirtualMetric(
        name="rps", metric_name="rps", policy=MetricPolicy(lead_time=FALLBACK_LEAD), lead_time_auto=True
    )
    fixed = VirtualMetric(name="queue", metric_name="queue", policy=MetricPolicy(lead_time=60.0))
    source = SourceSpec(kind="api", config=None, common=CommonSourceSettings(), raw={})
    events = [
        VirtualMetricEvent(
            name="launch",
            source=source,
            metrics=(
                MetricEntry("rps", ResourceRef("shop", "web"), "audience"),
                MetricEntry(
                    "rps", ResourceRef("shop", "missing"), "audience"
                ),  # unmeasurable: the measured one decides
                MetricEntry("queue", ResourceRef("shop", "web"), "audience"),
            ),
        )
    ]
    learner = AutoLeadTimes(kube.api_client())
    assert learner.refresh([auto, fixed], events) is True
    assert learner.lead_time(auto) == pytest.approx(127.0 + 15.0)  # p90 of 100..130
    assert learner.lead_time(fixed) == 60.0 and learner.status(fixed) is None
    status = learner.status(auto)
    assert status["reason"] == "Measured" and sorted(status["pods"]) == [f"web-{i}" for i in range(4)]
    assert learner.refresh([auto, fixed], events) is False  # nothing new


def test_engine_serves_auto_lead_and_shows_it_in_status(kube):
    """Cluster mode end to end: pods measured through the API -> the served lead -> VM status."""
    import asyncio

    from adapter.labels import parse_selector
    from adapter.pipeline.query import Values
    from adapter.store.leadtime import AutoLeadTimes, learn_forever
    from tests.helpers import NOW, entry, loaded_engine, metric, schedule_event, settle

    kube.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}},
        }
    )
    for i, startup in enumerate([200, 210, 220, 230, 240]):
        add_pod(kube, f"web-{i}", startup)
    # A batch announced 280 s ahead: the 5-minute fallback lead serves it at NOW already, the learnt
    # 236 + 15 = 251 s lead only from NOW + 29 s.
    items = [{"start": NOW + 280, "end": NOW + 600, "values": {"n": 7}}]
    docs = [metric("rps", leadTime="Auto"), schedule_event("launch", items, [entry("shop", "web", "n")])]

    def served(engine, at):
        result = engine.query("rps", "shop", parse_selector("resource=web"), at)
        assert isinstance(result, Values), result
        return [v.value for v in result.values]

    async def go():
        engine = await loaded_engine(docs)
        assert engine.metrics["rps"].metric.lead_time == FALLBACK_LEAD  # until measured
        engine.lead_times = learner = AutoLeadTimes(kube.api_client())
        learning = asyncio.get_running_loop().create_task(learn_forever(engine, learner))
        for _ in range(500):  # bounded wait for the first measurement (API calls in a thread)
            if engine.metrics["rps"].metric.lead_time != FALLBACK_LEAD:
                break
            await asyncio.sleep(0.01)
        await settle(engine)
        status = engine.statuses()[("VirtualMetric", "rps")][1]
        lead = engine.metrics["rps"].metric.lead_time
        values = served(engine, NOW), served(engine, NOW + 40)
        engine.apply(metric("rps", leadTime="Auto", defaultValue=1))  # a spec change keeps the learnt lead
        await settle(engine)
        kept = engine.metrics["rps"].metric.lead_time
        learning.cancel()
        await engine.stop()
        return status, lead, values, kept

    status, lead, (at_now, later), kept = asyncio.run(go())
    assert lead == pytest.approx(236.0 + 15.0) and kept == lead
    assert status["learnedLeadTime"]["seconds"] == pytest.approx(lead)
    assert sorted(status["learnedLeadTime"]["pods"]) == [f"web-{i}" for i in range(5)]
    assert at_now == [0.0] and later == [7.0]


def test_objects_that_arrive_after_start_up_are_measured_at_once(kube):
    """In cluster mode the measuring loop starts before the store has listed the VirtualMetrics: an Auto
    metric that appears afterwards (or a metric switched to Auto) is measured within seconds, not after
    the next 5-minute round on the fallback lead."""
    import asyncio

    from adapter.store.leadtime import AutoLeadTimes, learn_forever
    from tests.helpers import entry, loaded_engine, metric, schedule_event, settle

    kube.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}},
        }
    )
    for i, startup in enumerate([100, 110, 120]):
        add_pod(kube, f"web-{i}", startup)

    async def go():
        engine = await loaded_engine([])  # the store has listed nothing yet
        engine.lead_times = learner = AutoLeadTimes(kube.api_client())
        learning = asyncio.get_running_loop().create_task(learn_forever(engine, learner))
        await asyncio.sleep(0.05)  # the loop has looked once and found no Auto VirtualMetric
        engine.resync("VirtualMetric", [metric("rps", leadTime="Auto")])
        items = [{"start": 0, "end": 1, "values": {"n": 1}}]
        engine.resync("VirtualMetricEvent", [schedule_event("launch", items, [entry("shop", "web", "n")])])
        await settle(engine)
        for _ in range(1000):  # bounded (10 s): far less than the 300 s round
            if engine.metrics["rps"].metric.lead_time != FALLBACK_LEAD:
                break
            await asyncio.sleep(0.01)
        lead = engine.metrics["rps"].metric.lead_time
        learning.cancel()
        await engine.stop()
        return lead

    assert asyncio.run(go()) == pytest.approx(118.0 + 15.0)  # p90 of 100, 110, 120


def test_ramp_comes_from_the_hpa_that_scales_the_target(kube):
    from adapter.store.leadtime import AutoLeadTimes, hpa_reader

    kube.register_type(
        ResourceType(
            "autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", True, status_subresource=True
        )
    )
    kube.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}},
        }
    )
    for i, startup in enumerate([100, 100, 100]):
        add_pod(kube, f"web-{i}", startup)
    kube.apply(hpa(ONE_POD_A_MINUTE))  # scales shop/web one pod a minute: 2 -> 4 takes a minute more
    other = hpa({})
    other["metadata"]["name"] = "other"
    other["spec"]["scaleTargetRef"]["name"] = "other"
    kube.apply(other)
    read = hpa_reader(kube.api_client())
    assert read("shop", "nobody") is None
    assert measure_lead_time(
        kube.api_client(), "shop", {"kind": "Deployment", "name": "web"}, read("shop", "web")
    ).seconds == pytest.approx(100.0 + 15.0 + 60.0)
    from adapter.resources import MetricEntry, ResourceRef, SourceSpec, VirtualMetric, VirtualMetricEvent
    from adapter.sources.base import CommonSourceSettings

    vm = VirtualMetric(name="rps", metric_name="rps", policy=MetricPolicy(lead_time=FALLBACK_LEAD), lead_time_auto=True)
    vme = VirtualMetricEvent(
        name="e",
        source=SourceSpec(kind="api", config=None, common=CommonSourceSettings(), raw={}),
        metrics=(MetricEntry("rps", ResourceRef("shop", "web"), "n"),),
    )
    learner = AutoLeadTimes(kube.api_client(), hpa_for=read)
    learner.refresh([vm], [vme])
    assert learner.status(vm)["rampSeconds"] == 60.0
