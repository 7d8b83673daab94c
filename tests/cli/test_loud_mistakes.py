"""Mistakes that used to be served quietly: each shows up in status, in logs (once) and in /metrics."""

from __future__ import annotations

import logging

import pytest

from adapter import observability as obs
from adapter.items import Item
from adapter.labels import parse_selector
from adapter.pipeline import notices
from adapter.pipeline.query import Values
from tests.helpers import NOW, client, entry, loaded_engine, metric, run, schedule_event, settle

ITEMS = [{"start": NOW, "end": NOW + 600, "values": {"n": 3}}]


def _sample(name: str, **labels: str) -> float:
    value = obs.REGISTRY.get_sample_value(name, labels)
    return value or 0.0


def _conditions(status: dict) -> dict[str, dict]:
    return {c["type"]: c for c in status["conditions"]}


# ---------------------------------------------------------------- point 3


def test_event_naming_an_unknown_metric_is_logged_once_and_in_status(caplog: pytest.LogCaptureFixture) -> None:
    event = schedule_event("typo", ITEMS, [entry("service-a", "service-a", "n", metric_name="rsp")])

    async def go():
        engine = await loaded_engine([metric(), event])
        first = engine.statuses()[("VirtualMetricEvent", "typo")][1]
        engine.statuses()  # a second refresh logs nothing new
        await engine.stop()
        return first

    with caplog.at_level(logging.WARNING, logger="prescaler"):
        status = run(go())
    ready = _conditions(status)["Ready"]
    assert ready["status"] == "False" and ready["reason"] == "UnknownMetric" and "rsp" in ready["message"]
    lines = [r.getMessage() for r in caplog.records if "'rsp'" in r.getMessage()]
    assert len(lines) == 1 and "typo" in lines[0] and "no VirtualMetric defines" in lines[0]


def test_unreachable_targets_are_reported(caplog: pytest.LogCaptureFixture) -> None:
    long_name = "a" * 64  # a valid Deployment name, but no selector value can name it
    by_label = {
        "name": "rps",
        "resource": {"namespace": "service-a", "nameFromLabel": "app"},
        "value": {"expression": "n"},
    }
    # Series labels come from prometheus/forecast sources; hand the engine such a snapshot directly.
    items = [
        Item(NOW, NOW + 600, {"n": 1}, "a", {"app": "Service A"}),
        Item(NOW, NOW + 600, {"n": 2}, "b", {"app": "service-b"}),
    ]
    static = schedule_event("static", ITEMS, [entry("service-a", long_name, "n")])
    dynamic = schedule_event("dynamic", ITEMS, [by_label])
    fine = schedule_event("fine", ITEMS, [entry("service-a", "service-a", "n")])

    async def go():
        engine = await loaded_engine([metric(), static, dynamic, fine])
        engine._on_snapshot("dynamic", items)
        await settle(engine)
        statuses = {n: engine.statuses()[("VirtualMetricEvent", n)][1] for n in ("static", "dynamic", "fine")}
        engine.statuses()
        await engine.stop()
        return statuses

    with caplog.at_level(logging.WARNING, logger="prescaler"):
        statuses = run(go())
    exprs = {n: _conditions(s)["ExpressionsValid"] for n, s in statuses.items()}
    assert exprs["static"]["status"] == "False" and exprs["static"]["reason"] == "UnreachableTarget"
    assert f"service-a/{long_name}" in exprs["static"]["message"] and "63" in exprs["static"]["message"]
    assert exprs["dynamic"]["reason"] == "UnreachableTarget" and "service-a/Service A" in exprs["dynamic"]["message"]
    assert "service-b" not in exprs["dynamic"]["message"]
    assert exprs["fine"]["status"] == "True"
    lines = [r.getMessage() for r in caplog.records if "no HPA can query" in r.getMessage()]
    assert len(lines) == 2  # once per problem, not per status refresh


def test_unreachable_targets_follow_the_entries_and_the_item_labels_of_each_snapshot() -> None:
    """The named targets are checked once per entries list, the label-named ones per snapshot: an
    edit that renames the target, or a snapshot whose labels change, changes what is reported."""
    long_name = "b" * 64
    by_label = {
        "name": "rps",
        "resource": {"namespace": "service-a", "nameFromLabel": "app"},
        "value": {"expression": "n"},
    }
    mixed = schedule_event("mixed", ITEMS, [entry("service-a", long_name, "n"), by_label])

    def unreachable(engine) -> str:  # type: ignore[no-untyped-def]
        condition = _conditions(engine.statuses()[("VirtualMetricEvent", "mixed")][1])["ExpressionsValid"]
        return condition["message"] if condition["reason"] == "UnreachableTarget" else ""

    async def go():
        engine = await loaded_engine([metric(), mixed])
        engine._on_snapshot("mixed", [Item(NOW, NOW + 600, {"n": 1}, "a", {"app": "Bad Name"})])
        await settle(engine)
        first = unreachable(engine)
        engine._on_snapshot("mixed", [Item(NOW, NOW + 600, {"n": 2}, "a", {"app": "good-name"})])
        await settle(engine)
        second = unreachable(engine)
        renamed = schedule_event("mixed", ITEMS, [entry("service-a", "short", "n"), by_label])
        engine.resync("VirtualMetricEvent", [renamed])
        await settle(engine)
        engine._on_snapshot("mixed", [Item(NOW, NOW + 600, {"n": 3}, "a", {"app": "good-name"})])
        await settle(engine)
        third = unreachable(engine)
        await engine.stop()
        return first, second, third

    first, second, third = run(go())
    assert f"service-a/{long_name}" in first and "service-a/Bad Name" in first
    assert f"service-a/{long_name}" in second and "Bad Name" not in second
    assert third == ""


# ---------------------------------------------------------------- point 5


def test_query_for_a_target_nothing_names_is_counted_logged_once_and_listed(caplog: pytest.LogCaptureFixture) -> None:
    event = schedule_event("ok", ITEMS, [entry("service-a", "service-a", "n")])
    before = _sample("prescaler_unknown_target_queries_total", metric="rps")

    async def go():
        engine = await loaded_engine([metric(), event])
        async with client(engine) as http:
            answers = []
            for _ in range(3):  # the HPA asks again and again (cached or not, each is counted)
                answers.append(
                    await http.get(
                        "/apis/external.metrics.k8s.io/v1beta1/namespaces/service-a/rps",
                        params={"labelSelector": "resource=servce-a"},
                    )
                )
            known = await http.get(
                "/apis/external.metrics.k8s.io/v1beta1/namespaces/service-a/rps",
                params={"labelSelector": "resource=service-a"},
            )
        engine.status.refresh()
        status = engine.status.current()[("VirtualMetric", "rps")][1]
        for i in range(30):  # a bounded list: the most recent 20
            engine.query("rps", "service-a", parse_selector(f"resource=typo-{i}"), NOW)
        bounded = engine.statuses()[("VirtualMetric", "rps")][1]
        await engine.stop()
        return answers, known, status, bounded

    with caplog.at_level(logging.WARNING, logger="prescaler"):
        answers, known, status, bounded = run(go())
    for answer in answers:  # kept: an empty list would break the HPA
        assert answer.status_code == 200 and answer.json()["items"][0]["value"] == "0"
    assert known.json()["items"][0]["value"] == "3"
    assert _sample("prescaler_unknown_target_queries_total", metric="rps") - before == 3
    assert status["unknownTargets"] == ["service-a/servce-a"]
    assert len(bounded["unknownTargets"]) == 20 and "service-a/typo-29" in bounded["unknownTargets"]
    assert "service-a/typo-0" not in bounded["unknownTargets"]
    lines = [r.getMessage() for r in caplog.records if "servce-a" in r.getMessage()]
    assert len(lines) == 1 and "no VirtualMetricEvent feeds it" in lines[0]


def test_unknown_target_leaves_the_list_once_an_object_feeds_it() -> None:
    early = schedule_event("early", ITEMS, [entry("service-a", "service-a", "n")])
    later = schedule_event("later", ITEMS, [entry("service-a", "service-b", "n")])

    async def go():
        engine = await loaded_engine([metric(), early])
        result = engine.query("rps", "service-a", parse_selector("resource=service-b"), NOW)
        listed = engine.statuses()[("VirtualMetric", "rps")][1].get("unknownTargets")
        engine.apply(later)
        from tests.helpers import fetch_all

        await fetch_all(engine)
        after = engine.statuses()[("VirtualMetric", "rps")][1].get("unknownTargets")
        await engine.stop()
        return result, listed, after

    result, listed, after = run(go())
    assert isinstance(result, Values) and result.unknown == ("service-b",)
    assert listed == ["service-a/service-b"] and after is None


# ---------------------------------------------------------------- point 11


def test_queries_are_counted_per_metric_and_code_and_served_values_exported() -> None:
    event = schedule_event("ok", ITEMS, [entry("service-a", "service-a", "n")])
    ok_before = _sample("prescaler_queries_total", metric="rps", code="200")
    unknown_before = _sample("prescaler_queries_total", metric="<unknown>", code="404")

    async def go():
        engine = await loaded_engine([metric(), event])
        async with client(engine) as http:
            base = "/apis/external.metrics.k8s.io/v1beta1/namespaces/service-a"
            await http.get(f"{base}/rps", params={"labelSelector": "resource=service-a"})
            await http.get(f"{base}/rps", params={"labelSelector": "resource=service-a"})
            await http.get(f"{base}/no-such-metric-{id(engine)}")
            exposition = (await http.get("/metrics")).text
        await engine.stop()
        return exposition

    exposition = run(go())
    assert _sample("prescaler_queries_total", metric="rps", code="200") - ok_before == 2
    assert _sample("prescaler_queries_total", metric="<unknown>", code="404") - unknown_before == 1
    assert "no-such-metric" not in exposition  # typos in metric names cannot grow the series
    assert _sample("prescaler_served_value", metric="rps", namespace="service-a", resource="service-a") == 3.0


def test_manifest_document_of_an_unknown_kind_is_a_warning_logged_once(
    tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    from adapter.store.manifests import ManifestStore

    class Sink:
        def resync(self, kind, docs):
            pass

    path = tmp_path / "objects.yaml"
    path.write_text(
        "apiVersion: prescaler.pingpong.ai/v1\nkind: VirtualMetrics\nmetadata: {name: rps}\n---\n"
        "apiVersion: example.com/v1\nkind: virtualmetricevent\nmetadata: {name: b}\n---\n"
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: hpa}\n---\n"
        "apiVersion: prescaler.pingpong.ai/v1\nkind: HorizontalPodPrescaler\nmetadata: {name: p}\n"
    )
    other = tmp_path / "other.yaml"
    other.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    with caplog.at_level(logging.WARNING, logger="prescaler"):
        store = ManifestStore(Sink(), [str(tmp_path)])
        store.poll()
        other.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: y}\n")  # another reload
        import os

        os.utime(other, ns=(1, 1))
        store.poll()
    assert len(store.warnings) == 2
    assert "'VirtualMetrics'" in store.warnings[0] and "did you mean VirtualMetric?" in store.warnings[0]
    assert "did you mean VirtualMetricEvent?" in store.warnings[1]
    logged = [r.getMessage() for r in caplog.records if "ignored document kind" in r.getMessage()]
    assert len(logged) == 2  # once, not per reload
    assert not any("'HorizontalPod" in w or "ConfigMap" in w for w in store.warnings)  # other and own kinds


def test_a_selector_naming_hundreds_of_unknown_targets_logs_a_bounded_number_of_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Any client may send `resource in (t0,...,t249)`: every target is served, the log stays short."""
    event = schedule_event("ok", ITEMS, [entry("service-a", "service-a", "n")])
    names = ",".join(f"flood-{i}" for i in range(250))
    before = _sample("prescaler_unknown_target_queries_total", metric="rps")

    async def go():
        engine = await loaded_engine([metric(), event])
        async with client(engine) as http:
            answer = await http.get(
                "/apis/external.metrics.k8s.io/v1beta1/namespaces/service-a/rps",
                params={"labelSelector": f"resource in ({names})"},
            )
        await engine.stop()
        return answer

    with caplog.at_level(logging.WARNING, logger="prescaler"):
        answer = run(go())
    assert answer.status_code == 200 and len(answer.json()["items"]) == 250
    assert _sample("prescaler_unknown_target_queries_total", metric="rps") - before == 1
    flood = [r.getMessage() for r in caplog.records if "flood-" in r.getMessage()]
    assert len(flood) == notices.UNKNOWN_LOG_BURST, len(flood)


def test_unknown_targets_left_out_of_the_log_are_summed_up_in_the_next_window(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [1000.0]
    board = notices.Notices(clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="prescaler"):
        board.note_unknown("rps", "ns", [f"a-{i}" for i in range(25)])
        board.note_unknown("rps", "ns", ["a-0"])  # already logged: never again
        now[0] += notices.UNKNOWN_LOG_WINDOW
        board.note_unknown("rps", "ns", ["b-0"])
    messages = [r.getMessage() for r in caplog.records]
    one_by_one = [m for m in messages if "no VirtualMetricEvent feeds it" in m]
    assert [m.split("target ")[1].split(":")[0] for m in one_by_one] == [
        *(f"ns/a-{i}" for i in range(notices.UNKNOWN_LOG_BURST)),
        "ns/b-0",
    ]
    summary = [m for m in messages if "were not logged one by one" in m]
    assert len(summary) == 1 and summary[0].startswith(f"{25 - notices.UNKNOWN_LOG_BURST} more")


def test_thousands_of_failing_sources_log_a_burst_and_a_count(caplog) -> None:
    """10 000 calendars refused by the same budget each logged a warning at once (a fifth of the event
    loop's time while they started); now the first 50 per 10 s, then the next line says how many
    were left out. Every failure is still counted and in each object's status."""
    import asyncio
    import logging

    from adapter.errors import SourceError
    from adapter.logs import BurstLimit
    from adapter.sources import runner as runner_module
    from tests.fake_sources import raising

    def refuse(now: float):
        raise SourceError("no room", retry_soon=False)

    clock = {"now": 0.0}
    runner_module.FAILURE_LOG = BurstLimit(50, 10.0, clock=lambda: clock["now"])
    runners = [runner_module.SourceRunner(f"e{i}", raising(refuse), lambda *_: None) for i in range(500)]

    async def fail_all() -> None:
        await asyncio.gather(*(r.fetch_once() for r in runners))

    with caplog.at_level(logging.WARNING, logger="prescaler.sources"):
        asyncio.run(fail_all())
        clock["now"] = 11.0
        asyncio.run(runners[0].fetch_once())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 51
    assert "450 failures of other sources not logged before this line" in warnings[-1]
    assert all(r.health.last_error == "no room" for r in runners)
