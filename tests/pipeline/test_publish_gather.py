"""build_published (keys gathered in runs, Targets made column by column, shared arrays copied once)
against the per-key build it replaced (tests/publish_v1.py), on random feeds: keys touched by
several events, events writing to several partitions, partial rebuilds, unknown metrics, holders."""

from __future__ import annotations

import random

import numpy as np

from adapter.pipeline.publish import EventFeed, Published, build_published
from tests.pipeline.test_pipeline_incremental import METRICS, NOW, Holder, random_feed
from tests.publish_v1 import build_published_v1


def _shared_arrays(rng: random.Random, feed: EventFeed, pool: list) -> EventFeed:
    """Most keys of the feed take one of a few arrays tuples shared by every feed (as the targets
    named by entries with the same expression share theirs)."""
    contributions = {
        key: rng.choice(pool) if rng.random() < 0.9 else arrays for key, arrays in feed.contributions.items()
    }
    return EventFeed(feed.name, feed.labels, feed.entries, contributions, feed.holder)


def _published_view(published: Published) -> dict:
    out = {}
    probe = NOW + np.arange(-200.0, 4000.0, 13.0)
    for partition, view in published.partitions.items():
        assert list(view.resources) == sorted(view.by_resource)
        assert [t.resource for t in view.targets] == list(view.resources)
        for t in view.targets:
            key = (*partition, t.resource)
            timelines = t.timeline_set(view)
            assert timelines.keys[t.key] == key
            out[key] = (
                list(t.labels.items()),
                t.holders,
                t.holder_names,
                t.sources,
                t.never_fetched,
                view.waiting,
                timelines.values_at(key, probe).tolist(),
            )
        out[partition] = view.waiting
    return out


def test_gathered_build_equals_the_per_key_build() -> None:
    rng = random.Random(2024)
    holders = [Holder(), Holder(fetched=False), None, None]
    for _ in range(120):
        feeds = [random_feed(rng, f"ev-{i}", rng.choice(holders)) for i in range(rng.randint(0, 7))]
        if rng.random() < 0.5:
            pool = [arrays for f in feeds for arrays in f.contributions.values()][:2]
            feeds = [_shared_arrays(rng, f, pool) for f in feeds] if pool else feeds
        feeds = [
            EventFeed(
                f.name, {"zone": "z", "resource": "not-its-name", **f.labels}, f.entries, f.contributions, f.holder
            )
            if rng.random() < 0.3
            else f
            for f in feeds
        ]
        metrics = dict(METRICS) if rng.random() < 0.8 else {"rps": METRICS["rps"]}
        dirty = None
        previous = None
        if rng.random() < 0.3:
            previous = build_published(metrics, feeds, NOW)
            dirty = {p for p in previous.partitions if rng.random() < 0.5} | {("rps", "b")}
        new = build_published(metrics, feeds, NOW, previous, dirty)
        old = build_published_v1(metrics, feeds, NOW, previous, dirty)
        assert set(new.partitions) == set(old.partitions)
        assert _published_view(new) == _published_view(old)
