"""Publishing: coalesce changes and turn them into the next `Published` snapshot.

Two kinds of change arrive. An object change (a VirtualMetric or an event's entries) rebuilds whole
(metric, namespace) partitions; that numpy-heavy build runs in a thread. An item snapshot of one
source rebuilds only the targets it touches, on the event loop, a few thousand targets at a time with
queries answered in between: in a thread this Python-level work would make every request wait for the
GIL behind it (a busy thread takes the GIL back for a whole switch interval each time the loop's I/O
lets go of it). Bursts of changes are coalesced by a short delay; a publication in progress picks up
whatever arrived meanwhile before it ends.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Generator, Mapping

from adapter import heap
from adapter import observability as obs
from adapter.handoff import LoopHandOff
from adapter.pipeline.contributions import Partition
from adapter.pipeline.incremental import publish_changes, publish_targets_in_steps, split_targets
from adapter.pipeline.objects import MetricNames, ObjectTable, resolve_metric_names
from adapter.pipeline.publish import EMPTY, EventFeed, Published

# Item snapshots are rebuilt on the event loop and published in pieces of this many targets; a target
# with many intervals counts as one per INTERVALS_PER_TARGET of them. A piece is built in three steps
# (see update_targets_in_steps) of 1-2 ms with 100 000 targets loaded, and the loop answers requests
# as long again after each step. Measured per 1 000-target snapshot, in-process: pieces of 100 built
# in one go cost 14 ms of loop time (most of it fixed per piece: numpy's cost per call, the layered
# map's copy, since gone) and served the last of its targets 67 ms after the snapshot; pieces of 500 in steps
# cost 7.5 ms and serve it all within 41 ms (250: 9 ms, 52 ms).
INLINE_TARGETS = 500
# A publication that fails (a bug, or memory running out) leaves the previous snapshot served and is
# retried as a full rebuild after this many seconds, doubled per consecutive failure up to the cap.
RETRY_DELAY = 1.0
MAX_RETRY_DELAY = 60.0

log = logging.getLogger("prescaler.publisher")
INTERVALS_PER_TARGET = 10


def _weigher(by_name: Mapping[str, EventFeed], events: Collection[str]) -> Callable[[Partition, str], int] | None:
    """How many units each target of an item snapshot counts for (see split_targets); None when every
    target counts as one."""
    heavy: dict[tuple[str, str, str], int] = {}  # only the keys with many intervals: a small dict
    for feed in (by_name[name] for name in events if name in by_name):
        for key, arrays in feed.contributions.items():
            if len(arrays[0]) >= INTERVALS_PER_TARGET:
                heavy[key] = heavy.get(key, 0) + len(arrays[0])
    if not heavy:
        return None

    def weight(partition: Partition, resource: str) -> int:
        return 1 + heavy.get((partition[0], partition[1], resource), 0) // INTERVALS_PER_TARGET

    return weight


async def _run_in_steps(steps: Generator[None, None, Published], handoff: LoopHandOff) -> tuple[Published, float]:
    """Drive a stepped build on the loop: after each step but the last, requests being answered get
    as much time as it took. Returns the result and how long the last step took (the caller pauses
    after it, or not)."""
    while True:
        started = time.perf_counter()
        try:
            with heap.no_collection():
                next(steps)
        except StopIteration as done:
            return done.value, time.perf_counter() - started
        await asyncio.sleep(handoff.pause_after(time.perf_counter() - started))


class Publisher:
    def __init__(
        self,
        table: ObjectTable,
        clock: Callable[[], float],
        handoff: LoopHandOff,
        on_published: Callable[[], None],
        rebuild_delay: float,
        snapshot_delay: float,
    ):
        self.table, self.clock, self.handoff, self.on_published = table, clock, handoff, on_published
        self.rebuild_delay = rebuild_delay
        # An item snapshot rebuilds only its targets (milliseconds), so it waits less to coalesce.
        self.snapshot_delay = min(snapshot_delay, rebuild_delay)
        self.published: Published = EMPTY
        self.names = MetricNames({}, {})
        self._handle: asyncio.TimerHandle | None = None
        self._running = False
        self._changed = False
        self._partitions: set[Partition] | None = None  # partitions to rebuild; None: everything
        # Targets to rebuild one by one (item snapshots), and the events whose items changed.
        self._targets: dict[Partition, set[str]] = {}
        self._events: set[str] = set()
        self.failures = 0  # consecutive failed publications

    @property
    def busy(self) -> bool:  # a change is waiting to be published
        return self._changed or self._running or self._handle is not None

    def everything(self, delay: float | None = None) -> None:
        self.partitions(None, delay)

    def partitions(self, partitions: set[Partition] | None, delay: float | None = None) -> None:
        """Rebuild these partitions (None: all of them) soon."""
        self._changed = True
        self._partitions = None if partitions is None or self._partitions is None else self._partitions | partitions
        if self.handoff.loop is not None and self._handle is None and not self._running:
            self._handle = self.handoff.loop.call_later(self.rebuild_delay if delay is None else delay, self._start)

    def targets(self, targets: Mapping[Partition, Collection[str]], events: Collection[str]) -> None:
        """Rebuild these targets, whose contributions from `events` changed, soon."""
        for partition, resources in targets.items():
            self._targets.setdefault(partition, set()).update(resources)
        self._events.update(events)
        self.partitions(set(), self.snapshot_delay)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()

    def _start(self) -> None:
        self._handle = None
        asyncio.get_running_loop().create_task(self.publish_now())

    async def publish_now(self) -> None:
        """Publish every pending change (coalesces concurrent calls)."""
        if self._running:
            return
        self._running = True
        try:
            while self.handoff.pending and self.handoff.loop is not None:
                await asyncio.sleep(self.snapshot_delay)  # a list of objects is being applied: all of it
            while self._changed and not self.handoff.pending:
                events: Collection[str] = ()
                try:
                    partitions, self._partitions, self._changed = self._partitions, set(), False
                    targets, events, self._targets, self._events = self._targets, self._events, {}, set()
                    self.names = resolve_metric_names(self.table.metrics.values(), self.names)
                    started = time.perf_counter()
                    feeds, by_name = self.table.feeds(), self.table.feed_map()
                    if partitions is not None and not partitions:  # only items changed: on the loop, in pieces
                        pieces = split_targets(targets, INLINE_TARGETS, _weigher(by_name, events))
                        for number, piece in enumerate(pieces, 1):
                            self.published, spent = await _run_in_steps(
                                publish_targets_in_steps(
                                    self.names.served, feeds, by_name, self.clock(), self.published, piece, events
                                ),
                                self.handoff,
                            )
                            if number < len(pieces):
                                heap.after_publish()
                                await asyncio.sleep(self.handoff.pause_after(spent))
                    else:  # whole partitions: the numpy-heavy build runs off the loop
                        self.published = await asyncio.to_thread(
                            publish_changes,
                            self.names.served,
                            feeds,
                            self.clock(),
                            self.published,
                            partitions,
                            targets,
                            events,
                        )
                    heap.after_publish()
                    obs.record_rebuild(time.perf_counter() - started, self.published.key_count())
                    self.on_published()
                except Exception as exc:  # noqa: BLE001 - whatever broke, the served values must stay
                    self._failed(exc, events)
                    break
                self.failures = 0
        finally:
            self._running = False
            if self._changed:  # left for a list being applied (see above): publish it when whole
                self.partitions(set(), self._retry_delay() if self.failures else None)

    def _failed(self, exc: Exception, events: Collection[str]) -> None:
        self.failures += 1
        obs.record_rebuild_failure()
        # Some pieces may be published already: the retry rebuilds everything, from the objects.
        self._changed, self._partitions = True, None
        log.error(
            "publishing new values failed (%s: %s; changed items of: %s); the previous values stay served, "
            "retrying in %.0f s",
            type(exc).__name__,
            exc,
            ", ".join(sorted(events)[:10]) or "objects changed",
            self._retry_delay(),
            exc_info=exc,
        )

    def _retry_delay(self) -> float:
        return min(MAX_RETRY_DELAY, RETRY_DELAY * 2 ** max(0, self.failures - 1))
