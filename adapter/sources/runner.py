"""Runs one source: polls it, keeps its latest snapshot, tracks health and staleness.

- Each successful fetch replaces the snapshot (re-announcing never double-counts; ids dedupe, once,
  here).
- A failed fetch keeps the previous snapshot: announced work is still coming.
- After `staleAfter` without a success (counted from the start when there never was one) the
  source is stale; what that means for queries (Hold -> 503, UseKnown) is the engine's business.
- No exception ends the loop: a fetch that raises anything, or a snapshot the engine fails to take,
  is logged, counted (prescaler_source_loop_errors_total) and retried with backoff.
- First fetches are spread: many sources started together (a server start, a bulk apply) do not hit
  their endpoints, or the CPU, in one burst.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from adapter import observability as obs
from adapter.errors import SourceError, forget_frames
from adapter.items import Item, dedupe
from adapter.logs import BurstLimit
from adapter.sources.base import FetchResult, Source

log = logging.getLogger("prescaler.sources")
# Failed fetches logged at WARNING: at most this many lines per window over all sources (the
# rest at DEBUG, counted in the next line); each object's status and the fetch metrics have them all.
FAILURE_LOG = BurstLimit(burst=50, window=10.0)

MAX_ITEMS_PER_SNAPSHOT = 200_000
# First fetches across all runners of a loop start at this rate at most; beyond it they are spread
# at random over each source's interval.
START_RATE_PER_SECOND = 50.0
MAX_BACKOFF_EXPONENT = 5


@dataclass
class SourceHealth:
    started_at: float
    last_attempt: float | None = None
    last_success: float | None = None
    last_error: str | None = None
    consecutive_failures: int = 0
    item_count: int = 0
    warnings: list[str] = field(default_factory=list)
    note: str = ""


class StartSpreader:
    """Hands out first-fetch delays: the first runners start at once, at `rate` per second; when
    that would wait longer than a source's interval, a random point within the interval is used."""

    def __init__(
        self, rate: float | None = None, clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None
    ):
        self._gap = 1.0 / (rate or START_RATE_PER_SECOND)
        self._clock = clock
        self._next = -math.inf
        self._rng = rng or random.Random()

    def delay(self, interval: float) -> float:
        now = self._clock()
        slot = max(now, self._next)
        self._next = slot + self._gap
        wait = slot - now + self._rng.uniform(0.0, self._gap)
        if wait >= interval:
            return self._rng.uniform(0.0, interval)
        return wait


_SPREADERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, StartSpreader] = weakref.WeakKeyDictionary()


def loop_spreader() -> StartSpreader:
    """The spreader shared by the runners of the running event loop."""
    loop = asyncio.get_running_loop()
    spreader = _SPREADERS.get(loop)
    if spreader is None:
        spreader = _SPREADERS[loop] = StartSpreader()
    return spreader


class SourceRunner:
    def __init__(
        self,
        owner: str,
        source: Source[Any],
        on_snapshot: Callable[[str, list[Item]], None],
        clock: Callable[[], float] = time.time,
        on_health: Callable[[str], None] | None = None,
        spreader: StartSpreader | None = None,
    ):
        self.owner = owner  # the VirtualMetricEvent name, for logs and metrics
        self.source = source
        self._on_snapshot = on_snapshot
        self._on_health = on_health
        self._clock = clock
        self._spreader = spreader
        self.health = SourceHealth(started_at=clock())
        self._retry_soon = True  # False after a failure that only a change of the object can fix
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self.first_delay: float | None = None  # the start offset the loop used, for tests and logs

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
        """One fetch; publishes the snapshot on success. Never raises, except when cancelled."""
        now = self._clock()
        self.health.last_attempt = now
        kind = self.source.kind
        started = time.perf_counter()
        try:
            result = await asyncio.wait_for(self.source.fetch(now), timeout=self.source.fetch_deadline())
            if len(result.items) > MAX_ITEMS_PER_SNAPSHOT:
                raise SourceError(f"source returned {len(result.items)} items, more than {MAX_ITEMS_PER_SNAPSHOT}")
        except asyncio.CancelledError:
            raise
        except (SourceError, TimeoutError) as exc:
            message = str(exc) or f"timed out after {self.source.fetch_deadline():g}s"
            self._failed(message, kind, retry_soon=getattr(exc, "retry_soon", True))
            forget_frames(exc)
            return False
        except Exception as exc:  # noqa: BLE001 - a bug in one source must not stop its loop
            obs.SOURCE_LOOP_ERRORS.labels(kind=kind, stage="fetch").inc()
            self._log_traceback("source of VirtualMetricEvent %s failed unexpectedly")
            self._failed(f"internal error in {kind} source: {type(exc).__name__}: {exc}", kind)
            forget_frames(exc)
            return False
        finally:
            obs.SOURCE_FETCH_SECONDS.labels(kind=kind).observe(time.perf_counter() - started)
        return self._succeeded(result, kind)

    def _succeeded(self, result: FetchResult, kind: str) -> bool:
        items = dedupe(list(result.items))
        try:
            # The engine turns items into contributions here; an error in that step (an expression
            # that overflows, say) must not end this loop: the engine drops what it cannot evaluate,
            # and anything that still escapes is reported like a failed fetch.
            self._on_snapshot(self.owner, items)
        except Exception as exc:  # noqa: BLE001
            obs.SOURCE_LOOP_ERRORS.labels(kind=kind, stage="publish").inc()
            self._log_traceback("VirtualMetricEvent %s: taking the snapshot failed")
            self._failed(f"internal error while using the {kind} items: {type(exc).__name__}: {exc}", kind)
            return False
        self.health.last_success = self._clock()
        self.health.last_error = None
        self.health.consecutive_failures = 0
        self.health.item_count = len(items)
        self.health.warnings = list(result.warnings)
        self.health.note = result.note
        obs.record_fetch(self.owner, kind, success=True)
        obs.SOURCE_LAST_SUCCESS.labels(event=self.owner).set(self.health.last_success)
        self._health_changed()
        return True

    def _log_traceback(self, message: str) -> None:
        """The traceback once per run of failures: a poll that fails the same way every interval
        must not fill the log (the one-line warning of _failed still says it goes on)."""
        if self.health.consecutive_failures == 0:
            log.exception(message, self.owner)
        else:
            log.debug(message, self.owner, exc_info=True)

    def _failed(self, message: str, kind: str, retry_soon: bool = True) -> None:
        self._retry_soon = retry_soon
        self.health.last_error = message
        self.health.consecutive_failures += 1
        obs.record_fetch(self.owner, kind, success=False)
        level, left_out = logging.DEBUG, 0
        if self.health.consecutive_failures <= 3:
            allowed, left_out = FAILURE_LOG.allow()
            level = logging.WARNING if allowed else logging.DEBUG
        log.log(
            level,
            "VirtualMetricEvent %s: %s source fetch failed (%d in a row): %s%s",
            self.owner,
            kind,
            self.health.consecutive_failures,
            message,
            f" ({left_out} failures of other sources not logged before this line; see their status)"
            if left_out
            else "",
        )
        self._health_changed()

    def _health_changed(self) -> None:
        if self._on_health is None:
            return
        try:
            self._on_health(self.owner)
        except Exception:  # noqa: BLE001 - status reporting must not stop fetching
            obs.SOURCE_LOOP_ERRORS.labels(kind=self.source.kind, stage="publish").inc()
            log.exception("VirtualMetricEvent %s: reporting source health failed", self.owner)

    def next_delay(self) -> float:
        """Seconds until the next fetch: the interval with jitter, sooner after failures (exponential
        backoff from 2 s, never beyond the interval) unless the failure says retrying soon cannot help."""
        interval = self.source.common.interval
        failures = self.health.consecutive_failures
        if failures and self._retry_soon:
            base = min(interval, max(1.0, 2.0 ** min(failures, MAX_BACKOFF_EXPONENT)))
        else:
            base = interval
        # Jitter spreads the polls of many objects so they do not hit an API in lockstep.
        return base * (0.9 + 0.2 * random.random())

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
        except Exception:  # noqa: BLE001
            log.debug("closing source of %s failed", self.owner, exc_info=True)

    async def _sleep(self, delay: float, clear: bool = True) -> None:
        if clear:
            self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=delay)
        except TimeoutError:
            pass

    async def _loop(self) -> None:
        if self.source.never_stale:
            # Local sources (schedule) call no endpoint and their items are known at once: start
            # them now, so a restarted server serves its calendars from the first moment.
            self.first_delay = 0.0
        else:
            spreader = self._spreader or loop_spreader()
            self.first_delay = spreader.delay(self.source.common.interval)
        if self.first_delay > 0:
            await self._sleep(self.first_delay, clear=False)  # a trigger() before the start still counts
        while True:
            try:
                await self.fetch_once()
                delay = self.next_delay()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001 - the loop outlives any single iteration
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    raise
                obs.SOURCE_LOOP_ERRORS.labels(kind=self.source.kind, stage="loop").inc()
                log.exception("VirtualMetricEvent %s: source loop iteration failed; retrying", self.owner)
                self.health.consecutive_failures += 1
                delay = self.next_delay()
            await self._sleep(delay)
