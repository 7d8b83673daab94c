"""Published snapshots are partitioned by (metric, namespace); a change rebuilds only its partitions."""

from __future__ import annotations

from adapter.labels import parse_selector
from adapter.pipeline.query import Values
from tests.helpers import NOW, entry, fetch_all, loaded_engine, metric, run, schedule_event


def test_a_new_snapshot_rebuilds_only_the_partitions_of_its_source() -> None:
    docs = [
        metric("rps"),
        metric("jobs"),
        schedule_event("a", [{"start": NOW, "end": NOW + 600, "values": {"n": 1}}], [entry("ns-a", "svc", "n")]),
        schedule_event(
            "b",
            [{"start": NOW, "end": NOW + 600, "values": {"n": 2}}],
            [entry("ns-b", "svc", "n"), entry("ns-b", "svc", "n * 10", "jobs")],
        ),
    ]

    async def go():
        engine = await loaded_engine(docs)
        before = dict(engine.published.partitions)
        changed = schedule_event(
            "a", [{"start": NOW, "end": NOW + 600, "values": {"n": 5}}], [entry("ns-a", "svc", "n")]
        )
        engine.apply(changed)
        await fetch_all(engine)
        after = dict(engine.published.partitions)
        value = engine.query("rps", "ns-a", parse_selector("resource=svc"), NOW + 1)
        await engine.stop()
        return before, after, value

    before, after, value = run(go())
    assert set(before) == set(after) == {("rps", "ns-a"), ("rps", "ns-b"), ("jobs", "ns-b")}
    assert after[("rps", "ns-b")] is before[("rps", "ns-b")]  # untouched: reused as the same object
    assert after[("jobs", "ns-b")] is before[("jobs", "ns-b")]
    assert after[("rps", "ns-a")] is not before[("rps", "ns-a")]
    assert isinstance(value, Values) and [v.value for v in value.values] == [5.0]


def test_deleting_a_metric_rebuilds_everything_and_drops_its_partitions() -> None:
    docs = [
        metric("rps"),
        metric("jobs"),
        schedule_event(
            "b",
            [{"start": NOW, "end": NOW + 600, "values": {"n": 2}}],
            [entry("ns-b", "svc", "n"), entry("ns-b", "svc", "n * 10", "jobs")],
        ),
    ]

    async def go():
        engine = await loaded_engine(docs)
        engine.delete("VirtualMetric", "jobs")
        await fetch_all(engine)
        partitions = set(engine.published.partitions)
        await engine.stop()
        return partitions

    assert run(go()) == {("rps", "ns-b")}


def test_moving_an_entry_to_another_namespace_empties_the_old_partition() -> None:
    def event(ns: str) -> dict:
        return schedule_event("a", [{"start": NOW, "end": NOW + 600, "values": {"n": 1}}], [entry(ns, "svc", "n")])

    async def go():
        engine = await loaded_engine([metric("rps"), event("ns-1")])
        engine.apply(event("ns-2"))
        await fetch_all(engine)
        partitions = set(engine.published.partitions)
        old = engine.query("rps", "ns-1", parse_selector(""), NOW + 1)
        await engine.stop()
        return partitions, old

    partitions, old = run(go())
    assert partitions == {("rps", "ns-2")}
    assert isinstance(old, Values) and old.values == ()
