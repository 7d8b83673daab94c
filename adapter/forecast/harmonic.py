"""Harmonic regression through the FFT: keep the dominant periods, extrapolate them.

This is the idea of Crane's DSP predictor: take a window that is a whole number of seasons long,
remove the linear trend, keep the few strongest frequencies of its spectrum and continue the
resulting periodic signal (plus the window's linear trend) into the future. Because the window
is a whole number of seasons, the kept frequencies are exact harmonics and the reconstruction is
periodic with the window length.

A pure periodic extrapolation ignores today's level (an unusually busy Monday stays busy), so
the forecast adds the mean residual of the last few points. The window is fitted once per call
(at `fit_origin`) and evaluated at every origin after it; the final origin gets its own refit.
"""

from __future__ import annotations

import numpy as np

from .simple import targets

TOP_FREQUENCIES = 16


def harmonic(
    y: np.ndarray,
    origins: np.ndarray,
    horizon: int,
    window: int,
    season: int,
    level_k: int,
    refit_last: bool = True,
    top: int = TOP_FREQUENCIES,
) -> np.ndarray:
    """Forecasts (n, n_origins, H). `window` (a whole number of `season`s) points are fitted.

    Backtest origins (all but the last) share one fit ending at origins[0]; the last origin gets
    a fit of its own when refit_last, so the live forecast uses the newest data.
    """
    out = np.empty((y.shape[0], len(origins), horizon))
    groups = (
        [(origins[:-1], int(origins[0])), (origins[-1:], int(origins[-1]))]
        if refit_last and len(origins) > 1
        else [(origins, int(origins[0]))]
    )
    for group, fit_origin in groups:
        start = fit_origin + 1 - window
        periodic, slope = _periodic_fit(y[:, start : fit_origin + 1], season, top)
        recent = group[:, None] - np.arange(level_k)[None, :]  # the last level_k points
        level = (y[:, recent] - _signal_at(periodic, slope, start, recent)).mean(axis=2)
        flat = _signal_at(periodic, slope, start, targets(group, horizon))
        sel = np.searchsorted(origins, group)
        out[:, sel] = flat + level[:, :, None]
    return out


def _signal_at(periodic: np.ndarray, slope: np.ndarray, start: int, index: np.ndarray) -> np.ndarray:
    """The fitted signal at absolute indices (any shape): periodic part plus the linear trend."""
    rel = index - start
    return periodic[:, rel % periodic.shape[1]] + slope.reshape((-1,) + (1,) * rel.ndim) * rel


def _periodic_fit(block: np.ndarray, season: int, top: int) -> tuple[np.ndarray, np.ndarray]:
    """Periodic reconstruction of block (mean and `top` strongest frequencies) and its slope.

    The slope comes from the means of the first and the last season of the window, which is exact
    for "pattern + linear trend" and exactly zero for a pure pattern (a least-squares slope is not:
    a sine over whole periods correlates with time). A ramp left in would leak into every frequency.
    """
    n, length = block.shape
    seasons = length // season
    if seasons >= 2:
        slope = (block[:, -season:].mean(axis=1) - block[:, :season].mean(axis=1)) / (length - season)
    else:
        slope = np.zeros(n)
    detrended = block - slope[:, None] * np.arange(length)[None, :]
    spectrum = np.fft.rfft(detrended, axis=1)
    power = np.abs(spectrum)
    power[:, 0] = np.inf  # always keep the mean
    keep = min(top + 1, spectrum.shape[1])
    strongest = np.argpartition(-power, keep - 1, axis=1)[:, :keep]
    mask = np.zeros(spectrum.shape, dtype=bool)
    np.put_along_axis(mask, strongest, True, axis=1)
    return np.fft.irfft(np.where(mask, spectrum, 0), n=length, axis=1), slope
