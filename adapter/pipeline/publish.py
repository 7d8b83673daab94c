"""Contributions -> Published: the immutable snapshot that queries read.

The snapshot is partitioned by (metric, namespace). A rebuild may be limited to the partitions a
change touches (`dirty`): every other partition of the previous snapshot is reused as the same
object, so a new item snapshot of one source costs a build of its own partitions only. Partitions
rebuilt together share one vectorised timeline build.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat
from operator import itemgetter
from typing import Any, NamedTuple

import numpy as np

from adapter.pipeline.contributions import Arrays, EntryPlan, EntrySummary, Key, Partition
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
    # EntrySummary.of(entries), when the caller keeps one (the engine does: 100 000 entries per build).
    entry_summary: EntrySummary | None = None

    def summary(self) -> EntrySummary:
        return self.entry_summary if self.entry_summary is not None else EntrySummary.of(self.entries)

    @property
    def partitions(self) -> set[Partition]:
        """Every partition this event can contribute to (a label-named target stays in its entry's)."""
        return set(self.summary().partitions)

    @functools.cached_property
    def touches(self) -> Mapping[Partition, frozenset[str]]:
        """The targets this event names or contributes to, by partition. Made once per feed: a
        publication rebuilds its targets in pieces, and each piece asks."""
        out: dict[Partition, set[str]] = {}
        for metric, namespace, resource in (*self.summary().named, *self.contributions):
            out.setdefault((metric, namespace), set()).add(resource)
        return {partition: frozenset(resources) for partition, resources in out.items()}

    def reuse_touches(self, previous: EventFeed | None) -> None:
        """Take `previous`'s `touches` when it is worked out and holds here too: the same entries (one
        summary object) and the same contribution keys, as when a source's next snapshot changes only
        values (working them out again cost about a millisecond per 1 000 targets)."""
        if (
            previous is not None
            and previous.knows_touches()
            and self.entry_summary is not None
            and previous.entry_summary is self.entry_summary
            and previous.contributions.keys() == self.contributions.keys()
        ):
            self.__dict__["touches"] = previous.touches

    def knows_touches(self) -> bool:
        """`touches` is worked out already (a cached_property keeps its value in the instance)."""
        return "touches" in self.__dict__


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
    def resources_if_sorted(self) -> tuple[str, ...] | None:
        """`resources` if already made, else None (a view with the same targets can pass it on
        without sorting them now)."""
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
        keys, table, gathered.contributions(), policy_index=policy_index, workers=REBUILD_WORKERS, index=gathered.index
    )
    never_fetched = {
        event.name for event in events if event.holder is not None and event.holder.health.last_success is None
    }
    grouped = _targets(gathered, events, never_fetched, timelines)
    waiting: dict[Partition, list[tuple[SourceRunner, str]]] = {}
    for event in events:
        if event.name in never_fetched and event.holder is not None:
            for entry in event.summary().by_label:
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


class _Gathered:
    """Keys in the order first seen, which events touch each (by position in the event list), and
    the contribution arrays of each (key index, (start, end, value)) in event order."""

    def __init__(self) -> None:
        self.keys: list[Key] = []
        self.index: dict[Key, int] = {}
        # The keys each event adds: (event position, first key, end, their partition or None when
        # the event's entries write to several). Keys come in these runs, so most per-key columns
        # are runs of one value.
        self.runs: list[tuple[int, int, int, Partition | None]] = []
        self.more_events: dict[int, list[int]] = {}  # events after the first that touch a key (few keys)
        self.part_keys: list[int] = []
        self.parts: list[Arrays] = []

    def add(
        self, position: int, partition: Partition | None, named: Sequence[Key], contributions: Mapping[Key, Arrays]
    ) -> None:
        """Event `position` names these keys and contributes these arrays: one dict operation per key."""
        index, keys = self.index, self.keys
        before = len(keys)
        touched: Mapping[Key, object] = contributions
        if named:  # the order keys are first seen in: named, then contributed
            touched = dict.fromkeys(named)
            touched.update(contributions)
        if index.keys().isdisjoint(touched):  # the usual case: only keys no earlier event touched
            index.update(zip(touched, range(before, before + len(touched))))
            keys.extend(touched)
        else:
            seen: list[int] = []  # keys of earlier events that this one touches too
            for key in touched:
                k = index.setdefault(key, len(keys))
                if k == len(keys):
                    keys.append(key)
                elif k < before:
                    seen.append(k)
            for k in seen:
                self.more_events.setdefault(k, []).append(position)
        if len(keys) > before:
            self.runs.append((position, before, len(keys), partition))
        self.part_keys.extend(map(index.__getitem__, contributions))
        self.parts.extend(contributions.values())

    def contributions(self) -> ContributionArrays:
        return join_contributions(self.part_keys, self.parts)


def join_contributions(part_keys: Sequence[int], parts: Sequence[Arrays]) -> ContributionArrays:
    """One set of columns for a timeline build: `parts[i]` belongs to key `part_keys[i]`. Targets
    named by the entries of one event with the same expression share their arrays
    (adapter.pipeline.contributions), so each distinct array is copied once and the columns are
    gathered from those (not 100 000 small copies)."""
    if not parts:
        return ContributionArrays.empty()
    counts = np.fromiter(map(len, map(itemgetter(0), parts)), np.int64, len(parts))
    key = np.repeat(np.asarray(part_keys, np.int64), counts)
    ids = list(map(id, parts))
    distinct = dict(zip(ids, parts))  # in order of first appearance
    if len(distinct) * 4 > len(parts):
        return ContributionArrays(key, *(np.concatenate(list(map(itemgetter(i), parts))) for i in range(3)))
    firsts = list(distinct.values())
    position = dict(zip(distinct, range(len(distinct))))
    which = np.fromiter(map(position.__getitem__, ids), np.int64, len(ids))
    lengths = np.fromiter(map(len, map(itemgetter(0), firsts)), np.int64, len(firsts))
    offset = np.concatenate([[0], np.cumsum(lengths)[:-1]])[which]
    ends = np.cumsum(counts)
    rows = np.repeat(offset - (ends - counts), counts) + np.arange(int(ends[-1]), dtype=np.int64)
    return ContributionArrays(key, *(np.concatenate(list(map(itemgetter(i), firsts)))[rows] for i in range(3)))


def _gather(metrics: Mapping[str, VirtualMetric], events: list[EventFeed], wanted: set[Partition] | None) -> _Gathered:
    out = _Gathered()
    for position, event in enumerate(events):
        summary = event.summary()
        partition = next(iter(summary.partitions)) if len(summary.partitions) == 1 else None
        if summary.metrics <= metrics.keys() and (wanted is None or summary.partitions <= wanted):
            out.add(position, partition, summary.named, event.contributions)  # nothing to leave out
            continue
        named = [key for key in summary.named if key[0] in metrics and (wanted is None or key[:2] in wanted)]
        contributions = {
            key: arrays
            for key, arrays in event.contributions.items()
            if key[0] in metrics and (wanted is None or key[:2] in wanted)
        }
        out.add(position, partition, named, contributions)
    return out


def _targets(
    gathered: _Gathered,
    events: list[EventFeed],
    never_fetched: set[str],
    timelines: TimelineSet,
) -> dict[Partition, dict[str, Target]]:
    """Every key's Target, by partition and resource. Keys touched by the same events share their
    holders, sources and extra labels: those are worked out once per combination of events, and
    the Targets are made column by column."""
    keys = gathered.keys
    if not keys:
        return {}
    shared = [_shared((position,), events, never_fetched) for position in range(len(events))]
    resources = list(map(itemgetter(2), keys))
    if gathered.more_events:  # a few keys touched by several events: one combination index per key
        which = list(chain.from_iterable(repeat(position, hi - lo) for position, lo, hi, _ in gathered.runs))
        known: dict[tuple[int, ...], int] = {}
        for k, more in gathered.more_events.items():
            touching = (which[k], *more)
            which[k] = known.setdefault(touching, len(shared))
            if which[k] == len(shared):
                shared.append(_shared(touching, events, never_fetched))

        def column(field: int) -> Iterable[Any]:
            return [shared[s][field] for s in which]

        labels_of: Iterable[Mapping[str, str]] = column(0)
    else:  # each key touched by one event: every column is a run per event

        def column(field: int) -> Iterable[Any]:
            return chain.from_iterable(
                repeat(shared[position][field], hi - lo) for position, lo, hi, _ in gathered.runs
            )

        labels_of = column(0)
    if any(s[0] for s in shared):
        labels = [{"resource": r, **extra} for r, extra in zip(resources, labels_of)]
    else:
        labels = [{"resource": r} for r in resources]
    columns = zip(resources, range(len(keys)), labels, column(1), column(2), repeat(timelines), column(3), column(4))
    targets = list(map(tuple.__new__, repeat(Target), columns))
    grouped: dict[Partition, dict[str, Target]] = {}
    for _, lo, hi, partition in gathered.runs:
        if partition is not None:
            grouped.setdefault(partition, {}).update(zip(resources[lo:hi], targets[lo:hi]))
        else:
            for k in range(lo, hi):
                grouped.setdefault(keys[k][:2], {})[resources[k]] = targets[k]
    return grouped


def _shared(
    touching: tuple[int, ...], events: list[EventFeed], never_fetched: set[str]
) -> tuple[dict[str, str], tuple[SourceRunner, ...], tuple[str, ...], tuple[str, ...], frozenset[str]]:
    """What the targets touched by these events (in event order) have in common: the events'
    labels (the first event's text wins; `resource` is each target's own), holders and names."""
    labels: dict[str, str] = {"resource": ""}
    holders: list[tuple[SourceRunner, str]] = []
    for position in touching:
        event = events[position]
        for label, text in event.labels.items():
            labels.setdefault(label, text)
        if event.holder is not None:
            holders.append((event.holder, event.name))
    del labels["resource"]
    names = tuple(n for _, n in holders)
    return (
        labels,
        tuple(h for h, _ in holders),
        names,
        tuple(events[position].name for position in touching),
        frozenset(n for n in names if n in never_fetched),
    )
