"""Input checks, gap filling and season choice shared by every forecasting model.

Models work on gap-free float arrays of shape (n_series, n_steps); this module turns the
caller's history (NaN = gap) into that, and remembers which points were real so that backtest
errors are only scored on observed values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DAY = 86400.0
WEEK = 7 * DAY

# A seasonal model needs at least two full seasons: one to learn the pattern, one to check it.
MIN_SEASONS = 2


@dataclass(frozen=True)
class Prepared:
    """Gap-filled history plus what we learnt about it."""

    filled: np.ndarray  # (n, T) float64, no NaN, isolated spikes replaced: what models see
    raw: np.ndarray  # (n, T) gap-filled but not despiked: what forecasts are scored on
    observed: np.ndarray  # (n, T) bool, False where the caller gave NaN
    step: float  # seconds between points
    nonnegative: np.ndarray  # (n,) bool: every observed value >= 0 (request rates, CPU ...)
    short_season: tuple[int | None, ...] = ()  # per series: a sub-daily period in steps (cron-like)


MIN_UNSERVED_COST = 0.01
MAX_UNSERVED_COST = 10_000.0


def validate_unserved_cost(cost: float | None) -> None:
    """None (use the fixed quantile) or a number in [MIN_UNSERVED_COST, MAX_UNSERVED_COST]."""
    if cost is None:
        return
    if isinstance(cost, bool) or not isinstance(cost, (int, float, np.integer, np.floating)):
        raise ValueError(f"unserved_cost must be a number, got {cost!r}")
    if not MIN_UNSERVED_COST <= cost <= MAX_UNSERVED_COST:  # NaN fails too
        raise ValueError(
            f"unserved_cost must be between {MIN_UNSERVED_COST:g} and {MAX_UNSERVED_COST:g} "
            f"(units of idle capacity per unit of unserved demand, e.g. 20), got {cost!r}"
        )


def validate(values: np.ndarray, step: float, horizon: int, quantile: float) -> np.ndarray:
    """Return values as a 2-D float array or raise ValueError with a message a user can act on."""
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"history values must be numbers: {exc}") from None
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError(f"history must be 1-D (one series) or 2-D (series x steps), got shape {arr.shape}")
    if arr.shape[1] == 0 or arr.shape[0] == 0:
        raise ValueError("history is empty: need at least one value")
    if not np.isfinite(step) or step <= 0:
        raise ValueError(f"step must be a positive number of seconds, got {step!r}")
    if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)) or horizon < 1:
        raise ValueError(f"horizon must be an integer number of steps >= 1, got {horizon!r}")
    if not (isinstance(quantile, (int, float)) and 0.5 < quantile < 1.0):
        raise ValueError(f"quantile must be a number in (0.5, 1), e.g. 0.9, got {quantile!r}")
    finite = np.isfinite(arr)
    if finite.all():
        return arr
    arr = np.where(finite, arr, np.nan)  # +-inf is as useless as a gap
    all_nan = ~finite.any(axis=1)
    if np.any(all_nan):
        which = int(np.argmax(all_nan))
        raise ValueError(f"history of series {which} has no numeric value (all NaN)")
    return arr


def fill_gaps(arr: np.ndarray, step: float) -> Prepared:
    """Linear interpolation inside gaps, flat extension at the ends, then despiking.

    Interpolation keeps level and trend continuous, which is what the short-horizon models care
    about; the filled points are excluded from backtest scoring via `observed`.
    """
    observed = ~np.isnan(arr)
    gappy = np.flatnonzero(~observed.all(axis=1))
    if len(gappy) == 0:  # the common case: nothing to fill
        filled = arr
        nonneg = np.asarray((arr >= 0).all(axis=1))
    else:
        filled = arr.copy()
        positions = np.arange(arr.shape[1])
        for row in gappy:  # only series with gaps pay for this loop
            ok = observed[row]
            filled[row] = np.interp(positions, positions[ok], arr[row, ok])
        nonneg = np.all(np.where(observed, arr, 0.0) >= 0, axis=1)
    short = tuple(short_season(row, float(step)) for row in filled)
    # A spike that comes back every period (an hourly job) is the pattern, not an outlier: keep it.
    keep = np.array([m is not None for m in short])
    cleaned = despike(filled)
    if keep.any():
        cleaned = np.where(keep[:, None], filled, cleaned)
    return Prepared(
        filled=cleaned, raw=filled, observed=observed, step=float(step), nonnegative=nonneg, short_season=short
    )


SHORT_SEASON_MAX = 6 * 3600.0  # longest sub-daily period looked for
SHORT_SEASON_WINDOW = 3 * 86400.0  # recent history it is looked for in
SHORT_SEASON_MIN_CORR = 0.4
SHORT_SEASON_MARGIN = 0.2


def short_season(y: np.ndarray, step: float) -> int | None:
    """A period shorter than a day (in steps) that the recent history clearly repeats, or None.

    Hourly cron jobs, batch runs every 15 minutes: a daily profile smooths them away and the spike
    filter would delete them. The period m must correlate well (>= 0.4) and clearly better than
    every shorter lag from m/2 on (a smooth series correlates best at lag 1 and never qualifies).
    """
    window = int(min(len(y), max(SHORT_SEASON_WINDOW / step, 0)))
    max_lag = int(min(SHORT_SEASON_MAX / step, window // 4))
    if max_lag < 3:
        return None
    x = y[-window:] - y[-window:].mean()
    power = float((x * x).sum())
    if power <= 0:
        return None
    size = 1 << int(np.ceil(np.log2(2 * len(x))))
    spectrum = np.fft.rfft(x, size)
    acf = np.fft.irfft(spectrum * np.conj(spectrum), size)[: max_lag + 1] / power
    best, best_corr = None, SHORT_SEASON_MIN_CORR
    for m in range(3, max_lag + 1):
        shorter = acf[max(1, m // 2) : m]
        if acf[m] >= best_corr and acf[m] >= shorter.max() + SHORT_SEASON_MARGIN:
            best, best_corr = m, float(acf[m])
    return best


SPIKE_THRESHOLD = 20.0


def despike(y: np.ndarray) -> np.ndarray:
    """Replace isolated spikes (1-2 points far from both neighbours) by their neighbours' median.

    A one-minute burst is not predictable, but seasonal naive would copy it a day later and a
    level would chase it. The reference for point t is the median of y[t-1], y[t+1] and the mean
    of y[t-2], y[t+2]; a point is a spike when it is SPIKE_THRESHOLD robust scales (median
    absolute distance to the reference) away. The last two points are left alone: with no
    neighbour after them a spike cannot be told from the start of a real change.
    """
    if y.shape[1] < 7:
        return y
    mid = y[:, 2:-2]
    before, after = y[:, 1:-3], y[:, 3:-1]
    outer = 0.5 * (y[:, :-4] + y[:, 4:])
    ref = np.maximum(np.minimum(before, after), np.minimum(np.maximum(before, after), outer))
    dist = np.abs(mid - ref)
    scale = np.median(dist[:, ::3], axis=1) * 1.4826
    # A series that is mostly flat has scale 0; do not call every change a spike.
    floor = 0.05 * np.abs(y[:, ::7]).mean(axis=1) + 1e-9
    limit = SPIKE_THRESHOLD * np.maximum(scale, floor)
    spikes = dist > limit[:, None]
    if not spikes.any():
        return y
    out = y.copy()
    out[:, 2:-2] = np.where(spikes, ref, mid)
    return out


def season_steps(season_seconds: float, step: float) -> int:
    return max(1, round(season_seconds / step))


def usable_seasons(n_steps: int, step: float, horizon: int) -> list[int]:
    """Season lengths (in steps) the history is long enough for, longest first (weekly, daily)."""
    out = []
    for seconds in (WEEK, DAY):
        m = season_steps(seconds, step)
        if m >= 2 and m > horizon // 4 and n_steps >= MIN_SEASONS * m:
            out.append(m)
    return out


def choose_season(prep: Prepared, horizon: int, season: float | None) -> tuple[int | None, str]:
    """Pick the season (steps) for single-season models; return it with a note saying why.

    A season the caller asked for is used when the history covers two of them; otherwise we
    fall back weekly -> daily -> none (recent level) and say so.
    """
    n_steps = prep.filled.shape[1]
    step = prep.step
    if season is not None:
        m = season_steps(season, step)
        if m < 2:
            return None, f"season {season:g}s is not longer than the step {step:g}s: used no season"
        if n_steps >= MIN_SEASONS * m:
            return m, ""
        fallbacks = [s for s in usable_seasons(n_steps, step, horizon) if s < m]
        if fallbacks:
            return fallbacks[0], (
                f"history ({_fmt(n_steps * step)}) shorter than 2 x season "
                f"{_fmt(m * step)}: used {_fmt(fallbacks[0] * step)} season"
            )
        return None, (f"history ({_fmt(n_steps * step)}) shorter than 2 x season {_fmt(m * step)}: used recent level")
    candidates = usable_seasons(n_steps, step, horizon)
    if not candidates:
        return None, f"history ({_fmt(n_steps * step)}) shorter than 2 days: used recent level"
    if len(candidates) == 1:
        note = (
            ""
            if candidates[0] == season_steps(WEEK, step)
            else (f"history ({_fmt(n_steps * step)}) shorter than 2 weeks: used daily season")
        )
        return candidates[0], note
    weekly, daily = candidates[0], candidates[1]
    # Weekly only when it explains the data better than daily; it needs twice the history.
    if _lag_corr(prep.filled, weekly) >= _lag_corr(prep.filled, daily) + 0.02:
        return weekly, ""
    return daily, "weekly pattern not stronger than daily: used daily season"


def _lag_corr(filled: np.ndarray, lag: int) -> float:
    """Mean over series of the lag autocorrelation (the seasonal-naive fit quality)."""
    a, b = filled[:, lag:], filled[:, :-lag]
    a = a - a.mean(axis=1, keepdims=True)
    b = b - b.mean(axis=1, keepdims=True)
    denom = np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    corr = np.where(denom > 0, (a * b).sum(axis=1) / np.where(denom > 0, denom, 1), 0.0)
    return float(corr.mean())


def _fmt(seconds: float) -> str:
    if seconds >= DAY and seconds % DAY == 0:
        return f"{int(seconds // DAY)}d"
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    return f"{seconds:g}s"
