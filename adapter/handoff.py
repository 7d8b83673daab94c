"""Hand work to one event loop's thread from any thread, in pieces the loop can interleave.

The cluster store's watch threads and the manifest watcher call into the engine from their own
threads, while every engine state change must happen on the loop's thread (the engine has no locks
beyond this one). Calls made before the loop starts are queued and run, in order, when it does
(long jobs still in pieces).

A long job (applying a list of 10 000 objects takes seconds) is handed over as a sequence of steps
(`call_in_pieces`): the loop runs steps for at most PIECE_SECONDS, answers the requests that arrived
meanwhile, and goes on. Order is kept: while a job is unfinished, every later call waits behind it,
even one made on the loop's own thread."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager

log = logging.getLogger("prescaler.handoff")

PIECE_SECONDS = 0.002  # loop time per piece of a long job; requests are answered in between
MIN_PAUSE_SECONDS = 0.0005


def pause_after(spent: float) -> float:
    """How long the loop answers requests after a piece of long work that took `spent` seconds: as
    long again, so at most half the loop's time goes to the work. One turn of the loop between
    pieces was not enough: a request takes several (read, parse, run the app, write), so each one in
    flight waited through several pieces (p99 11.6 ms while sources delivered, at 32 connections)."""
    return max(MIN_PAUSE_SECONDS, spent)


Around = Callable[[], AbstractContextManager[object]]  # what each piece of a job runs inside


class RequestActivity:
    """Whether requests are being answered, as the server's outermost ASGI layer records them
    (adapter.serving.inflight): any in flight, or one started shortly before or during a piece of
    long work. The app answers most requests within one turn of the loop, so "in flight" alone is
    almost never true when a piece ends, even at thousands of requests a second."""

    RECENT_SECONDS = 0.01  # an HPA controller with 1 000 HPAs asks about every 15 ms

    __slots__ = ("in_flight", "last_started", "clock")

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.in_flight, self.last_started, self.clock = 0, -math.inf, clock

    def started(self) -> None:
        self.in_flight += 1
        self.last_started = self.clock()

    def finished(self) -> None:
        self.in_flight -= 1

    def recent(self, spent: float) -> bool:
        """A request in flight, or started within RECENT_SECONDS before a piece that took `spent`."""
        return self.in_flight > 0 or self.clock() - self.last_started < spent + self.RECENT_SECONDS


class LoopHandOff:
    def __init__(
        self, piece_seconds: float = PIECE_SECONDS, answering: Callable[[float], bool] = lambda spent: True
    ) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.piece_seconds = piece_seconds
        # Whether requests are being answered, given how long the last piece took (RequestActivity).
        # When none are, a long job goes on after one turn of the loop: pausing as long as
        # each piece took, with nobody waiting, doubled the time from start (or from a source's
        # snapshot) to the last value served.
        self.answering = answering
        self._thread: int | None = None
        self._pending: list[Callable[[], None]] = []  # before the loop is attached
        # Unfinished jobs, in order (loop thread only): their steps left, and what a piece runs inside.
        self._jobs: deque[tuple[Iterator[Callable[[], None]], Around]] = deque()
        self._scheduled = False
        self._lock = threading.Lock()

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """From now on calls run on `loop` (call from its thread); queued ones run now, in order."""
        self.loop, self._thread = loop, threading.get_ident()
        with self._lock:
            pending, self._pending = self._pending, []
        for func in pending:
            func()

    def pause_after(self, spent: float) -> float:
        """How long long work pauses after a piece that took `spent`: see `pause_after`, but not at all
        when no request is being answered (the next piece still waits one turn of the loop, in which
        a new request is read). Even 0.5 ms pauses left the loop idle a fifth of a start's load."""
        return pause_after(spent) if self.answering(spent) else 0.0

    @property
    def pending(self) -> bool:
        """Work handed over but not done yet (before the loop starts, or a job still in pieces)."""
        return bool(self._pending) or bool(self._jobs)

    def call(self, func: Callable[[], None]) -> None:
        if self._kept_until_attached(lambda: self.call(func)):  # (then behind a job queued before it)
            return
        assert self.loop is not None
        if threading.get_ident() != self._thread:
            self.loop.call_soon_threadsafe(self.call, func)
        elif self._jobs:
            self._jobs.append((iter((func,)), contextlib.nullcontext))  # behind the unfinished job
        else:
            func()  # synchronous on the loop's thread: its exceptions reach the caller

    def call_in_pieces(self, steps: Iterable[Callable[[], None]], around: Around = contextlib.nullcontext) -> None:
        """Run `steps` in order on the loop, at most `piece_seconds` at a time, each piece inside
        `around()` (e.g. a pause of the garbage collector). A step that raises is logged and skipped:
        the job goes on. A job handed over before the loop is attached starts, in pieces, when it is
        (in cluster mode the first list arrives while the server is still being set up)."""
        if self._kept_until_attached(lambda: self.call_in_pieces(steps, around)):
            return
        assert self.loop is not None
        if threading.get_ident() != self._thread:
            self.loop.call_soon_threadsafe(self.call_in_pieces, steps, around)
            return
        self._jobs.append((iter(steps), around))
        if len(self._jobs) == 1:
            self._run()  # the first piece now, like a plain call

    def _kept_until_attached(self, func: Callable[[], None]) -> bool:
        """Queue `func` for attach() if the loop is not there yet; True when it was queued."""
        if self.loop is None:
            with self._lock:
                if self.loop is None:
                    self._pending.append(func)
                    return True
        return False

    def _run(self) -> None:
        self._scheduled = False
        started = time.perf_counter()
        deadline = started + self.piece_seconds
        while self._jobs:
            steps, around = self._jobs[0]
            with around():
                finished = self._run_until(steps, deadline)
            if not finished:
                spent = time.perf_counter() - started
                self._schedule(self.pause_after(spent))
                return
            self._jobs.popleft()

    def _run_until(self, steps: Iterator[Callable[[], None]], deadline: float) -> bool:
        for step in steps:
            try:
                step()
            except Exception:  # noqa: BLE001 - one bad step must not stop the job or the loop
                log.exception("a step of a job on the event loop failed; going on with the next")
            if time.perf_counter() >= deadline:
                return False  # perhaps finished; the next piece finds out
        return True

    def _schedule(self, pause: float) -> None:
        if not self._scheduled and self.loop is not None:
            self._scheduled = True
            self.loop.call_later(pause, self._run)  # 0: the next turn of the loop, as call_soon
