"""ObjectTable.feeds() looks again only at what changed, and is always what a fresh build gives."""

from __future__ import annotations

from adapter.items import Item, parse_item
from adapter.pipeline.objects import ObjectTable
from tests.helpers import entry, schedule_event

NOW = 1_900_000_000.0


def event(index: int, value: int = 1) -> dict:
    items = [{"start": NOW, "end": NOW + 60, "values": {"n": value}}]
    return schedule_event(f"e-{index}", items, [entry("ns", f"t-{index}", "n")])


def fresh(table: ObjectTable) -> list[tuple[str, object]]:
    """What feeds() must equal: built from nothing, as the first call does."""
    copy = ObjectTable(table.context)
    copy.events = table.events
    return [(f.name, dict(f.contributions)) for f in copy.feeds()]


def as_pairs(table: ObjectTable) -> list[tuple[str, object]]:
    return [(f.name, dict(f.contributions)) for f in table.feeds()]


def test_unchanged_events_keep_their_feed_and_changes_show() -> None:
    table = ObjectTable()
    for i in range(5):
        table.apply(event(i))
    first = table.feeds()
    assert [f.name for f in first] == [f"e-{i}" for i in range(5)]
    assert table.feeds() is first  # nothing changed: the same list, nothing rebuilt

    item = parse_item({"start": NOW, "end": NOW + 60, "values": {"n": 7}}, "items[0]")
    table.snapshot("e-2", [item])
    second = table.feeds()
    assert second is not first
    assert [a is b for a, b in zip(first, second, strict=True)] == [True, True, False, True, True]
    assert as_pairs(table) == fresh(table)

    table.delete("VirtualMetricEvent", "e-0")
    table.apply(event(9))  # one out, one in: as many names as before, not the same ones
    assert [f.name for f in table.feeds()] == ["e-1", "e-2", "e-3", "e-4", "e-9"]
    assert as_pairs(table) == fresh(table)


def test_a_rejected_event_leaves_the_feeds_and_a_fixed_one_returns() -> None:
    table = ObjectTable()
    table.apply(event(1))
    table.apply(event(2))
    broken = event(2)
    broken["spec"]["metrics"][0]["value"]["expression"] = "n +"
    table.apply(broken)
    assert [f.name for f in table.feeds()] == ["e-1"]
    table.apply(event(2, value=3))
    assert [f.name for f in table.feeds()] == ["e-1", "e-2"]
    assert as_pairs(table) == fresh(table)


def test_a_first_snapshot_rebuilds_the_named_targets_not_the_whole_partition() -> None:
    """10 000 calendars in one namespace: each first snapshot rebuilt the partition's 10 000 targets
    (a quarter second in a thread, fighting the server for the GIL); its own targets suffice."""
    table = ObjectTable()
    for i in range(3):
        table.apply(event(i))
    item = parse_item({"start": NOW, "end": NOW + 60, "values": {"n": 7}}, "items[0]")
    change = table.snapshot("e-1", [item])
    assert change.partitions == set() and not change.rebuild
    assert change.targets == {("rps", "ns"): {"t-1"}} and change.events == {"e-1"}

    by_label = event(5)
    by_label["spec"]["metrics"][0]["resource"] = {"namespace": "ns", "nameFromLabel": "app"}
    table.apply(by_label)
    change = table.snapshot("e-5", [item])
    assert change.partitions == {("rps", "ns")}  # unknown targets may wait for it: the whole partition


def test_touches_are_reused_only_while_they_still_hold() -> None:
    """A snapshot that changes only values keeps the targets the event touches (reused, not worked
    out again); one whose items name other targets, or new entries, works them out afresh."""
    table = ObjectTable()
    by_label = event(1)
    by_label["spec"]["metrics"] = [
        entry("ns", "named", "n"),
        {"name": "rps", "resource": {"namespace": "ns", "nameFromLabel": "app"}, "value": {"expression": "n"}},
    ]
    table.apply(by_label)

    def deliver(value: int, *apps: str) -> object:
        items = [Item(NOW + k, NOW + 60, {"n": float(value)}, labels={"app": app}) for k, app in enumerate(apps)]
        table.snapshot("e-1", items)
        (feed,) = table.feeds()
        return feed.touches

    first = deliver(1, "a", "b")
    assert first == {("rps", "ns"): frozenset({"named", "a", "b"})}
    assert deliver(2, "a", "b") is first  # only the values changed
    assert deliver(3, "a", "c") == {("rps", "ns"): frozenset({"named", "a", "c"})}
    table.apply({**by_label, "spec": {**by_label["spec"], "metrics": by_label["spec"]["metrics"][1:]}})
    assert deliver(4, "a", "c") == {("rps", "ns"): frozenset({"a", "c"})}  # new entries: "named" is gone
