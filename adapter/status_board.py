"""The latest status of every object, refreshed on the engine's loop and read from any thread.

A burst of changes (many fetches finishing together) costs one recomputation: refreshes are
coalesced over a short delay, then every listener (the Kubernetes status writer) is told.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from adapter.pipeline.status import Statuses

log = logging.getLogger("prescaler.engine")
STATUS_COALESCE_SECONDS = 0.2


class StatusBoard:
    def __init__(self, compute: Callable[[], Statuses], delay: float = STATUS_COALESCE_SECONDS):
        self._compute = compute
        self._delay = delay
        self._snapshot: Statuses = {}
        self._listeners: list[Callable[[], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None

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
        elif self._handle is None:
            self._handle = self._loop.call_later(self._delay, self.refresh)

    def refresh(self) -> None:
        self._handle = None
        self._snapshot = self._compute()
        for callback in self._listeners:
            try:
                callback()
            except Exception:
                log.exception("status listener failed")

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
