"""Engine behaviour: snapshots, failures, staleness, isolation of broken objects, status."""

from __future__ import annotations

from adapter.labels import parse_selector
from adapter.pipeline.query import MetricNotFound, SourceOnHold, Values
from tests.announcer_server import Announcer
from tests.helpers import (
    NOW,
    entry,
    event_status,
    fetch_all,
    loaded_engine,
    metric,
    metric_status,
    run,
    schedule_event,
    settle,
)

EVERYTHING = parse_selector("")
A = parse_selector("resource=service-a")


def api_event(
    url: str, name: str = "stage-vme", on_stale: str = "Hold", interval: str = "30s", entries: list | None = None
) -> dict:
    return {
        "apiVersion": "prescaler.pingpong.ai/v1",
        "kind": "VirtualMetricEvent",
        "metadata": {"name": name},
        "spec": {
            "source": {"api": {"url": url}, "interval": interval, "onStale": on_stale},
            "metrics": entries or [entry("service-a", "service-a", "scheduledMessage * 2")],
        },
    }


def value(engine, selector=A, namespace="service-a", now=None):
    result = engine.query("rps", namespace, selector, now)
    assert isinstance(result, Values), result
    return [v.value for v in result.values]


def test_snapshot_replaces_and_ids_dedupe(announcer: Announcer) -> None:
    async def go():
        batch = {"id": "b1", "start": NOW, "end": NOW + 60, "values": {"scheduledMessage": 50}}
        announcer.set_items([batch, batch])  # the same id twice counts once
        engine = await loaded_engine([metric(), api_event(announcer.url)])
        first = value(engine, now=NOW + 1)
        await fetch_all(engine)  # re-announcing the same batch never double-counts
        second = value(engine, now=NOW + 1)
        announcer.set_items([{**batch, "values": {"scheduledMessage": 10}}])
        await fetch_all(engine)
        third = value(engine, now=NOW + 1)
        await engine.stop()
        return first, second, third

    assert run(go()) == ([100.0], [100.0], [20.0])


def test_failed_fetch_keeps_items_and_hold_turns_503_when_stale(announcer: Announcer) -> None:
    async def go():
        announcer.set_items([{"start": NOW, "end": NOW + 3600, "values": {"scheduledMessage": 5}}])
        engine = await loaded_engine([metric(), api_event(announcer.url, interval="10s")])
        announcer.set_raw(b"oops", status=500)
        engine.test_clock["now"] = NOW + 30
        await fetch_all(engine)
        still = value(engine, now=NOW + 30)
        status = event_status(engine, "stage-vme")
        stale = engine.query("rps", "service-a", A, NOW + 51)  # staleAfter = 5 x 10s after the last success
        await engine.stop()
        return still, status, stale

    still, status, stale = run(go())
    assert still == [10.0]  # announced work is still coming
    source = next(c for c in status["conditions"] if c["type"] == "SourceHealthy")
    assert source["status"] == "False" and source["reason"] == "FetchFailed" and "500" in source["message"]
    assert isinstance(stale, SourceOnHold)
    assert "stage-vme" in stale.message and "stale" in stale.message


def test_use_known_keeps_serving_when_stale(announcer: Announcer) -> None:
    async def go():
        announcer.set_items([{"start": NOW, "end": NOW + 3600, "values": {"scheduledMessage": 5}}])
        engine = await loaded_engine([metric(), api_event(announcer.url, on_stale="UseKnown", interval="10s")])
        announcer.set_raw(b"", status=503)
        await fetch_all(engine)
        result = value(engine, now=NOW + 1000)
        status = event_status(engine, "stage-vme", now=NOW + 1000)
        await engine.stop()
        return result, status

    result, status = run(go())
    assert result == [10.0]
    assert status["stale"] is True


def test_source_down_from_start_holds_from_the_start(announcer: Announcer) -> None:
    """onStale: Hold and no successful fetch yet: 503 at once, not the default until staleAfter."""

    async def go():
        announcer.set_raw(b"not json")
        engine = await loaded_engine([metric(), api_event(announcer.url, interval="10s")])
        early = engine.query("rps", "service-a", A, NOW + 5)
        late = engine.query("rps", "service-a", A, NOW + 60)
        other = engine.query("rps", "service-b", parse_selector("resource=service-b"), NOW + 60)
        announcer.set_items([{"start": NOW, "end": NOW + 3600, "values": {"scheduledMessage": 4}}])
        await fetch_all(engine)
        recovered = engine.query("rps", "service-a", A, NOW + 6)
        await engine.stop()
        return early, late, other, recovered

    early, late, other, recovered = run(go())
    assert isinstance(early, SourceOnHold)
    assert "stage-vme" in early.message and "not fetched successfully yet" in early.message
    assert isinstance(late, SourceOnHold)
    assert isinstance(other, Values)  # a target the source does not feed is unaffected
    assert isinstance(recovered, Values) and [v.value for v in recovered.values] == [8.0]


def test_source_down_from_start_use_known_serves_the_default(announcer: Announcer) -> None:
    async def go():
        announcer.set_raw(b"not json")
        engine = await loaded_engine([metric(), api_event(announcer.url, interval="10s", on_stale="UseKnown")])
        early = engine.query("rps", "service-a", A, NOW + 5)
        await engine.stop()
        return early

    early = run(go())
    assert isinstance(early, Values) and [v.value for v in early.values] == [0.0]


def test_a_first_snapshot_without_items_ends_the_hold_of_named_targets(announcer: Announcer) -> None:
    """A named target the first successful fetch gives nothing to is served its default, not held: the
    first snapshot rebuilds every target the event names, not only the keys it contributes to."""

    async def go():
        announcer.set_raw(b"not json")
        engine = await loaded_engine([metric(), api_event(announcer.url)])
        before = engine.query("rps", "service-a", A, NOW + 5)
        announcer.set_items([])
        await fetch_all(engine)
        after = engine.query("rps", "service-a", A, NOW + 6)
        await engine.stop()
        return before, after

    before, after = run(go())
    assert isinstance(before, SourceOnHold)
    assert isinstance(after, Values) and [v.value for v in after.values] == [0.0]


def test_never_fetched_hold_source_naming_targets_from_labels_holds_unknown_targets(announcer: Announcer) -> None:
    async def go():
        announcer.set_raw(b"not json")
        by_label = {
            "name": "rps",
            "resource": {"namespace": "service-a", "nameFromLabel": "app"},
            "value": {"expression": "scheduledMessage"},
        }
        engine = await loaded_engine([metric(), api_event(announcer.url, entries=[by_label])])
        before = engine.query("rps", "service-a", A, NOW + 5)
        announcer.set_items(
            [{"start": NOW, "end": NOW + 3600, "values": {"scheduledMessage": 4}, "labels": {"app": "service-b"}}]
        )
        await fetch_all(engine)
        after = engine.query("rps", "service-a", A, NOW + 6)
        await engine.stop()
        return before, after

    before, after = run(go())
    assert isinstance(before, SourceOnHold)
    assert isinstance(after, Values) and [v.value for v in after.values] == [0.0]  # fetched: service-a is unknown


def test_broken_objects_do_not_affect_others() -> None:
    good = schedule_event(
        "good", [{"start": NOW, "end": NOW + 60, "values": {"n": 3}}], [entry("service-a", "service-a", "n")]
    )
    bad_expr = schedule_event(
        "bad-expr", [{"start": NOW, "end": NOW + 60, "values": {"n": 3}}], [entry("service-a", "service-a", "n +")]
    )
    two_sources = {**schedule_event("two-sources", [], [entry("service-a", "service-a", "n")])}
    two_sources["spec"]["source"]["api"] = {"url": "http://127.0.0.1:1/x"}
    div_zero = schedule_event(
        "div-zero",
        [{"start": NOW, "end": NOW + 60, "values": {"n": 0}}, {"start": NOW, "end": NOW + 60, "values": {"n": 2}}],
        [entry("service-a", "service-a", "10 / n")],
    )
    bad_metric = metric("broken", mergeStrategy="Median")

    async def go():
        engine = await loaded_engine([metric(), bad_metric, good, bad_expr, two_sources, div_zero])
        result = value(engine, now=NOW + 1)
        statuses = {name: event_status(engine, name) for name in ("good", "bad-expr", "two-sources", "div-zero")}
        broken = metric_status(engine, "broken")
        await engine.stop()
        return result, statuses, broken

    result, statuses, broken = run(go())
    assert result == [3.0 + 5.0]  # good (3) + the div-zero object's valid item (10/2)
    ready = {n: next(c for c in s["conditions"] if c["type"] == "Ready") for n, s in statuses.items()}
    assert ready["good"]["status"] == "True"
    assert ready["bad-expr"]["status"] == "False" and "spec.metrics[0].value.expression" in ready["bad-expr"]["message"]
    assert "exactly one of" in ready["two-sources"]["message"]
    exprs = next(c for c in statuses["div-zero"]["conditions"] if c["type"] == "ExpressionsValid")
    assert exprs["status"] == "False" and "division by zero" in exprs["message"]
    assert broken["conditions"][0]["status"] == "False"
    assert "spec.mergeStrategy" in broken["conditions"][0]["message"]


def test_unknown_virtual_metric_is_reported_on_the_event() -> None:
    event = schedule_event(
        "orphan",
        [{"start": NOW, "end": NOW + 60, "values": {"n": 1}}],
        [entry("service-a", "service-a", "n", metric_name="latency")],
    )

    async def go():
        engine = await loaded_engine([metric(), event])
        status = event_status(engine, "orphan")
        await engine.stop()
        return status

    ready = run(go())["conditions"][0]
    assert ready["reason"] == "UnknownMetric" and "latency" in ready["message"]


def test_delete_and_resync_remove_objects() -> None:
    ev = schedule_event(
        "ev", [{"start": NOW, "end": NOW + 60, "values": {"n": 3}}], [entry("service-a", "service-a", "n")]
    )

    async def go():
        engine = await loaded_engine([metric(), ev])
        before = value(engine, now=NOW + 1)
        engine.delete("VirtualMetricEvent", "ev")
        await settle(engine)
        after_delete = value(engine, now=NOW + 1)
        engine.resync("VirtualMetric", [])
        await settle(engine)
        gone = engine.query("rps", "service-a", A, NOW + 1)
        await engine.stop()
        return before, after_delete, gone

    before, after_delete, gone = run(go())
    assert before == [3.0] and after_delete == [0.0] and isinstance(gone, MetricNotFound)


def test_duplicate_metric_names_oldest_wins_and_the_other_takes_over_when_it_goes() -> None:
    older = metric("z-older", defaultValue=1)
    older["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    newer = metric("a-newer", defaultValue=2)  # first by name, but created later
    newer["metadata"]["creationTimestamp"] = "2024-06-01T00:00:00Z"
    for doc in (older, newer):
        doc["spec"]["name"] = "rps"

    async def go():
        engine = await loaded_engine([newer, older])
        served = value(engine, now=NOW)
        lost = metric_status(engine, "a-newer")
        won = metric_status(engine, "z-older")
        engine.delete("VirtualMetric", "z-older")
        await settle(engine)
        after = value(engine, now=NOW)
        took_over = metric_status(engine, "a-newer")
        await engine.stop()
        return served, lost, won, after, took_over

    served, lost, won, after, took_over = run(go())
    assert served == [1.0]
    assert lost["conditions"][0]["status"] == "False" and lost["conditions"][0]["reason"] == "MetricNameConflict"
    assert "already served by VirtualMetric/z-older" in lost["conditions"][0]["message"]
    assert won["conditions"][0]["reason"] == "Valid"
    assert after == [2.0]
    assert took_over["conditions"][0] == {**took_over["conditions"][0], "status": "True", "reason": "Valid"}


def test_duplicate_metric_names_without_timestamps_go_by_name() -> None:
    a = metric("rps-a", defaultValue=1)
    b = metric("rps-b", defaultValue=2)
    for doc in (a, b):
        doc["spec"]["name"] = "rps"

    async def go():
        engine = await loaded_engine([b, a])
        result = value(engine, now=NOW)
        status = metric_status(engine, "rps-b")
        await engine.stop()
        return result, status

    result, status = run(go())
    assert result == [1.0]
    assert status["conditions"][0]["reason"] == "MetricNameConflict"


def test_thread_safe_apply_from_another_thread() -> None:
    import threading

    async def go():
        engine = await loaded_engine([metric()])
        ev = schedule_event(
            "late", [{"start": NOW, "end": NOW + 60, "values": {"n": 4}}], [entry("service-a", "service-a", "n")]
        )
        thread = threading.Thread(target=engine.apply, args=(ev,))
        thread.start()
        thread.join()
        import asyncio

        for _ in range(100):
            await asyncio.sleep(0.01)
            if "late" in engine.events and engine.events["late"].runner:
                break
        await fetch_all(engine)
        result = value(engine, now=NOW + 1)
        await engine.stop()
        return result

    assert run(go()) == [4.0]


def test_identical_snapshot_skips_the_rebuild_but_counts_as_success(announcer: Announcer) -> None:
    async def go():
        announcer.set_items([{"id": "a", "start": NOW, "end": NOW + 3600, "values": {"scheduledMessage": 4}}])
        engine = await loaded_engine([metric(), api_event(announcer.url, interval="10s")])
        first = engine.published
        engine.test_clock["now"] = NOW + 45
        await fetch_all(engine)  # the same items again
        same = engine.published is first
        fresh = engine.query("rps", "service-a", A, NOW + 90)  # stale only 50 s after this success
        announcer.set_items([{"id": "a", "start": NOW, "end": NOW + 3600, "values": {"scheduledMessage": 6}}])
        await fetch_all(engine)
        changed = value(engine, now=NOW + 90)
        await engine.stop()
        return same, fresh, changed

    same, fresh, changed = run(go())
    assert same is True
    assert isinstance(fresh, Values) and [v.value for v in fresh.values] == [8.0]
    assert changed == [12.0]


def test_a_rejected_new_event_gets_its_status_written() -> None:
    import asyncio

    bad = schedule_event(
        "broken", [{"start": NOW, "end": NOW + 60, "values": {"n": 1}}], [entry("service-a", "service-a", "n +")]
    )

    async def go():
        engine = await loaded_engine([metric()])
        for _ in range(200):  # let the refresh the loading scheduled happen first
            if engine.status._handle is None:
                break
            await asyncio.sleep(0.01)
        notified = []
        engine.on_status_change(lambda: notified.append(True))
        engine.apply(bad)
        status = None
        for _ in range(200):  # the status refresh is coalesced over a short delay
            await asyncio.sleep(0.01)
            status = engine.status.current().get(("VirtualMetricEvent", "broken"))
            if status is not None and notified:
                break
        await engine.stop()
        return status, notified

    status, notified = run(go())
    assert status is not None and notified
    ready = status[1]["conditions"][0]
    assert ready["status"] == "False" and "spec.metrics[0].value.expression" in ready["message"]


def test_ready_only_once_every_source_finished_its_first_fetch(announcer: Announcer) -> None:
    """A replica joins the Service when its Hold sources have answered (or failed) once, so a healthy
    source never shows the never-fetched 503."""
    import asyncio
    import time

    from adapter.engine import Engine

    now = time.time()
    announcer.set_items([{"start": now - 60, "end": now + 3600, "values": {"scheduledMessage": 5}}])

    async def go():
        engine = Engine(start_sources=True)
        engine.resync("VirtualMetric", [metric()])
        engine.resync("VirtualMetricEvent", [api_event(announcer.url)])
        before_start = engine.synced
        await engine.start()
        states = []
        deadline = asyncio.get_running_loop().time() + 10
        while not engine.synced and asyncio.get_running_loop().time() < deadline:
            runner = engine.events["stage-vme"].runner
            states.append(runner is not None and runner.health.last_success is not None)
            await asyncio.sleep(0.01)
        ready = engine.synced
        answer = engine.query("rps", "service-a", A)
        await engine.stop()
        return before_start, states, ready, answer

    before_start, states, ready, answer = run(go())
    assert before_start is False and ready is True
    assert states and states[0] is False  # it was not ready while the fetch was pending
    assert isinstance(answer, Values) and [v.value for v in answer.values] == [10.0]


def test_no_false_undefined_metric_warning_before_the_first_publication(caplog) -> None:
    """A status refresh that runs while the first snapshot is still being built (a large install
    at start) must not warn that an event's metric is undefined: its VirtualMetric is loaded."""
    import asyncio
    import logging

    from adapter.engine import Engine

    async def go() -> None:
        engine = Engine(clock=lambda: NOW, start_sources=False)
        await engine.start()
        engine.resync("VirtualMetric", [metric("rps")])
        items = [{"start": NOW, "end": NOW + 600, "values": {"scheduledMessage": 1}}]
        engine.resync(
            "VirtualMetricEvent",
            [
                schedule_event("known", items, [entry("ns", "web", "scheduledMessage")]),
                schedule_event("typo", items, [{**entry("ns", "web", "scheduledMessage"), "name": "rsp"}]),
            ],
        )
        assert not engine.published.metrics  # nothing published yet
        with caplog.at_level(logging.WARNING, logger="prescaler.engine"):
            engine.statuses()
        await engine.stop()

    asyncio.run(go())
    warned = [r.getMessage() for r in caplog.records if "which no VirtualMetric defines" in r.getMessage()]
    assert warned == [
        "VirtualMetricEvent typo: names metric 'rsp', which no VirtualMetric defines: it contributes nothing"
    ]


def test_a_target_queried_before_the_events_are_loaded_is_not_reported_as_unknown(caplog) -> None:
    """In cluster mode the VirtualMetrics' list arrives before the events': an HPA's query in
    between names a target an event will feed. Reported only once everything is loaded."""
    import asyncio
    import logging

    from adapter.engine import Engine

    async def go() -> tuple[list[str], list[str]]:
        engine = Engine(clock=lambda: NOW, start_sources=False)
        await engine.start()
        with caplog.at_level(logging.WARNING, logger="prescaler.engine"):
            engine.resync("VirtualMetric", [metric("rps")])
            await settle(engine)
            engine.query("rps", "ns", parse_selector("resource=web"))  # the events are not listed yet
            items = [{"start": NOW, "end": NOW + 600, "values": {"n": 1}}]
            engine.resync("VirtualMetricEvent", [schedule_event("e", items, [entry("ns", "web", "n")])])
            await settle(engine)
            await fetch_all(engine)
            engine.query("rps", "ns", parse_selector("resource=web"))
            engine.query("rps", "ns", parse_selector("resource=wbe"))  # a typo: reported
        unknown = engine.notices.unknown_targets_now(engine.published).get("rps", [])
        await engine.stop()
        return unknown, [r.getMessage() for r in caplog.records if "feeds it" in r.getMessage()]

    unknown, warned = asyncio.run(go())
    assert unknown == ["ns/wbe"]
    assert len(warned) == 1 and "ns/wbe" in warned[0]
