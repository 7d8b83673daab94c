"""The latest status of every object, refreshed on the engine's loop and read from any thread.

A burst of changes (many fetches finishing together) costs one recomputation: refreshes are
coalesced over a short delay, then every listener (the Kubernetes status writer) is told. With
`pieces`, a refresh on the loop computes the statuses a piece per turn of the loop, so thousands of
objects never hold the loop (and the HPA's requests) for the whole recomputation; the board shows
the previous complete set until the new one is complete.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator

from adapter.handoff import pause_after
from adapter.pipeline.status import Statuses

log = logging.getLogger("prescaler.engine")
# Every successful fetch changes a status (lastSuccessfulFetchTime); the writer sends at most one write
# per object per 5 s. At 0.2 s, 100 sources polled every 5 s kept 2 % of the loop busy refreshing.
STATUS_COALESCE_SECONDS = 1.0
# A refresh waits at least this many times the loop time the last one took: thousands of objects whose
# sources keep failing would otherwise keep the loop busy with status work a third of the time.
STATUS_BUSY_FACTOR = 10.0


class StatusBoard:
    def __init__(
        self,
        compute: Callable[[], Statuses],
        delay: float = STATUS_COALESCE_SECONDS,
        pieces: Callable[[], Iterator[Statuses]] | None = None,
    ):
        self._compute = compute
        self._pieces = pieces
        self._delay = delay
        self._snapshot: Statuses = {}
        self._listeners: list[Callable[[], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None  # a refresh in pieces, under way
        self._again = False  # a change arrived while a refresh in pieces was under way
        self._busy = 0.0  # loop time the last refresh in pieces took

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def listen(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    def current(self) -> Statuses:
        """Built on the loop thread, replaced as a whole: safe to read from any thread."""
        return self._snapshot

    def changed(self) -> None:
        """Something a status reflects changed: refresh soon (at once before the loop runs)."""
        if self._loop is None:
            self.refresh()
        elif self._task is not None:
            self._again = True  # the refresh under way may have read the old state: another one after it
        elif self._handle is None:
            delay = max(self._delay, STATUS_BUSY_FACTOR * self._busy)
            self._handle = self._loop.call_later(delay, self._refresh_soon)

    def refresh(self) -> None:
        """Recompute every status now, in one go."""
        self._handle = None
        self._show(self._compute())

    def _refresh_soon(self) -> None:
        self._handle = None
        if self._pieces is None or self._loop is None:
            self.refresh()
        else:
            self._task = self._loop.create_task(self._refresh_in_pieces(self._pieces))

    async def _refresh_in_pieces(self, pieces: Callable[[], Iterator[Statuses]]) -> None:
        try:
            statuses: Statuses = {}
            busy = 0.0
            computing = pieces()
            while True:
                started = time.perf_counter()
                piece = next(computing, None)
                busy += time.perf_counter() - started
                if piece is None:
                    break
                statuses.update(piece)
                # Let the requests that arrived meanwhile be answered, as long as the piece took.
                await asyncio.sleep(pause_after(time.perf_counter() - started))
            self._busy = busy
            self._show(statuses)
        except Exception:
            log.exception("status refresh failed; the previous statuses stay")
        finally:
            self._task = None
            if self._again:
                self._again = False
                self.changed()

    def _show(self, statuses: Statuses) -> None:
        self._snapshot = statuses
        for callback in self._listeners:
            try:
                callback()
            except Exception:
                log.exception("status listener failed")

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._task is not None:
            self._task.cancel()
            self._task = None
