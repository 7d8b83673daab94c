"""Key-level rebuilds: an item snapshot rebuilds only its targets, and the result equals a full build."""

from __future__ import annotations

import asyncio
import random

import numpy as np

from adapter.expressions import compile_expression
from adapter.items import Item
from adapter.labels import parse_selector
from adapter.pipeline.contributions import EntryPlan, Key
from adapter.pipeline.incremental import update_targets
from adapter.pipeline.publish import EventFeed, Published, build_published
from adapter.pipeline.query import Values, query
from adapter.policy import MetricPolicy
from adapter.resources import VirtualMetric
from tests.helpers import NOW, entry, loaded_engine, metric, run, schedule_event, settle

METRICS = {
    "rps": VirtualMetric(name="rps", metric_name="rps", policy=MetricPolicy(lead_time=60.0, hold_time=5.0)),
    "jobs": VirtualMetric(
        name="jobs", metric_name="jobs", policy=MetricPolicy(merge_strategy="Max", default_value=3.0)
    ),
}
NAMESPACES = ("a", "b")
RESOURCES = tuple(f"svc-{i}" for i in range(12))
ONE = compile_expression("1")


class Health:
    def __init__(self, last_success: float | None) -> None:
        self.last_success, self.last_error = last_success, None


class Holder:
    """Stands in for a SourceRunner with onStale: Hold (compared by identity); one that never fetched
    keeps its targets on hold."""

    def __init__(self, fetched: bool = True) -> None:
        self.health = Health(NOW - 10 if fetched else None)

    def is_stale(self, now: float) -> bool:
        return False

    def stale_at(self) -> float:
        return NOW + 1800


def random_feed(rng: random.Random, name: str, holder: object | None) -> EventFeed:
    entries = []
    for i in range(rng.randint(1, 6)):
        by_label = rng.random() < 0.3
        entries.append(
            EntryPlan(
                i,
                rng.choice(list(METRICS)),
                rng.choice(NAMESPACES),
                None if by_label else rng.choice(RESOURCES),
                "app" if by_label else None,
                ONE,
            )
        )
    labels = {"team": rng.choice("xyz")} if rng.random() < 0.7 else {}
    return EventFeed(name, labels, tuple(entries), random_contributions(rng, entries), holder)


def random_contributions(rng: random.Random, entries: tuple[EntryPlan, ...] | list[EntryPlan]) -> dict:
    out: dict[Key, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for e in entries:
        if rng.random() < 0.25:
            continue  # an entry whose items produced nothing this time
        resources = [e.name] if e.name is not None else rng.sample(RESOURCES, rng.randint(0, 3))
        for resource in resources:
            n = rng.randint(1, 4)
            start = NOW + np.array([rng.randrange(0, 3600, 30) for _ in range(n)], float)
            out[(e.metric, e.namespace, resource)] = (
                start,
                start + rng.choice((30.0, 300.0)),
                np.array([rng.randint(0, 50) for _ in range(n)], float),
            )
    return out


def answers(published: Published) -> dict:
    """Everything a query can see: per target its labels, holders and values at many times."""
    out = {}
    for (m, ns), part in published.partitions.items():
        assert [t.resource for t in part.targets] == sorted(part.by_resource) == list(part.resources)
        assert len(part.by_resource) == len(list(part.by_resource)) == len(part.targets)
        for target in part.targets:
            values = [
                query(published, m, ns, parse_selector(f"resource={target.resource}"), NOW + s)
                for s in range(-120, 4000, 97)
            ]
            out[(m, ns, target.resource)] = (
                dict(target.labels),
                target.holder_names,
                target.sources,
                target.never_fetched,
                part.waiting,
                [(v.values[0].value, v.valid_until) if isinstance(v, Values) else type(v).__name__ for v in values],
            )
    return out


def test_key_level_updates_equal_a_full_rebuild_over_random_changes() -> None:
    rng = random.Random(12)
    for trial in range(25):
        feeds = {
            f"ev-{i}": random_feed(rng, f"ev-{i}", Holder(rng.random() < 0.7) if rng.random() < 0.3 else None)
            for i in range(5)
        }
        published = build_published(METRICS, [feeds[n] for n in sorted(feeds)], NOW)
        for step in range(6):
            name = rng.choice(sorted(feeds))
            old = feeds[name]
            new = EventFeed(name, old.labels, old.entries, random_contributions(rng, old.entries), old.holder)
            feeds[name] = new
            changed: dict = {}
            for m, ns, r in old.contributions.keys() | new.contributions.keys():
                changed.setdefault((m, ns), set()).add(r)
            published, fallback = update_targets(published, METRICS, feeds, changed, {name}, NOW + step)
            assert fallback == set()
            full = build_published(METRICS, [feeds[n] for n in sorted(feeds)], NOW + step)
            assert answers(published) == answers(full), f"trial {trial} step {step}"


def test_a_stepped_update_publishes_nothing_until_done_and_equals_the_update_in_one_go(monkeypatch) -> None:
    import adapter.pipeline.incremental as incremental

    rng = random.Random(5)
    feeds = {f"ev-{i}": random_feed(rng, f"ev-{i}", None) for i in range(6)}
    before = build_published(METRICS, [feeds[n] for n in sorted(feeds)], NOW)
    renewed = {n: EventFeed(n, f.labels, f.entries, random_contributions(rng, f.entries)) for n, f in feeds.items()}
    changed: dict = {}
    for name in renewed:
        for m, ns, r in feeds[name].contributions.keys() | renewed[name].contributions.keys():
            changed.setdefault((m, ns), set()).add(r)
    in_one_go, _ = update_targets(before, METRICS, renewed, changed, set(renewed), NOW + 1)

    # Fresh feeds (nothing worked out yet) and no time for anything: every event's targets are a
    # step of their own, then each partition's contributions, timelines and targets.
    fresh = {n: EventFeed(n, f.labels, f.entries, f.contributions) for n, f in renewed.items()}
    monkeypatch.setattr(incremental, "STEP_SECONDS", -1.0)
    steps = incremental.update_targets_in_steps(before, METRICS, fresh, changed, set(fresh), NOW + 1)
    yields = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            stepped, fallback = done.value
            break
        yields += 1
    touched_partitions = [p for p in changed if p in before.partitions]
    assert yields == len(fresh) + 2 * len(touched_partitions)
    assert fallback == set()
    assert answers(stepped) == answers(in_one_go)
    assert answers(stepped) != answers(before)  # the changes are there, and only once it returned


def test_untouched_targets_are_the_same_objects_and_a_new_partition_falls_back() -> None:
    rps = METRICS["rps"]
    plans = [EntryPlan(i, "rps", "a", f"svc-{i}", None, ONE) for i in range(4)]
    contributions = {
        ("rps", "a", f"svc-{i}"): (np.array([NOW]), np.array([NOW + 60]), np.array([float(i)])) for i in range(4)
    }
    feed = EventFeed("ev", {}, tuple(plans), contributions)
    before = build_published({"rps": rps}, [feed], NOW)
    changed_contributions = dict(contributions)
    changed_contributions[("rps", "a", "svc-2")] = (np.array([NOW]), np.array([NOW + 60]), np.array([42.0]))
    changed_contributions[("rps", "b", "svc-9")] = (np.array([NOW]), np.array([NOW + 60]), np.array([1.0]))
    feed = EventFeed("ev", {}, tuple(plans), changed_contributions)
    after, fallback = update_targets(
        before, {"rps": rps}, {"ev": feed}, {("rps", "a"): {"svc-2"}, ("rps", "b"): {"svc-9"}}, {"ev"}, NOW
    )
    old, new = before.partitions[("rps", "a")], after.partitions[("rps", "a")]
    assert [new.by_resource[r] is old.by_resource[r] for r in ("svc-0", "svc-1", "svc-2", "svc-3")] == [
        True,
        True,
        False,
        True,
    ]
    value = query(after, "rps", "a", parse_selector("resource=svc-2"), NOW + 1)
    assert isinstance(value, Values) and value.values[0].value == 42.0
    assert fallback == {("rps", "b")}  # unknown to the previous snapshot: the caller rebuilds it


def test_engine_snapshot_rebuilds_only_its_targets_and_serves_the_new_values() -> None:
    def event(name: str, n: float, resources: range) -> dict:
        return schedule_event(
            name,
            [{"start": NOW, "end": NOW + 600, "values": {"n": n}}],
            [entry("ns", f"svc-{i}", "n") for i in resources],
        )

    async def go() -> tuple:
        engine = await loaded_engine([metric("rps"), event("a", 1, range(0, 50)), event("b", 2, range(50, 100))])
        before = engine.published.partitions[("rps", "ns")]
        engine._on_snapshot("a", [Item(NOW, NOW + 600, {"n": 7.0})])
        await settle(engine)
        after = engine.published.partitions[("rps", "ns")]
        values = [engine.query("rps", "ns", parse_selector(f"resource=svc-{i}"), NOW + 1) for i in (0, 49, 50, 99)]
        await engine.stop()
        return before, after, values

    before, after, values = run(go())
    assert [v.values[0].value for v in values] == [7.0, 7.0, 2.0, 2.0]  # type: ignore[union-attr]
    assert all(after.by_resource[f"svc-{i}"] is before.by_resource[f"svc-{i}"] for i in range(50, 100))
    assert not any(after.by_resource[f"svc-{i}"] is before.by_resource[f"svc-{i}"] for i in range(0, 50))
    assert [t.resource for t in after.targets] == [t.resource for t in before.targets]


def test_a_burst_of_snapshots_is_published_in_pieces_and_ends_complete(monkeypatch) -> None:
    import adapter.publisher as publisher_module

    monkeypatch.setattr(publisher_module, "INLINE_TARGETS", 7)  # 3 events x 20 targets: 9 pieces

    def event(name: str, resources: range) -> dict:
        return schedule_event(
            name,
            [{"start": NOW, "end": NOW + 600, "values": {"n": 1}}],
            [entry("ns", f"svc-{i}", "n") for i in resources],
        )

    async def go() -> tuple:
        engine = await loaded_engine([metric("rps"), *(event(f"e{k}", range(20 * k, 20 * k + 20)) for k in range(3))])
        published = []
        for k in range(3):
            engine._on_snapshot(f"e{k}", [Item(NOW, NOW + 600, {"n": 10.0 + k})])
        before = engine.published
        while engine.busy or engine.published is before:
            published.append(engine.published)
            await asyncio.sleep(0)
        values = [engine.query("rps", "ns", parse_selector(f"resource=svc-{i}"), NOW + 1) for i in range(60)]
        await engine.stop()
        return len({id(p) for p in published}), values

    snapshots, values = run(go())
    assert snapshots > 3  # queries were answered from intermediate snapshots in between
    assert [v.values[0].value for v in values] == [10.0] * 20 + [11.0] * 20 + [12.0] * 20  # type: ignore[union-attr]


def test_chunks_split_targets_without_losing_any() -> None:
    from adapter.pipeline.incremental import split_targets as _chunks

    targets = {("m", "a"): {f"r{i}" for i in range(25)}, ("m", "b"): {"x", "y"}}
    pieces = _chunks(targets, 10)
    assert all(sum(map(len, p.values())) <= 10 for p in pieces)
    merged: dict = {}
    for piece in pieces:
        for partition, resources in piece.items():
            assert not merged.get(partition, set()) & resources
            merged.setdefault(partition, set()).update(resources)
    assert merged == targets and _chunks({}, 10) == [{}]


def test_layered_targets_behave_like_the_dict_they_stand_for() -> None:
    from adapter.pipeline.incremental import LayeredTargets
    from adapter.pipeline.publish import Target

    def t(name: str, key: int = 0) -> Target:
        return Target(name, key, {"resource": name})

    rng = random.Random(5)
    names = [f"r{i}" for i in range(3000)]
    expected = {n: t(n) for n in names[:2000]}
    layered: object = dict(expected)
    versions: list[tuple[object, dict[str, Target]]] = []  # every version and what it stood for then
    for step in range(40):
        changed = {n: t(n, step) for n in rng.sample(names, 60)}
        removed = {n for n in rng.sample(names, 20) if n not in changed}
        layered = LayeredTargets.on(layered, changed, removed)  # type: ignore[arg-type]
        expected.update(changed)
        for n in removed:
            expected.pop(n, None)
        versions.append((layered, dict(expected)))
        assert dict(layered) == expected and len(layered) == len(expected)  # type: ignore[call-overload, arg-type]
        assert len(list(layered)) == len(expected)  # type: ignore[call-overload]  # each name once
        probe = rng.choice(names)
        assert (probe in layered) == (probe in expected)  # type: ignore[operator]
        assert layered.get(probe) == expected.get(probe)  # type: ignore[attr-defined]
    # Older versions (a query may still hold one) never change when newer ones are made on them.
    for version, then in versions:
        assert dict(version) == then  # type: ignore[call-overload]


def test_a_heavy_target_gets_a_piece_of_its_own() -> None:
    """Pieces of an item-snapshot rebuild on the event loop are sized by work: one target with
    4 000 intervals (a calendar's first snapshot) used to share a piece with 499 others."""
    from adapter.pipeline.incremental import split_targets

    targets = {("rps", "ns"): {f"t{i:03d}" for i in range(600)}}
    plain = split_targets(targets, 500)
    assert [sum(len(r) for r in piece.values()) for piece in plain] == [500, 100]
    weighted = split_targets(targets, 500, lambda partition, resource: 400 if resource == "t001" else 1)
    sizes = [sum(len(r) for r in piece.values()) for piece in weighted]
    assert sum(sizes) == 600 and all(units <= 500 for units in sizes)
    (alone,) = [piece for piece in weighted if "t001" in piece[("rps", "ns")]]
    assert len(alone[("rps", "ns")]) <= 101  # the heavy one and at most 100 light ones


def test_pieces_without_weights_are_the_pieces_of_weight_one() -> None:
    """split_targets cuts unweighted targets in slices; the pieces must be exactly those of the
    target-by-target rule with every target counting one (across partitions too)."""
    from adapter.pipeline.incremental import split_targets

    rng = random.Random(3)
    for _ in range(200):
        targets = {
            ("m", f"ns-{p}"): {f"r{rng.randrange(40)}" for _ in range(rng.randrange(0, 30))}
            for p in range(rng.randrange(0, 5))
        }
        size = rng.choice((-1, 0, 1, 2, 3, 7, 10, 500))
        assert split_targets(targets, size) == split_targets(targets, size, lambda partition, resource: 1)


def test_layered_targets_replace_whole_pieces_and_still_behave_like_the_dict() -> None:
    """The same pieces again (a source's next snapshot) replace their groups whole; pieces that cut
    across earlier ones, removals and targets the base never had must give the same mapping as a
    dict, and every older version must still stand for what it did."""
    from adapter.pipeline.incremental import LayeredTargets
    from adapter.pipeline.publish import Target

    rng = random.Random(8)
    names = [f"r{i:04d}" for i in range(1200)]
    pieces = [names[i : i + 50] for i in range(0, 1000, 50)]  # 200 names the base never has
    expected = {n: Target(n, 0, {"resource": n}) for n in names[:1000]}
    layered: object = dict(expected)
    versions: list[tuple[object, dict[str, Target]]] = []
    for step in range(300):
        roll = rng.random()
        if roll < 0.6:
            chosen = rng.choice(pieces)  # the same targets again
        elif roll < 0.8:
            start = rng.randrange(0, 1150)
            chosen = names[start : start + rng.randrange(1, 80)]  # across pieces, new names too
        else:
            chosen = rng.sample(names, rng.randrange(1, 40))
        removed = {n for n in chosen if rng.random() < 0.1}
        changed = {n: Target(n, step, {"resource": n}) for n in chosen if n not in removed}
        layered = LayeredTargets.on(layered, changed, removed)  # type: ignore[arg-type]
        expected.update(changed)
        for n in removed:
            expected.pop(n, None)
        versions.append((layered, dict(expected)))
        assert len(layered) == len(expected)  # type: ignore[arg-type]
        assert sorted(layered) == sorted(expected)  # type: ignore[call-overload]  # each name once
        for probe in rng.sample(names, 30):
            assert (probe in layered) == (probe in expected)  # type: ignore[operator]
            assert layered.get(probe) == expected.get(probe)  # type: ignore[attr-defined]
    for version, then in versions:
        assert dict(version) == then  # type: ignore[call-overload]
