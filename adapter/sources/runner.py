"""Runs one source: polls it, keeps its latest snapshot, tracks health and staleness (DESIGN §6).

- Each successful fetch replaces the snapshot (re-announcing never double-counts; ids dedupe).
- A failed fetch keeps the previous snapshot: announced work is still coming.
- After `staleAfter` without a success (counted from the start when there never was one) the
  source is stale; what that means for queries (Hold -> 503, UseKnown) is the engine's business.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from adapter import observability as obs
from adapter.errors import SourceError
from adapter.items import Item, dedupe
from adapter.sources.base import Source

log = logging.getLogger("prescaler.sources")

MAX_ITEMS_PER_SNAPSHOT = 200_000


@dataclass
class SourceHealth:
    started_at: float
    last_attempt: float | None = None
    last_success: float | None = None
    last_error: str | None = None
    consecutive_failures: int = 0
    item_count: int = 0
    warnings: list[str] = field(default_factory=list)


class SourceRunner:
    def __init__(self, owner: str, source: Source, on_snapshot: Callable[[str, list[Item]], None],
                 clock: Callable[[], float] = time.time, on_health: Callable[[str], None] | None = None):
        self.owner = owner  # the VirtualMetricEvent name, for logs and metrics
        self.source = source
        self._on_snapshot = on_snapshot
        self._on_health = on_health
        self._clock = clock
        self.health = SourceHealth(started_at=clock())
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    # ---------------------------------------------------------------- state

    def is_stale(self, now: float) -> bool:
        if self.source.never_stale:
            return False
        reference = self.health.last_success if self.health.last_success is not None else self.health.started_at
        return now - reference > self.source.common.stale_after

    def stale_at(self) -> float:
        """When the source turns stale if no fetch succeeds before then."""
        if self.source.never_stale:
            return math.inf
        reference = self.health.last_success if self.health.last_success is not None else self.health.started_at
        return reference + self.source.common.stale_after

    @property
    def on_stale(self) -> str:
        return self.source.common.on_stale

    # ---------------------------------------------------------------- fetching

    async def fetch_once(self) -> bool:
        """One fetch; publishes the snapshot on success. Never raises for source failures."""
        now = self._clock()
        self.health.last_attempt = now
        kind = self.source.kind
        started = time.perf_counter()
        try:
            # Sources that do more than one request or CPU work (forecast) declare their own deadline.
            deadline = getattr(self.source, "fetch_deadline", None) or self.source.common.timeout + 1.0
            items = await asyncio.wait_for(self.source.fetch(now), timeout=deadline)
            if len(items) > MAX_ITEMS_PER_SNAPSHOT:
                raise SourceError(f"source returned {len(items)} items, more than {MAX_ITEMS_PER_SNAPSHOT}")
        except asyncio.CancelledError:
            raise
        except (SourceError, TimeoutError) as exc:
            message = str(exc) or f"timed out after {self.source.common.timeout:g}s"
            self._failed(message, kind)
            return False
        except Exception as exc:
            log.exception("source of VirtualMetricEvent %s crashed", self.owner)
            self._failed(f"internal error in {kind} source: {type(exc).__name__}: {exc}", kind)
            return False
        finally:
            obs.SOURCE_FETCH_SECONDS.labels(kind=kind).observe(time.perf_counter() - started)
        items = dedupe(list(items))
        self.health.last_success = self._clock()
        self.health.last_error = None
        self.health.consecutive_failures = 0
        self.health.item_count = len(items)
        self.health.warnings = list(getattr(self.source, "last_warnings", []) or [])[:20]
        obs.record_fetch(self.owner, kind, success=True)
        obs.SOURCE_LAST_SUCCESS.labels(event=self.owner).set(self.health.last_success)
        self._on_snapshot(self.owner, items)
        if self._on_health:
            self._on_health(self.owner)
        return True

    def _failed(self, message: str, kind: str) -> None:
        self.health.last_error = message
        self.health.consecutive_failures += 1
        obs.record_fetch(self.owner, kind, success=False)
        level = logging.WARNING if self.health.consecutive_failures <= 3 else logging.DEBUG
        log.log(level, "VirtualMetricEvent %s: %s source fetch failed (%d in a row): %s",
                self.owner, kind, self.health.consecutive_failures, message)
        if self._on_health:
            self._on_health(self.owner)

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name=f"source:{self.owner}")

    def trigger(self) -> None:
        """Fetch now instead of waiting for the interval (e.g. after a spec change)."""
        self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping must not fail
                pass
            self._task = None
        try:
            await self.source.close()
        except Exception:
            log.debug("closing source of %s failed", self.owner, exc_info=True)

    async def _loop(self) -> None:
        interval = self.source.common.interval
        while True:
            await self.fetch_once()
            # Back off a little on repeated failures, never beyond the interval; jitter spreads the
            # polls of many objects so they do not hit an API in lockstep.
            delay = interval * (0.9 + 0.2 * random.random())
            if self.health.consecutive_failures:
                delay = min(interval, max(1.0, 2.0 ** min(self.health.consecutive_failures, 5)))
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=delay)
            except TimeoutError:
                pass
