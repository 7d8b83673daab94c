"""The workload behind the scale subresource: pods that take time to become ready (docs/hpa-algorithm.md §9).

The controller writes `spec.replicas` at once; the ReplicaSet then creates pods immediately (so
`status.replicas` follows within the tick) and each new pod becomes Ready after a start-up delay —
fixed, or drawn from a seeded distribution. On a scale-down the ReplicaSet deletes not-ready pods
first, newest first, then ready ones (`ActivePodsWithRanks`), which is what `remove` does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from adapter.durations import DurationError, parse_duration
from adapter.errors import ValidationError

DISTRIBUTIONS = ("fixed", "uniform", "normal", "lognormal", "exponential")


@dataclass(frozen=True)
class StartupDelay:
    """How long a new pod takes to become Ready, in seconds."""

    distribution: str = "fixed"
    value: float = 0.0  # fixed value, or mean (normal/exponential) or median (lognormal)
    low: float = 0.0  # uniform bounds
    high: float = 0.0
    spread: float = 0.0  # normal stddev (seconds) or lognormal sigma
    seed: int = 0

    def sampler(self) -> DelaySampler:
        return DelaySampler(self)


class DelaySampler:
    """Draws delays in pod-creation order from one seeded generator, so runs are reproducible."""

    def __init__(self, delay: StartupDelay):
        self.delay = delay
        self.rng = np.random.default_rng(delay.seed)

    def draw(self, count: int) -> list[float]:
        d = self.delay
        if d.distribution == "fixed":
            return [d.value] * count
        if d.distribution == "uniform":
            values = self.rng.uniform(d.low, d.high, count)
        elif d.distribution == "normal":
            values = self.rng.normal(d.value, d.spread, count)
        elif d.distribution == "lognormal":
            values = d.value * np.exp(self.rng.normal(0.0, d.spread, count))
        else:
            values = self.rng.exponential(d.value, count)
        return [max(0.0, float(v)) for v in values]


def parse_startup_delay(raw: Any, path: str) -> StartupDelay:
    """`5m`, or `{distribution: lognormal, median: 4m, sigma: 0.3, seed: 1}` and the like."""
    if raw is None:
        return StartupDelay()
    if not isinstance(raw, Mapping):
        return StartupDelay(value=_duration(raw, path))
    kind = raw.get("distribution", "fixed")
    if kind not in DISTRIBUTIONS:
        raise ValidationError(f"{path}.distribution", f"expected one of {', '.join(DISTRIBUTIONS)}, got {kind!r}")
    allowed = {
        "fixed": ("value",),
        "uniform": ("min", "max"),
        "normal": ("mean", "stddev"),
        "lognormal": ("median", "sigma"),
        "exponential": ("mean",),
    }[kind]
    for key in raw:
        if key not in allowed + ("distribution", "seed"):
            raise ValidationError(f"{path}.{key}", f"unknown field for {kind} (allowed: {', '.join(allowed)}, seed)")
    seed = raw.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValidationError(f"{path}.seed", "expected a non-negative integer")

    def need(key: str) -> float:
        if raw.get(key) is None:
            raise ValidationError(f"{path}.{key}", "required")
        return _duration(raw[key], f"{path}.{key}")

    if kind == "fixed":
        return StartupDelay(value=need("value"), seed=seed)
    if kind == "uniform":
        low, high = need("min"), need("max")
        if low > high:
            raise ValidationError(f"{path}.min", "must not exceed max")
        return StartupDelay("uniform", low=low, high=high, seed=seed)
    if kind == "normal":
        return StartupDelay("normal", value=need("mean"), spread=need("stddev"), seed=seed)
    if kind == "lognormal":
        sigma = raw.get("sigma")
        if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not 0 <= sigma <= 5:
            raise ValidationError(f"{path}.sigma", "expected a number between 0 and 5")
        return StartupDelay("lognormal", value=need("median"), spread=float(sigma), seed=seed)
    return StartupDelay("exponential", value=need("mean"), seed=seed)


def _duration(raw: Any, path: str) -> float:
    try:
        seconds = parse_duration(raw)
    except DurationError as exc:
        raise ValidationError(path, str(exc)) from None
    if seconds < 0 or not math.isfinite(seconds):
        raise ValidationError(path, "must be a non-negative duration")
    return seconds


class Pods:
    """The pods of the target workload: a count of ready pods plus the ready times of starting ones."""

    def __init__(self, replicas: int, delay: StartupDelay, now: float = 0.0):
        self.sampler = delay.sampler()
        self.ready_count = replicas  # the initial pods are already running
        # Starting pods as (ready_at, created_seq), kept in creation order.
        self.starting: list[tuple[float, int]] = []
        self._seq = 0
        self.now = now

    @property
    def total(self) -> int:
        """`status.replicas` (non-terminated pods, ready or not)."""
        return self.ready_count + len(self.starting)

    def advance(self, t: float) -> None:
        """Pods whose start-up delay has passed become Ready (`ready_at <= t`)."""
        self.now = t
        if self.starting:
            still = [(at, seq) for at, seq in self.starting if at > t]
            self.ready_count += len(self.starting) - len(still)
            self.starting = still

    def next_ready_time(self) -> float:
        return min((at for at, _ in self.starting), default=math.inf)

    def scale_to(self, replicas: int, t: float) -> None:
        diff = replicas - self.total
        if diff > 0:
            for delay in self.sampler.draw(diff):
                self._seq += 1
                self.starting.append((t + delay, self._seq))
        elif diff < 0:
            self.remove(-diff)

    def remove(self, count: int) -> None:
        # Not-ready pods go first, newest first; then ready pods.
        take = min(count, len(self.starting))
        if take:
            del self.starting[len(self.starting) - take :]
        self.ready_count -= count - take
