"""Where sources do CPU work (parsing bodies, expanding calendars): one worker thread, off the loop.

A worker thread keeps the event loop free, but only as long as the loop wins the GIL often: with many
CPU-bound threads the loop waits its turn behind each of them. One worker shared by all sources keeps
the loop's wait at one switch interval; the work itself is short (bounded by the size and item limits),
so queueing behind it costs little. Long computations (forecast fits) use their own threads.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from adapter import heap

P = ParamSpec("P")
T = TypeVar("T")

_WORKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prescaler-source-work")


async def off_loop(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run `function(*args, **kwargs)` on the shared source worker thread and wait for it."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_WORKER, functools.partial(_without_collection, function, *args, **kwargs))


def _without_collection(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    # What the worker makes (parsed items, expanded calendars: 250 000 items at most) lives as long
    # as its snapshot. Collected as it is made, it is promoted until a full collection walks every
    # object not yet frozen (adapter.heap): with 10 000 calendars delivering that was a 0.8 s pause
    # of the whole server. Paused here, it is frozen when the job ends.
    with heap.no_collection():
        return function(*args, **kwargs)
