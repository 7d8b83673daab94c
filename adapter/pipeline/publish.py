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

    `targets` is made on first use when not given: the HPA's query looks up `by_resource`, and a
    snapshot of one source must not pay for listing 100 000 targets it did not change."""

    __slots__ = ("timelines", "by_resource", "resources", "waiting", "_targets")

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
        # The targets' names, sorted (the order of `targets`).
        self.resources = resources if resources is not None else tuple(sorted(by_resource))
        self._targets = targets

    @property
    def targets(self) -> tuple[Target, ...]:
        if self._targets is None:
            self._targets = tuple(self.by_resource[r] for r in self.resources)
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
    keys: list[Key] = []
    index: dict[Key, int] = {}
    labels: list[dict[str, str]] = []
    holders: list[list[tuple[SourceRunner, str]]] = []
    sources: list[list[str]] = []
    # Contribution arrays and their key indexes, gathered first and joined once (not one small
    # ContributionArrays per key: 100 000 keys made that the slowest part of a build).
    part_keys: list[int] = []
    part_counts: list[int] = []
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    values: list[np.ndarray] = []

    def key_index(key: Key) -> int:
        k = index.get(key)
        if k is None:
            k = index[key] = len(keys)
            keys.append(key)
            labels.append({"resource": key[2]})
            holders.append([])
            sources.append([])
        return k

    for event in events:
        touched: set[int] = set()
        for entry in event.entries:
            if entry.metric in metrics and entry.name is not None and (wanted is None or entry.partition in wanted):
                touched.add(key_index((entry.metric, entry.namespace, entry.name)))
        for key, (start, end, value) in event.contributions.items():
            if key[0] not in metrics or (wanted is not None and key[:2] not in wanted):
                continue
            k = key_index(key)
            touched.add(k)
            part_keys.append(k)
            part_counts.append(len(start))
            starts.append(start)
            ends.append(end)
            values.append(value)
        for k in touched:
            sources[k].append(event.name)
            for label, text in event.labels.items():
                labels[k].setdefault(label, text)
            if event.holder is not None:
                holders[k].append((event.holder, event.name))
    names = sorted(metrics)
    position = {name: i for i, name in enumerate(names)}
    table = [metrics[n].policy for n in names]
    policy_index = np.fromiter((position[metric] for metric, _, _ in keys), np.int64, len(keys))
    contributions = (
        ContributionArrays(
            np.repeat(np.asarray(part_keys, np.int64), part_counts),
            np.concatenate(starts),
            np.concatenate(ends),
            np.concatenate(values),
        )
        if part_keys
        else ContributionArrays.empty()
    )
    timelines = build_timelines(list(keys), table, contributions, policy_index=policy_index, workers=REBUILD_WORKERS)
    grouped: dict[Partition, list[Target]] = {}
    never_fetched = {
        event.name for event in events if event.holder is not None and event.holder.health.last_success is None
    }
    for k, (metric, ns, resource) in enumerate(keys):
        names_k = tuple(n for _, n in holders[k])
        grouped.setdefault((metric, ns), []).append(
            Target(
                resource,
                k,
                labels[k],
                tuple(h for h, _ in holders[k]),
                names_k,
                timelines,
                tuple(sources[k]),
                frozenset(n for n in names_k if n in never_fetched),
            )
        )
    waiting: dict[Partition, list[tuple[SourceRunner, str]]] = {}
    for event in events:
        if event.name in never_fetched and event.holder is not None:
            for entry in event.entries:
                if entry.name is None and entry.metric in metrics and (wanted is None or entry.partition in wanted):
                    waiting.setdefault(entry.partition, []).append((event.holder, event.name))
                    grouped.setdefault(entry.partition, [])
    partitions: dict[Partition, PartitionView] = {}
    if reuse and previous is not None and wanted is not None:
        partitions.update((p, view) for p, view in previous.partitions.items() if p not in wanted)
    for partition, targets in grouped.items():
        targets.sort(key=lambda t: t.resource)
        partitions[partition] = PartitionView(
            timelines,
            tuple(targets),
            {t.resource: t for t in targets},
            tuple(t.resource for t in targets),
            tuple(dict.fromkeys(waiting.get(partition, ()))),
        )
    return Published(dict(metrics), partitions, now)
