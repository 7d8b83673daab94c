"""A small TTL cache with an injectable clock, plus request coalescing for concurrent misses."""

from __future__ import annotations

import asyncio
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
    """

    def __init__(self) -> None:
        self._inflight: dict[Hashable, asyncio.Future[V]] = {}

    async def run(self, key: Hashable, compute: Callable[[], Awaitable[V]]) -> V:
        existing = self._inflight.get(key)
        if existing is not None:
            return await asyncio.shield(existing)
        future: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            value = await compute()
        except BaseException as exc:
            if not future.done():
                future.set_exception(exc)
                future.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        else:
            future.set_result(value)
            return value
        finally:
            self._inflight.pop(key, None)
