"""Hand work to one event loop's thread from any thread.

The cluster store's watch threads and the manifest watcher call into the engine from their own
threads, while every engine state change must happen on the loop's thread (the engine has no locks
beyond this one). Calls made before the loop starts are queued and run, in order, when it does."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable


class LoopHandOff:
    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: int | None = None
        self._pending: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """From now on calls run on `loop` (call from its thread); queued ones run now, in order."""
        self.loop, self._thread = loop, threading.get_ident()
        with self._lock:
            pending, self._pending = self._pending, []
        for func in pending:
            func()

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    def call(self, func: Callable[[], None]) -> None:
        if self.loop is None:
            with self._lock:
                if self.loop is None:
                    self._pending.append(func)
                    return
        if threading.get_ident() == self._thread:
            func()
        else:
            self.loop.call_soon_threadsafe(func)
