"""Key-level rebuilds: a new item snapshot of one source rebuilds only the targets it touches.

A partition (metric, namespace) can hold 100 000 targets; a source that delivered 1 000 changed
items touches a few of them. Their timelines depend only on their own contributions, so this builds
a small TimelineSet for exactly those targets (gathering the contributions of every event that
touches them) and publishes a partition view whose other targets are the previous objects,
unchanged. The result is what `build_published` would build from scratch (tests compare them);
the cost scales with the touched targets, not with the partition.

Only item snapshots take this path: object changes (a new entry, a deleted event, a changed
VirtualMetric) rebuild their partitions with `build_published`, which also compacts the small
TimelineSets this module leaves behind.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Generator, Iterator, Mapping
from typing import Any, TypeVar

import immutables
import numpy as np

from adapter import heap
from adapter.pipeline.contributions import Arrays, Partition
from adapter.pipeline.publish import (
    REBUILD_WORKERS,
    EventFeed,
    PartitionView,
    Published,
    Target,
    build_published,
    join_contributions,
)
from adapter.resources import VirtualMetric
from adapter.timeline import build_timelines


def split_targets(
    targets: dict[Partition, set[str]], size: int, weight: Callable[[Partition, str], int] | None = None
) -> list[dict[Partition, set[str]]]:
    """`targets` split into pieces of at most `size` units (at least one piece); a target counts as
    `weight(partition, resource)` units (1 without `weight`), so one target with thousands of
    intervals (a calendar's first snapshot) gets a piece of its own instead of joining 499 others."""
    pieces: list[dict[Partition, set[str]]] = [{}]
    count = 0
    if weight is None:
        # Every target one unit: the same pieces, cut from the sorted names in slices (a snapshot's
        # 1 000 targets were 1 000 steps of the loop below, about a millisecond on the event loop).
        size = max(1, size)
        for partition, resources in targets.items():
            ordered = sorted(resources)
            at = 0
            while at < len(ordered):
                if count >= size:
                    pieces.append({})
                    count = 0
                chunk = ordered[at : at + size - count]
                pieces[-1].setdefault(partition, set()).update(chunk)
                count += len(chunk)
                at += len(chunk)
        return pieces
    for partition, resources in targets.items():
        for resource in sorted(resources):
            units = max(1, weight(partition, resource))
            if count + units > size and count:
                pieces.append({})
                count = 0
            pieces[-1].setdefault(partition, set()).add(resource)
            count += units
    return pieces


def publish_changes(
    metrics: Mapping[str, VirtualMetric],
    feeds: list[EventFeed],
    now: float,
    previous: Published,
    dirty: set[Partition] | None,
    targets: dict[Partition, set[str]],
    events: set[str],
    by_name: Mapping[str, EventFeed] | None = None,
) -> Published:
    """The next snapshot: whole partitions where objects changed (or everything: `dirty` None), then
    single targets where only items changed. `by_name`: `feeds` by name, when the caller keeps it
    (10 000 events: a dict made again for every piece of a rebuild cost milliseconds of the loop)."""
    with heap.no_collection():
        return _build(metrics, feeds, now, previous, dirty, targets, events, by_name)


def _build(
    metrics: Mapping[str, VirtualMetric],
    feeds: list[EventFeed],
    now: float,
    previous: Published,
    dirty: set[Partition] | None,
    targets: dict[Partition, set[str]],
    events: set[str],
    by_name: Mapping[str, EventFeed] | None = None,
) -> Published:
    if dirty is None:
        return build_published(metrics, feeds, now)
    published = build_published(metrics, feeds, now, previous, dirty) if dirty else previous
    targets = {p: r for p, r in targets.items() if p not in dirty}
    if targets:
        feed_map = by_name if by_name is not None else {f.name: f for f in feeds}
        published, fallback = update_targets(published, metrics, feed_map, targets, events, now)
        if fallback:
            published = build_published(metrics, feeds, now, published, fallback)
    return published


def publish_targets_in_steps(
    metrics: Mapping[str, VirtualMetric],
    feeds: list[EventFeed],
    by_name: Mapping[str, EventFeed],
    now: float,
    previous: Published,
    targets: dict[Partition, set[str]],
    events: set[str],
) -> Generator[None, None, Published]:
    """The next snapshot when only items changed (`targets` of `events`), in steps (see
    update_targets_in_steps); a partition `previous` does not know is built whole, in one step."""
    published, fallback = yield from update_targets_in_steps(previous, metrics, by_name, targets, events, now)
    if fallback:
        yield
        published = build_published(metrics, feeds, now, published, fallback)
    return published


def update_targets(
    previous: Published,
    metrics: Mapping[str, VirtualMetric],
    feeds: Mapping[str, EventFeed],
    changed: Mapping[Partition, Collection[str]],
    changed_events: Collection[str],
    now: float,
) -> tuple[Published, set[Partition]]:
    """`previous` with the targets `changed` (partition -> resource names) rebuilt.

    `changed_events` are the events whose contributions changed since `previous` (nothing else
    changed: same objects, same metrics). Returns the new snapshot and the partitions this could
    not update here (unknown to `previous`): the caller rebuilds those with `build_published`."""
    return run_steps(update_targets_in_steps(previous, metrics, feeds, changed, changed_events, now))


def update_targets_in_steps(
    previous: Published,
    metrics: Mapping[str, VirtualMetric],
    feeds: Mapping[str, EventFeed],
    changed: Mapping[Partition, Collection[str]],
    changed_events: Collection[str],
    now: float,
) -> Generator[None, None, tuple[Published, set[Partition]]]:
    """update_targets in steps: at each `yield` the event loop may answer requests in between.
    Nothing is published before the generator returns, so a query sees all of its targets or none.

    Three steps per partition, each about a millisecond for 500 targets: which events touch each
    target and their contributions; one timeline build for all of them (numpy's cost per call is
    mostly fixed: ten builds of 100 targets took 6 ms where one of 1 000 takes under 1 ms); the
    targets themselves."""
    partitions = dict(previous.partitions)
    fallback: set[Partition] = set()
    for partition, resources in changed.items():
        view = previous.partitions.get(partition)
        metric = metrics.get(partition[0])
        if metric is None or previous.metrics.get(partition[0]) is not metric:
            if partition[0] in metrics or partition[0] in previous.metrics:
                fallback.add(partition)
            continue
        if view is None:
            fallback.add(partition)
            continue
        partitions[partition] = yield from _update_partition(
            partition, view, metric, feeds, set(resources), changed_events
        )
    return Published(previous.metrics, partitions, now), fallback


Result = TypeVar("Result")
STEP_SECONDS = 0.001  # a step that can stop early stops after this long


def run_steps(steps: Generator[None, None, Result]) -> Result:
    """Everything a stepped job does, in one go."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def _update_partition(
    partition: Partition,
    view: PartitionView,
    metric: VirtualMetric,
    feeds: Mapping[str, EventFeed],
    resources: set[str],
    changed_events: Collection[str],
) -> Generator[None, None, PartitionView]:
    metric_name, namespace = partition
    # Which changed events touch each changed target now: found from their side (no scan per target).
    # One tuple per event is shared by the targets only it touches (the usual case: one source's
    # snapshot), so the memo below sees few distinct keys.
    changed_touch: dict[str, tuple[str, ...]] = {}
    started = time.perf_counter()
    for name in sorted(changed_events):
        feed = feeds.get(name)
        if feed is None:
            continue
        if not feed.knows_touches() and time.perf_counter() - started > STEP_SECONDS:
            # The first piece after many sources delivered (100 events of 1 000 targets: 50 ms)
            # works out each event's targets: a step of its own every millisecond or so.
            yield
            started = time.perf_counter()
        alone = (name,)
        for resource in resources.intersection(feed.touches.get(partition, ())):
            before = changed_touch.get(resource)
            changed_touch[resource] = alone if before is None else before + alone
    # The same targets as last time (a source's next snapshot): their old versions are one group's.
    group = view.by_resource.group_of(resources) if isinstance(view.by_resource, LayeredTargets) else None
    lookup = group.get if group is not None else view.by_resource.get
    # Each changed target's events: the unchanged ones that touched it before, plus the changed ones
    # that touch it now, sorted; worked out once per distinct (before, changed) pair, since targets
    # touched by the same events share their `sources` tuple.
    touching: dict[str, tuple[str, ...]] = {}
    known: set[str] = set()  # of `resources`, those `view` has
    memo: dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[str, ...]] = {}
    no_events: tuple[str, ...] = ()
    for resource in resources:
        old = lookup(resource)
        if old is None:
            before = no_events
        else:
            known.add(resource)
            before = old.sources
        pair = (before, changed_touch.get(resource, no_events))
        names = memo.get(pair)
        if names is None:
            kept = [n for n in before if n not in changed_events and n in feeds]
            names = memo[pair] = tuple(sorted([*kept, *pair[1]]))
        if names:
            touching[resource] = names
    keys = [(metric_name, namespace, r) for r in touching]
    part_keys: list[int] = []
    parts: list[Arrays] = []
    contributions = {name: feeds[name].contributions for names in memo.values() for name in names}
    for k, (key, touched_by) in enumerate(zip(keys, touching.values())):
        for name in touched_by:
            arrays = contributions[name].get(key)
            if arrays is not None:
                part_keys.append(k)
                parts.append(arrays)
    yield
    timelines = build_timelines(
        keys,
        [metric.policy],
        join_contributions(part_keys, parts),
        policy_index=np.zeros(len(keys), np.int64),
        workers=REBUILD_WORKERS,
    )
    yield
    # Targets touched by the same events share their holders, sources and extra labels.
    shared: dict[tuple[str, ...], tuple[dict[str, str], tuple[Any, ...], tuple[str, ...], frozenset[str]]] = {}
    updated: dict[str, Target] = {}
    for k, (resource, sources) in enumerate(touching.items()):
        common = shared.get(sources)
        if common is None:
            common = shared[sources] = _common(sources, feeds)
        extra, holders, holder_names, never = common
        updated[resource] = tuple.__new__(
            Target,
            (
                resource,
                k,
                {"resource": resource, **extra} if extra else {"resource": resource},
                holders,
                holder_names,
                timelines,
                sources,
                never,
            ),
        )
    removed = known.difference(updated)
    added = len(updated) - (len(known) - len(removed))  # targets `view` does not have
    by_resource = LayeredTargets.on(view.by_resource, updated, removed, len(view.by_resource) + added - len(removed))
    waiting = tuple(w for w in view.waiting if w[0].health.last_success is None)
    if removed or added:
        return PartitionView(view.timelines, None, by_resource, None, waiting)  # new order: sorted once, here
    # Same targets, same order: the list of targets is made again only if someone asks for it (and
    # the names are sorted here only if they were before: this runs on the event loop).
    return PartitionView(view.timelines, None, by_resource, view.resources_if_sorted, waiting)


def _common(
    sources: tuple[str, ...], feeds: Mapping[str, EventFeed]
) -> tuple[dict[str, str], tuple[Any, ...], tuple[str, ...], frozenset[str]]:
    """The events' labels (the first one's text wins; `resource` is each target's own), holders,
    their names, and those that never fetched (their targets stay on hold, as build_published decides)."""
    labels = {"resource": ""}
    holders = []
    for name in sources:
        feed = feeds[name]
        for label, text in feed.labels.items():
            labels.setdefault(label, text)
        if feed.holder is not None:
            holders.append((feed.holder, name))
    del labels["resource"]
    never = frozenset(n for h, n in holders if h.health.last_success is None)
    return labels, tuple(h for h, _ in holders), tuple(n for _, n in holders), never


_ABSENT: Any = object()
_NO_GROUPS: immutables.Map[int, Mapping[str, Target | None]] = immutables.Map()
_NOWHERE: immutables.Map[str, int] = immutables.Map()


class LayeredTargets(Mapping[str, Target]):
    """resource -> Target: a large base shared with earlier snapshots, and the changes on top.

    The base is the plain dict a full build made. The changes come in groups: each piece of an
    item-snapshot rebuild is one group (a dict of its targets; None for a removed one), kept in a
    persistent map (`immutables.Map`, a hash array mapped trie) by group number, with a second
    one saying which group holds each changed resource. A source's next snapshot rebuilds the same
    pieces, so it replaces whole groups: one entry set in the map per 500 targets. Setting each
    target in the trie instead cost about 4 ms of the event loop per 1 000-target snapshot with
    100 000 targets loaded, and as long again to free the nodes it replaced. Nothing is folded
    into a fresh 100 000-entry dict either (one such fold stalled the loop for 45-48 ms).

    Invariant: every resource in a group's dict is held by that group (`_where`); a resource that
    moves to another group leaves its old group's dict."""

    __slots__ = ("_base", "_groups", "_where", "_next", "_len")

    def __init__(
        self,
        base: Mapping[str, Target],
        groups: immutables.Map[int, Mapping[str, Target | None]],
        where: immutables.Map[str, int],
        next_group: int,
        length: int,
    ):
        self._base, self._groups, self._where, self._next, self._len = base, groups, where, next_group, length

    @staticmethod
    def on(
        previous: Mapping[str, Target], changed: Mapping[str, Target], removed: set[str], length: int | None = None
    ) -> Mapping[str, Target]:
        """`previous` with `changed` set and `removed` gone; `length`, when the caller knows it, is the
        result's (else it is counted from the changes: never by a scan of everything changed so far)."""
        if length is None:
            length = len(previous) + sum(1 for r in changed if r not in previous)
            length -= sum(1 for r in removed if r in previous and r not in changed)
        if isinstance(previous, LayeredTargets):
            base, groups, where, next_group = previous._base, previous._groups, previous._where, previous._next
        else:
            base, groups, where, next_group = previous, _NO_GROUPS, _NOWHERE, 0
        entries: dict[str, Target | None] = dict(changed)
        gone: list[str] = []  # removed resources the base does not have: they leave their group
        for resource in removed:
            if resource in changed:
                continue
            if resource in base:
                entries[resource] = None
            elif resource in where:
                gone.append(resource)
        if not entries and not gone:
            return LayeredTargets(base, groups, where, next_group, length)
        if not gone:
            # The usual case: the same targets as a group already holds (the same source's same
            # piece, again): replace that group whole.
            held = where.get(next(iter(entries)))
            if held is not None and groups[held].keys() == entries.keys():
                return LayeredTargets(base, groups.set(held, entries), where, next_group, length)
        # Other targets than any one group holds: a group of their own, and their old groups lose them.
        leaving: dict[int, list[str]] = {}
        for resource in (*entries, *gone):
            held = where.get(resource)
            if held is not None:
                leaving.setdefault(held, []).append(resource)
        with groups.mutate() as new_groups, where.mutate() as new_where:
            for held, resources in leaving.items():
                group = dict(groups[held])
                for resource in resources:
                    del group[resource]
                if group:
                    new_groups[held] = group
                else:
                    del new_groups[held]
            for resource in gone:
                del new_where[resource]
            if entries:
                new_groups[next_group] = entries
                for resource in entries:
                    new_where[resource] = next_group
            groups, where = new_groups.finish(), new_where.finish()
        return LayeredTargets(base, groups, where, next_group + 1, length)

    def group_of(self, resources: Collection[str]) -> Mapping[str, Target | None] | None:
        """The group holding exactly `resources`, if one does (its removed targets map to None):
        their lookups without a walk of the trie each."""
        if not resources:
            return None
        held = self._where.get(next(iter(resources)))
        if held is None:
            return None
        group = self._groups[held]
        return group if group.keys() == resources else None

    def _entry(self, resource: str) -> Any:
        held = self._where.get(resource)
        if held is None:
            return self._base.get(resource, _ABSENT)
        target = self._groups[held][resource]
        return _ABSENT if target is None else target

    def __getitem__(self, resource: str) -> Target:
        target = self._entry(resource)
        if target is _ABSENT:
            raise KeyError(resource)
        return target  # type: ignore[no-any-return]

    def get(self, resource: str, default: Any = None) -> Any:
        target = self._entry(resource)
        return default if target is _ABSENT else target

    def __contains__(self, resource: object) -> bool:
        if not isinstance(resource, str):
            return False
        return self._entry(resource) is not _ABSENT

    def __iter__(self) -> Iterator[str]:
        where = self._where
        for resource in self._base:
            if resource not in where:
                yield resource
        for group in self._groups.values():
            for resource, target in group.items():
                if target is not None:
                    yield resource

    def __len__(self) -> int:
        return self._len
