"""Cheap forecasters evaluated at many origins at once.

Every function here takes gap-filled history `y` of shape (n, T) and an array of origins (the
index of the last point the forecaster may use) and returns forecasts of shape (n, n_origins, H)
for the H steps after each origin. Being able to evaluate many origins in one vectorised call is
what makes the rolling-origin backtest of `auto` affordable.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def targets(origins: np.ndarray, horizon: int) -> np.ndarray:
    """Index of the value forecast for each (origin, step): shape (n_origins, H)."""
    return origins[:, None] + np.arange(1, horizon + 1)[None, :]


def last_value(y: np.ndarray, origins: np.ndarray, horizon: int) -> np.ndarray:
    """Persistence: the last value, flat. Often the best at very short horizons."""
    return np.repeat(y[:, origins][:, :, None], horizon, axis=2)


def recent_mean(y: np.ndarray, origins: np.ndarray, horizon: int, k: int) -> np.ndarray:
    """Mean of the last k values, flat: persistence with the noise of single points averaged out."""
    csum = prefix_sums(y)
    start = np.maximum(origins + 1 - k, 0)
    level = (csum[:, origins + 1] - csum[:, start]) / (origins + 1 - start)
    return np.repeat(level[:, :, None], horizon, axis=2)


def seasonal_naive(y: np.ndarray, origins: np.ndarray, horizon: int, m: int) -> np.ndarray:
    """Value one season earlier (several seasons earlier beyond the first season)."""
    steps = np.arange(1, horizon + 1)
    lag = m * np.ceil(steps / m).astype(int)
    idx = targets(origins, horizon) - lag[None, :]
    return y[:, idx]


def seasonal_level(
    y: np.ndarray, origins: np.ndarray, horizon: int, m: int, seasons: int, smooth: int, k: int
) -> np.ndarray:
    """Seasonal profile of the last `seasons` seasons, re-levelled to the recent data.

    forecast(o+h) = P(o+h) + mean over the last k points of (y - P), where P(t) is the mean of
    y smoothed over +-smooth steps at the same phase in earlier seasons. This is Holt-Winters
    with a flat trend and fixed smoothing, but computable for every origin with prefix sums:
    the profile carries the shape of the day or week, the recent residual carries today's level.
    Only the points the origins need are computed (gathers from one prefix-sum array).
    """
    csum = prefix_sums(y)
    steps = np.arange(1, horizon + 1)
    # The first lag whose smoothing window ends before the origin (no peeking into the future).
    base = m * np.ceil((steps + smooth) / m).astype(int)
    idx = targets(origins, horizon) - base[None, :]
    profile_future = _mean_of(window_mean(csum, idx - j * m, smooth) for j in range(seasons))

    base_now = m * int(np.ceil(max(smooth, 1) / m))
    recent = origins[:, None] - np.arange(k)[None, :]  # (O, k): the last k points at each origin
    profile_now = _mean_of(window_mean(csum, recent - base_now - j * m, smooth) for j in range(seasons))
    level = y[:, recent].mean(axis=2) - profile_now.mean(axis=2)  # (n, O)
    return profile_future + level[:, :, None]


def _mean_of(arrays: Iterable[np.ndarray]) -> np.ndarray:
    items = list(arrays)
    return np.sum(items, axis=0) / len(items)


def window_mean(csum: np.ndarray, index: np.ndarray, half_width: int) -> np.ndarray:
    """Mean of y over [i - w, i + w] (clipped to the series) for every i in `index`."""
    n_steps = csum.shape[1] - 1
    lo = np.clip(index - half_width, 0, n_steps - 1)
    hi = np.clip(index + half_width + 1, 1, n_steps)
    return (csum[:, hi] - csum[:, lo]) / (hi - lo)


def centered_mean(y: np.ndarray, half_width: int) -> np.ndarray:
    """Moving mean over [t - w, t + w], shrinking at the edges, for the whole series."""
    if half_width <= 0:
        return y
    return window_mean(_cumsum0(y), np.arange(y.shape[1]), half_width)


def seasonal_level_history(m: int, seasons: int, smooth: int, horizon: int, k: int) -> int:
    """Points needed before the first origin for seasonal_level to use only real history."""
    base = m * int(np.ceil((horizon + smooth) / m))
    return max(base, m) + (seasons - 1) * m + smooth + k + 1


_prefix_cache: tuple[np.ndarray, np.ndarray] | None = None


def prefix_sums(y: np.ndarray) -> np.ndarray:
    """Prefix sums of y along time, (n, T+1), reused while the same array is being forecast.

    Several candidates need them for the same history; the one-entry cache holds y itself, so
    an `is` check cannot be fooled by a recycled id, and a tuple read is atomic across threads.
    """
    global _prefix_cache
    cached = _prefix_cache
    if cached is not None and cached[0] is y:
        return cached[1]
    csum = _cumsum0(y)
    _prefix_cache = (y, csum)
    return csum


def _cumsum0(y: np.ndarray) -> np.ndarray:
    out = np.zeros((y.shape[0], y.shape[1] + 1))
    np.cumsum(y, axis=1, out=out[:, 1:])
    return out
