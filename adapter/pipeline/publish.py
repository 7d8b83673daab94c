"""Contributions -> Published: the immutable snapshot that queries read.

The snapshot is partitioned by (metric, namespace). A rebuild may be limited to the partitions a
change touches (`dirty`): every other partition of the previous snapshot is reused as the same
object, so a new item snapshot of one source costs a build of its own partitions only. Partitions
rebuilt together share one vectorised timeline build.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from adapter.pipeline.contributions import Arrays, EntryPlan, Key, Partition
from adapter.resources import VirtualMetric
from adapter.sources.runner import SourceRunner
from adapter.timeline import ContributionArrays, TimelineSet, build_timelines

# Large rebuilds split across threads (numpy releases the GIL); the machines have 2 cores.
REBUILD_WORKERS = min(2, os.cpu_count() or 1)


@dataclass(frozen=True)
class EventFeed:
    """What publishing needs of one loaded VirtualMetricEvent."""

    name: str
    labels: Mapping[str, str]
    entries: Sequence[EntryPlan]
    contributions: Mapping[Key, Arrays]
    # The runner when its source holds stale values back (onStale: Hold), else None.
    holder: SourceRunner | None = None

    @property
    def partitions(self) -> set[Partition]:
        """Every partition this event can contribute to (a label-named target stays in its entry's)."""
        return {e.partition for e in self.entries}


class Target(NamedTuple):
    """One served target. A named tuple: a snapshot of one source rebuilds a thousand of these, and
    a frozen dataclass took several times as long to make."""

    resource: str
    key: int  # index in `timelines` (the partition's TimelineSet unless updated on its own)
    labels: Mapping[str, str]
    holders: tuple[SourceRunner, ...] = ()
    holder_names: tuple[str, ...] = ()
    # The timelines this target's value is read from: a target updated by a key-level rebuild
    # (adapter.pipeline.incremental) points at a small set of its own.
    timelines: TimelineSet | None = None
    sources: tuple[str, ...] = ()  # every event that names this target or contributes to it, by name
    # Holders that had never fetched successfully when this snapshot was built: their targets are on
    # hold until a snapshot built after the first success (which always triggers a rebuild), so a
    # fetch that succeeds mid-rebuild never lets the default through.
    never_fetched: frozenset[str] = frozenset()

    def timeline_set(self, partition: PartitionView) -> TimelineSet:
        return self.timelines if self.timelines is not None else partition.timelines


class PartitionView:
    """The targets of one (metric, namespace), by resource name and sorted by it (immutable).

    `targets` and `resources` are made on first use when not given: the HPA's query looks up
    `by_resource`, and neither a snapshot of one source nor a full rebuild should pay for listing
    100 000 targets that no query may list."""

    __slots__ = ("timelines", "by_resource", "waiting", "_resources", "_targets")

    def __init__(
        self,
        timelines: TimelineSet,
        targets: tuple[Target, ...] | None,
        by_resource: Mapping[str, Target],
        resources: tuple[str, ...] | None = None,
        waiting: tuple[tuple[SourceRunner, str], ...] = (),
    ):
        self.timelines = timelines  # may be shared with partitions rebuilt at the same time
        self.by_resource = by_resource
        # Sources (onStale: Hold) that name targets from item labels and never fetched successfully: a
        # target not known yet may be one of theirs, so it is on hold too instead of getting the default.
        self.waiting = waiting
        self._resources = resources
        self._targets = targets

    @property
    def resources(self) -> tuple[str, ...]:
        """The targets' names, sorted (the order of `targets`); sorted on first use, like `targets`:
        only listing queries need the order, and sorting 100 000 names is a tenth of a full build."""
        if self._resources is None:
            self._resources = tuple(sorted(self.by_resource))
        return self._resources

    @property
    def targets(self) -> tuple[Target, ...]:
        if self._targets is None:
            by_resource = self.by_resource
            self._targets = tuple(by_resource[r] for r in self.resources)
        return self._targets


@dataclass(frozen=True)
class Published:
    """An immutable view for queries; replaced as a whole after each rebuild."""

    metrics: Mapping[str, VirtualMetric] = field(default_factory=dict)  # by served metric name
    partitions: Mapping[Partition, PartitionView] = field(default_factory=dict)
    built_at: float = 0.0

    def target_count(self, metric: str) -> int:
        return sum(len(p.by_resource) for (m, _), p in self.partitions.items() if m == metric)

    def key_count(self) -> int:
        return sum(len(p.by_resource) for p in self.partitions.values())


EMPTY = Published()


def build_published(
    metrics: Mapping[str, VirtualMetric],
    events: Iterable[EventFeed],
    now: float,
    previous: Published | None = None,
    dirty: Collection[Partition] | None = None,
) -> Published:
    """The snapshot for `metrics` (by served name) and the loaded events.

    With `previous` and `dirty`, only the dirty partitions are rebuilt; the caller guarantees that
    nothing else changed since `previous` (same metrics, same contributions elsewhere)."""
    events = list(events)
    reuse = previous is not None and dirty is not None
    wanted: set[Partition] | None = None
    if reuse:
        wanted = {p for p in (dirty or ()) if p[0] in metrics}
    gathered = _gather(metrics, events, wanted)
    keys = gathered.keys
    names = sorted(metrics)
    table = [metrics[n].policy for n in names]
    if len(names) == 1:
        policy_index = np.zeros(len(keys), np.int64)
    else:
        position = {name: i for i, name in enumerate(names)}
        policy_index = np.array([position[key[0]] for key in keys], dtype=np.int64)
    timelines = build_timelines(
        keys, table, gathered.contributions(), policy_index=policy_index, workers=REBUILD_WORKERS
    )
    never_fetched = {
        event.name for event in events if event.holder is not None and event.holder.health.last_success is None
    }
    grouped = _targets(keys, gathered, events, never_fetched, timelines)
    waiting: dict[Partition, list[tuple[SourceRunner, str]]] = {}
    for event in events:
        if event.name in never_fetched and event.holder is not None:
            for entry in event.entries:
                if entry.name is None and entry.metric in metrics and (wanted is None or entry.partition in wanted):
                    waiting.setdefault(entry.partition, []).append((event.holder, event.name))
                    grouped.setdefault(entry.partition, {})
    partitions: dict[Partition, PartitionView] = {}
    if reuse and previous is not None and wanted is not None:
        partitions.update((p, view) for p, view in previous.partitions.items() if p not in wanted)
    for partition, by_resource in grouped.items():
        partitions[partition] = PartitionView(
            timelines, None, by_resource, None, tuple(dict.fromkeys(waiting.get(partition, ())))
        )
    return Published(dict(metrics), partitions, now)


@dataclass
class _Gathered:
    """Keys in the order first seen, which events touch each (by position in the event list), and
    the contribution arrays of each (key index, (start, end, value)) in event order."""

    keys: list[Key] = field(default_factory=list)
    first_event: list[int] = field(default_factory=list)  # the first event that touches each key
    more_events: dict[int, list[int]] = field(default_factory=dict)  # later ones, for the few keys with any
    part_keys: list[int] = field(default_factory=list)
    parts: list[Arrays] = field(default_factory=list)

    def contributions(self) -> ContributionArrays:
        """One set of columns for the timeline build (joined once, not one small array set per key)."""
        parts = self.parts
        if not parts:
            return ContributionArrays.empty()
        counts = [len(p[0]) for p in parts]
        return ContributionArrays(
            np.repeat(np.asarray(self.part_keys, np.int64), counts),
            np.concatenate([p[0] for p in parts]),
            np.concatenate([p[1] for p in parts]),
            np.concatenate([p[2] for p in parts]),
        )


def _gather(metrics: Mapping[str, VirtualMetric], events: list[EventFeed], wanted: set[Partition] | None) -> _Gathered:
    out = _Gathered()
    keys, first_event, more_events = out.keys, out.first_event, out.more_events
    part_keys, parts = out.part_keys, out.parts
    index: dict[Key, int] = {}
    for position, event in enumerate(events):
        before = len(keys)  # keys from index `before` on are new with this event
        seen: set[int] = set()  # keys of earlier events that this one touches too
        for entry in event.entries:
            if entry.metric in metrics and entry.name is not None and (wanted is None or entry.partition in wanted):
                key = (entry.metric, entry.namespace, entry.name)
                k = index.setdefault(key, len(keys))
                if k == len(keys):
                    keys.append(key)
                    first_event.append(position)
                elif k < before:
                    seen.add(k)
        for key, arrays in event.contributions.items():
            if key[0] not in metrics or (wanted is not None and key[:2] not in wanted):
                continue
            k = index.setdefault(key, len(keys))
            if k == len(keys):
                keys.append(key)
                first_event.append(position)
            elif k < before:
                seen.add(k)
            part_keys.append(k)
            parts.append(arrays)
        for k in seen:
            more_events.setdefault(k, []).append(position)
    return out


def _targets(
    keys: list[Key],
    gathered: _Gathered,
    events: list[EventFeed],
    never_fetched: set[str],
    timelines: TimelineSet,
) -> dict[Partition, dict[str, Target]]:
    """Every key's Target, by partition and resource. Keys touched by the same events share their
    holders, sources and extra labels, so those are worked out once per combination of events."""
    shared: dict[
        tuple[int, ...],
        tuple[dict[str, str], tuple[SourceRunner, ...], tuple[str, ...], tuple[str, ...], frozenset[str]],
    ] = {}

    def common(
        touching: tuple[int, ...],
    ) -> tuple[dict[str, str], tuple[SourceRunner, ...], tuple[str, ...], tuple[str, ...], frozenset[str]]:
        found = shared.get(touching)
        if found is None:
            labels: dict[str, str] = {"resource": ""}
            holders: list[tuple[SourceRunner, str]] = []
            for position in touching:
                event = events[position]
                for label, text in event.labels.items():
                    labels.setdefault(label, text)
                if event.holder is not None:
                    holders.append((event.holder, event.name))
            del labels["resource"]  # each target's own name comes first and wins
            names = tuple(n for _, n in holders)
            found = shared[touching] = (
                labels,
                tuple(h for h, _ in holders),
                names,
                tuple(events[position].name for position in touching),
                frozenset(n for n in names if n in never_fetched),
            )
        return found

    grouped: dict[Partition, dict[str, Target]] = {}
    more_events = gathered.more_events
    new = tuple.__new__
    current: tuple[str, str] | None = None
    members: dict[str, Target] = {}
    for k, (key, first) in enumerate(zip(keys, gathered.first_event)):
        more = more_events.get(k)
        labels, holders, holder_names, sources, never = common((first, *more) if more else (first,))
        metric, namespace, resource = key
        if (metric, namespace) != current:
            current = (metric, namespace)
            members = grouped.setdefault(current, {})
        members[resource] = new(
            Target,
            (
                resource,
                k,
                {"resource": resource, **labels} if labels else {"resource": resource},
                holders,
                holder_names,
                timelines,
                sources,
                never,
            ),
        )
    return grouped
