"""Kubernetes Events on condition changes, written by the status writer, against the fake API server."""

from __future__ import annotations

from typing import Any

from adapter.store.events import EventRecorder, condition_changes
from adapter.store.status import StatusWriter
from tests.fakekube import FakeKube
from tests.helpers import NOW, loaded_engine, metric, run, settle

API = "prescaler.pingpong.ai/v1"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def vm_doc(name: str, created: str, metric_name: str = "rps") -> dict[str, Any]:
    doc = metric(name)
    doc["spec"]["name"] = metric_name
    doc["metadata"]["creationTimestamp"] = created
    return doc


def events_of(fake: FakeKube, name: str) -> list[dict[str, Any]]:
    found = [e for e in fake.list_objects("Event") if e["involvedObject"]["name"] == name]
    return sorted(found, key=lambda e: int(e["metadata"]["resourceVersion"]))  # in the order created


def test_metric_name_conflict_and_its_end_become_events(fake: FakeKube) -> None:
    older, newer = vm_doc("rps-old", "2024-01-01T00:00:00Z"), vm_doc("rps-new", "2024-06-01T00:00:00Z")
    for doc in (older, newer):
        fake.apply({k: v for k, v in doc.items() if k != "metadata"} | {"metadata": {"name": doc["metadata"]["name"]}})
    clock = Clock()

    async def go():
        engine = await loaded_engine([older, newer], now=NOW)
        recorder = EventRecorder(fake.api_client(), clock=clock)
        writer = StatusWriter(fake.api_client(), engine.status.current, min_interval=0.0, clock=clock, events=recorder)
        engine.status.refresh()
        writer.sync_once()
        during = events_of(fake, "rps-new"), events_of(fake, "rps-old")
        engine.delete("VirtualMetric", "rps-old")
        await settle(engine)
        engine.status.refresh()
        clock.t += 1
        writer.sync_once()
        after = events_of(fake, "rps-new")
        await engine.stop()
        return during, after, fake.get("VirtualMetric", "rps-new")["status"]

    (conflict_events, winner_events), after, status = run(go())
    assert [e["reason"] for e in conflict_events] == ["MetricNameConflict"]
    event = conflict_events[0]
    assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "VirtualMetric"
    assert event["involvedObject"]["uid"] and "rps-old" in event["message"]
    assert event["metadata"]["namespace"] == "default" and event["source"]["component"] == "prescaler"
    assert winner_events == []  # a fresh install that is fine says nothing
    assert [e["reason"] for e in after] == ["MetricNameConflict", "Valid"]  # the conflict ended
    assert after[1]["type"] == "Normal"
    assert status["metricName"] == "rps"


def test_events_are_rate_limited_per_object_and_overall(fake: FakeKube) -> None:
    clock = Clock()
    recorder = EventRecorder(
        fake.api_client(), per_object_interval=60, per_object_burst=2, burst=4, rate_per_second=0.01, clock=clock
    )
    up = {"conditions": [{"type": "Ready", "status": "True", "reason": "Serving", "message": ""}]}
    down = {"conditions": [{"type": "Ready", "status": "False", "reason": "Stale", "message": "no data"}]}
    flaps = 0
    for i in range(10):  # a flapping source: ten changes within a minute
        before, after = (up, down) if i % 2 == 0 else (down, up)
        for change in condition_changes("VirtualMetricEvent", "flappy", before, after):
            flaps += 1
            recorder.record(change)
        clock.t += 5
    assert flaps == 10 and len(events_of(fake, "flappy")) == 2
    clock.t += 60
    for name in ("a", "b", "c", "d", "e"):  # many objects at once: the overall bucket
        for change in condition_changes("VirtualMetricEvent", name, up, down):
            recorder.record(change)
    sent = sum(len(events_of(fake, n)) for n in "abcde")
    assert sent == 3  # 4 tokens, two spent on "flappy", refilled by 0.01/s x 110 s -> 1 more
    assert recorder.dropped == 8 + 2


def test_unchanged_and_fresh_true_conditions_send_nothing() -> None:
    ok = {"conditions": [{"type": "Ready", "status": "True", "reason": "Serving"}]}
    bad = {"conditions": [{"type": "Ready", "status": "False", "reason": "InvalidSpec", "message": "x"}]}
    assert condition_changes("VirtualMetric", "a", ok, ok) == []
    assert condition_changes("VirtualMetric", "a", None, ok) == []
    pending = {"conditions": [{"type": "SourceHealthy", "status": "Unknown", "reason": "Pending"}]}
    assert condition_changes("VirtualMetricEvent", "a", None, pending) == []
    [change] = condition_changes("VirtualMetric", "a", None, bad)
    assert change.warning and change.reason == "InvalidSpec"
    reason_only = {"conditions": [{"type": "Ready", "status": "False", "reason": "Stale"}]}
    assert [c.reason for c in condition_changes("VirtualMetric", "a", bad, reason_only)] == ["Stale"]


def test_event_api_failures_never_stop_status_writes(fake: FakeKube) -> None:
    fake.inject_error("POST", "/events$", code=403, times=5)
    desired = {
        ("VirtualMetric", "rps"): (
            1,
            {"conditions": [{"type": "Ready", "status": "False", "reason": "InvalidSpec", "message": "bad"}]},
        )
    }
    fake.apply({"apiVersion": API, "kind": "VirtualMetric", "metadata": {"name": "rps"}, "spec": {}})
    recorder = EventRecorder(fake.api_client())
    writer = StatusWriter(fake.api_client(), lambda: desired, min_interval=0.0, events=recorder)
    writer.sync_once()
    assert fake.get("VirtualMetric", "rps")["status"]["conditions"][0]["reason"] == "InvalidSpec"
    assert recorder.sent == 0 and writer.errors == 0
