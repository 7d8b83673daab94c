"""Capped exponential backoff with jitter, shared by the watch loops, the status writer and the lease."""

from __future__ import annotations

import random


class Backoff:
    """`next()` gives the delay before retry number n: min(cap, initial * 2**n), jittered.

    The jitter draws from [delay/2, delay] ("equal jitter"): replicas that lost the API server at the
    same moment spread their reconnects, yet a delay never collapses to ~0 and hammers a sick server.
    """

    def __init__(self, initial: float = 0.5, cap: float = 30.0, rng: random.Random | None = None):
        if initial <= 0 or cap < initial:
            raise ValueError("backoff needs 0 < initial <= cap")
        self.initial = initial
        self.cap = cap
        self.attempts = 0
        self._rng = rng or random.Random()

    def next(self) -> float:
        delay = min(self.cap, self.initial * (2 ** min(self.attempts, 32)))
        self.attempts += 1
        return delay * self._rng.uniform(0.5, 1.0)

    def reset(self) -> None:
        self.attempts = 0
