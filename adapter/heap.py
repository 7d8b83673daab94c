"""Keep the garbage collector's pauses independent of how much is loaded.

With 100 000 targets the server holds about half a million GC-tracked objects (parsed objects,
compiled expressions, targets). CPython's full collection walks all of them: measured 150-400 ms
on the 2-core machines, and a full collection comes due after every large rebuild (it allocates
many long-lived objects), so while sources deliver the server stalls for that long, again and again.

What is loaded is long-lived by nature, so after each publish everything alive moves to the
permanent generation (`gc.freeze()`): collections then only walk what was allocated since, which
is per-request garbage. Objects freed by reference counting (almost everything: snapshots hold no
reference cycles) are still freed when they die, frozen or not; what a freeze keeps is cyclic
garbage that was alive at that moment. So once in a while (FULL_COLLECT_SECONDS) the permanent
generation is thawed and collected completely: one pause, bounded in frequency, not one per rebuild.
While a snapshot is built, automatic collection pauses (`no_collection`).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger("prescaler.heap")

FULL_COLLECT_SECONDS = 900.0

_enabled = False
_last_full = time.monotonic()
_pause_lock = threading.Lock()
_pauses = 0
_was_enabled = True


def enable(enabled: bool = True) -> None:
    """Turn the policy on for this process (`prescaler serve` does; library users and tests that
    build many engines in one process keep CPython's default)."""
    global _enabled
    _enabled = enabled
    if not enabled:
        gc.unfreeze()


def after_publish(clock: float | None = None) -> bool:
    """Call on the event loop after a new snapshot is published. Returns True when it ran a full
    collection (at most once per FULL_COLLECT_SECONDS)."""
    global _last_full
    if not _enabled:
        return False
    now = time.monotonic() if clock is None else clock
    full = now - _last_full >= FULL_COLLECT_SECONDS
    if full:
        _last_full = now
        started = time.perf_counter()
        gc.unfreeze()
        found = gc.collect()
        log.debug(
            "full garbage collection: %d unreachable objects in %.0f ms", found, (time.perf_counter() - started) * 1000
        )
    gc.freeze()
    return full


@contextmanager
def no_collection() -> Iterator[None]:
    """No automatic collection while a snapshot (or the initial load) is built.

    A build allocates hundreds of thousands of long-lived containers; each young collection then
    promotes them and the old generation keeps growing past the point that triggers a full one, so
    the collector walks the half-built snapshot again and again (measured: 2.4 of 4.3 s of a full
    rebuild). What a build leaves is either published (and frozen after) or freed by reference
    counting. Nests, and works across the loop thread and the build thread."""
    if not _enabled:
        yield
        return
    with _paused(freeze=True):
        yield


@contextmanager
def _paused(freeze: bool) -> Iterator[None]:
    """Automatic collection off until the last of the overlapping pauses ends (any thread); then,
    with `freeze`, what is alive moves to the permanent generation, and collection is on again if it
    was when the first began."""
    global _pauses, _was_enabled
    with _pause_lock:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0:
                if freeze:
                    # What the build made is about to be published: straight to the permanent
                    # generation, or the first young collection would walk all of it.
                    gc.freeze()
                if _was_enabled:
                    gc.enable()


def frozen_objects() -> int:
    return gc.get_freeze_count()


@contextmanager
def quiet_imports(freeze: bool = False) -> Iterator[None]:
    """No automatic collection while a command's modules are imported and its objects built: a
    server's start imports about a second of modules, and every collection walked all the module
    objects loaded so far again (about 8 % of the import time). With `freeze`, what is alive then
    moves to the permanent generation, as after a publish. Overlaps with `no_collection` (the first
    list of objects is parsed on a watch thread meanwhile): collection resumes when both have ended."""
    with _paused(freeze):
        yield
