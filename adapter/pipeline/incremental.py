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
    for partition, resources in targets.items():
        for resource in sorted(resources):
            units = 1 if weight is None else max(1, weight(partition, resource))
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
    # Which events touch each changed target now: the unchanged ones that did before, plus the
    # changed ones that name it or contribute to it (found from their side: no scan per target).
    changed_touch: dict[str, list[str]] = {}
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
        for resource in resources.intersection(feed.touches.get(partition, ())):
            changed_touch.setdefault(resource, []).append(name)
    touching: dict[str, list[str]] = {}
    known: set[str] = set()  # of `resources`, those `view` has
    for resource in resources:
        old = view.by_resource.get(resource)
        if old is not None:
            known.add(resource)
        names = [n for n in (old.sources if old is not None else ()) if n not in changed_events and n in feeds]
        names.extend(changed_touch.get(resource, ()))
        if names:
            touching[resource] = sorted(names)
    keys = [(metric_name, namespace, r) for r in touching]
    part_keys: list[int] = []
    parts: list[Arrays] = []
    for k, (key, touched_by) in enumerate(zip(keys, touching.values())):
        for name in touched_by:
            arrays = feeds[name].contributions.get(key)
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
    for k, (resource, touched_by) in enumerate(touching.items()):
        sources = tuple(touched_by)
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
_EMPTY_TOP: immutables.Map[str, Target | None] = immutables.Map()


class LayeredTargets(Mapping[str, Target]):
    """resource -> Target: a large base shared with earlier snapshots, and the changes on top.

    The base is the plain dict a full build made; the changes are a persistent map
    (`immutables.Map`, a hash array mapped trie), so a snapshot of one source sets its thousand
    targets in a new version of the map that shares everything else with the old one: no copy of
    the changes made so far (a dict on top had to be copied for every snapshot: up to 25 000
    entries), and no fold of the changes into a fresh 100 000-entry dict on the event loop (one
    such fold, with the old base's release, stalled the loop for 45-48 ms). A removed target's
    entry on top is None."""

    __slots__ = ("_base", "_top", "_len")

    def __init__(self, base: Mapping[str, Target], top: immutables.Map[str, Target | None], length: int):
        self._base, self._top, self._len = base, top, length

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
            base, top = previous._base, previous._top
        else:
            base, top = previous, _EMPTY_TOP
        with top.mutate() as changes:
            changes.update(changed)
            for resource in removed:
                if resource in base:
                    changes[resource] = None
                else:
                    changes.pop(resource, None)
            top = changes.finish()
        return LayeredTargets(base, top, length)

    def __getitem__(self, resource: str) -> Target:
        target = self._top.get(resource, _ABSENT)
        if target is _ABSENT:
            return self._base[resource]
        if target is None:
            raise KeyError(resource)
        return target  # type: ignore[return-value]

    def get(self, resource: str, default: Any = None) -> Any:
        target = self._top.get(resource, _ABSENT)
        if target is _ABSENT:
            return self._base.get(resource, default)
        return default if target is None else target

    def __contains__(self, resource: object) -> bool:
        if not isinstance(resource, str):
            return False
        target = self._top.get(resource, _ABSENT)
        return resource in self._base if target is _ABSENT else target is not None

    def __iter__(self) -> Iterator[str]:
        top = self._top
        for resource in self._base:
            if resource not in top:
                yield resource
        for resource, target in top.items():
            if target is not None:
                yield resource

    def __len__(self) -> int:
        return self._len
