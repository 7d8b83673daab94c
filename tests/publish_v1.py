"""`build_published` as it was before the run-based gathering (issue 12), kept as a reference: tests
check that the current one publishes the same targets, labels (in the same order), holders, sources
and values. Not used by the server."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

import numpy as np

from adapter.pipeline.contributions import Key, Partition
from adapter.pipeline.publish import REBUILD_WORKERS, EventFeed, PartitionView, Published, Target
from adapter.resources import VirtualMetric
from adapter.sources.runner import SourceRunner
from adapter.timeline import ContributionArrays, build_timelines


def build_published_v1(
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
