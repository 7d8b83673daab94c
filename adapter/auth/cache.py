"""A small TTL cache with an injectable clock, plus request coalescing for concurrent misses."""

from __future__ import annotations

import asyncio
import functools
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")
Clock = Callable[[], float]


class TTLCache(Generic[V]):
    """Entries expire ``ttl`` seconds after insertion; at most ``max_entries`` (oldest evicted).

    A hit is one dict lookup plus one clock call, which keeps the per-request cost of delegated
    auth in the microseconds once the cache is warm.
    """

    def __init__(self, max_entries: int = 4096, clock: Clock = time.monotonic) -> None:
        self._data: OrderedDict[Hashable, tuple[float, V]] = OrderedDict()
        self._max = max_entries
        self._clock = clock

    def get(self, key: Hashable) -> V | None:
        entry = self._data.get(key)
        if entry is None:
            return None
        expires, value = entry
        if self._clock() >= expires:
            self._data.pop(key, None)
            return None
        return value

    def set(self, key: Hashable, value: V, ttl: float) -> None:
        if ttl <= 0:
            return
        self._data[key] = (self._clock() + ttl, value)
        self._data.move_to_end(key)
        while len(self._data) > self._max:
            self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


class Coalescer(Generic[V]):
    """Concurrent calls with the same key share one in-flight computation (singleflight).

    50 HPAs asking for the same metric within the same second then cause one review, not 50.
    The computation runs in a task of its own, which every caller awaits through ``shield``: when
    it ran inside the first caller, cancelling that one request (client gone, shutdown) cancelled
    the review and raised CancelledError in every other request waiting for it.
    """

    def __init__(self) -> None:
        self._inflight: dict[Hashable, asyncio.Future[V]] = {}

    async def run(self, key: Hashable, compute: Callable[[], Awaitable[V]]) -> V:
        future = self._inflight.get(key)
        if future is None:
            future = asyncio.ensure_future(compute())
            self._inflight[key] = future
            future.add_done_callback(functools.partial(self._done, key))
        return await asyncio.shield(future)

    def _done(self, key: Hashable, future: asyncio.Future[V]) -> None:
        if self._inflight.get(key) is future:
            del self._inflight[key]
        if not future.cancelled():
            future.exception()  # mark retrieved: the waiters (if any are left) re-raise it themselves
