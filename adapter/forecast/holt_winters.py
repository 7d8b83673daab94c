"""Additive Holt-Winters with damped trend, fitted by grid search, vectorised over series.

The recursion (error-correction form, one step t):
    e   = y_t - (l + phi*b + s[t mod m])
    l  <- l + phi*b + alpha*e
    b  <- phi*b + beta*e
    s[t mod m] <- s[t mod m] + gamma*e
    forecast(t+h) = l + (phi + ... + phi^h)*b + s[(t+h) mod m]

Parameters are chosen per series from a small grid by the mean absolute error at the requested
horizon, accumulated online over a fitting window that ends at the first backtest origin; the
chosen parameters then run on, and forecasts are recorded at each origin. Fitting on data before
the backtest keeps `auto`'s comparison with the other models honest. The Python loop is over time
only; every operation inside it works on all series and all parameter sets at once.
"""

from __future__ import annotations

import itertools

import numpy as np

from .simple import centered_mean

ALPHAS = (0.02, 0.08, 0.25, 0.6)
TRENDS = ((0.0, 0.0), (0.01, 0.9), (0.05, 0.98), (0.15, 0.995))  # (beta, phi); beta=0 and phi=0 mean no trend
GAMMAS = (0.05, 0.3)
GRID = np.array([(a, b, p, g) for a, (b, p), g in itertools.product(ALPHAS, TRENDS, GAMMAS)])
DEFAULT = np.array([0.25, 0.01, 0.9, 0.05])  # when there is no room to fit

# Memory bound: the seasonal state is (m, series, grid); process series in chunks of this size.
_CHUNK_FLOATS = 12_000_000


def fit_steps(m: int) -> int:
    """Length of the parameter-fitting window: half a season, at least 300 steps, at most 1440."""
    return int(min(1440, max(m // 2, 300)))


def history_needed(m: int) -> int:
    """Points before the recursion starts that initialisation needs (two seasons)."""
    return 2 * m


def holt_winters(
    y: np.ndarray, origins: np.ndarray, horizon: int, m: int, fit_steps: int
) -> tuple[np.ndarray, np.ndarray]:
    """Forecasts (n, n_origins, H) from each origin, and the chosen parameters (n, 4)."""
    n = y.shape[0]
    per_series = m * len(GRID)
    chunk = max(1, _CHUNK_FLOATS // max(per_series, 1))
    out = np.empty((n, len(origins), horizon))
    params = np.empty((n, 4))
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        out[lo:hi], params[lo:hi] = _run(y[lo:hi], origins, horizon, m, fit_steps)
    return out, params


def grid_for(m: int, fit_len: int) -> np.ndarray:
    """The parameter grid; gamma is only searched when the fit window spans two seasons.

    With a fitting window shorter than that, each seasonal slot is updated at most once while
    fitting, so the fit cannot tell the gammas apart: searching them would only cost time.
    """
    if fit_len >= 2 * m:
        return GRID
    return GRID[GRID[:, 3] == GAMMAS[0]]


def _run(y: np.ndarray, origins: np.ndarray, horizon: int, m: int, fit_steps: int) -> tuple[np.ndarray, np.ndarray]:
    n = y.shape[0]
    first_origin = int(origins[0])
    t0 = max(min(history_needed(m), first_origin), first_origin - fit_steps, m)
    level, trend, season = _initial_state(y, t0, m)
    target_h = min(horizon, m)  # beyond one season the same seasonal slot repeats
    if first_origin - t0 > target_h + 10:
        params, level, trend, season = _fit_grid(y, t0, first_origin, m, target_h, level, trend, season)
        start = first_origin + 1  # the fitted states already include first_origin
    else:
        params = np.repeat(DEFAULT[None, :], n, axis=0)
        start = t0
    if n == 1:
        return _run_on_scalar(
            y[0], origins, horizon, m, params[0], float(level[0]), float(trend[0]), season[:, 0], start
        ), params
    return _run_on(y, origins, horizon, m, params, level, trend, season, start), params


def _fit_grid(
    y: np.ndarray,
    t0: int,
    first_origin: int,
    m: int,
    target_h: int,
    level: np.ndarray,
    trend: np.ndarray,
    season: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Run every parameter set over [t0, first_origin]; keep per series the lowest h-step MAE."""
    n = y.shape[0]
    grid = grid_for(m, first_origin - t0)
    g = len(grid)
    alpha, beta, phi, gamma = (grid[:, i][None, :] for i in range(4))
    lvl = np.repeat(level[:, None], g, axis=1)
    trd = np.repeat(trend[:, None], g, axis=1)
    sea = np.repeat(season[:, :, None], g, axis=2)  # (m, n, g)
    damp_sum = _damped_sums(grid[:, 2], target_h)[-1][None, :]
    # ring of the level-and-trend part of the forecasts made target_h steps ago
    ring = np.zeros((target_h, n, g))
    abs_err = np.zeros((n, g))
    ys = y[:, t0 : first_origin + 1, None]
    for i, t in enumerate(range(t0, first_origin + 1)):
        slot = t % m
        s_old = sea[slot]
        z = ys[:, i] - s_old
        if i >= target_h:
            abs_err += np.abs(z - ring[t % target_h])
        pred = lvl + phi * trd
        err = z - pred
        lvl = pred + alpha * err
        trd = phi * trd + beta * err
        sea[slot] = s_old + gamma * err
        ring[t % target_h] = lvl + damp_sum * trd
    best = np.argmin(abs_err, axis=1)
    rows = np.arange(n)
    return grid[best], lvl[rows, best], trd[rows, best], sea[:, rows, best]


def _run_on(
    y: np.ndarray,
    origins: np.ndarray,
    horizon: int,
    m: int,
    params: np.ndarray,
    level: np.ndarray,
    trend: np.ndarray,
    season: np.ndarray,
    start: int,
) -> np.ndarray:
    """Continue with the chosen parameters from `start`, recording forecasts at the origins."""
    n = y.shape[0]
    alpha, beta, phi, gamma = (params[:, i] for i in range(4))
    damp = _damped_sums(phi, horizon).T  # (n, H)
    steps = np.arange(1, horizon + 1)
    out = np.empty((n, len(origins), horizon))
    wanted = {int(o): i for i, o in enumerate(origins)}

    def record(t: int) -> None:
        pos = wanted.get(t)
        if pos is not None:
            out[:, pos] = level[:, None] + damp * trend[:, None] + season[(t + steps) % m].T

    record(start - 1)
    for t in range(start, int(origins[-1]) + 1):
        slot = t % m
        s_old = season[slot]
        pred = level + phi * trend
        err = y[:, t] - pred - s_old
        level = pred + alpha * err
        trend = phi * trend + beta * err
        season[slot] = s_old + gamma * err
        if t in wanted:
            record(t)
    return out


def _run_on_scalar(
    y: np.ndarray,
    origins: np.ndarray,
    horizon: int,
    m: int,
    params: np.ndarray,
    level: float,
    trend: float,
    season: np.ndarray,
    start: int,
) -> np.ndarray:
    """_run_on for one series with Python floats: far faster than numpy on length-1 arrays."""
    alpha, beta, phi, gamma = (float(v) for v in params)
    damp = np.cumsum(phi ** np.arange(1, horizon + 1))
    steps_list = list(range(1, horizon + 1))
    slots_season = season.tolist()
    values = y.tolist()
    out = np.empty((1, len(origins), horizon))
    wanted = {int(o): i for i, o in enumerate(origins)}

    def record(t: int, level: float, trend: float) -> None:
        pos = wanted.get(t)
        if pos is not None:
            ahead = [slots_season[(t + h) % m] for h in steps_list]
            out[0, pos] = level + damp * trend + np.asarray(ahead)

    record(start - 1, level, trend)
    for t in range(start, int(origins[-1]) + 1):
        slot = t % m
        s_old = slots_season[slot]
        pred = level + phi * trend
        err = values[t] - pred - s_old
        level = pred + alpha * err
        trend = phi * trend + beta * err
        slots_season[slot] = s_old + gamma * err
        if t in wanted:
            record(t, level, trend)
    return out


def _damped_sums(phi: np.ndarray, horizon: int) -> np.ndarray:
    """(H, g): phi + phi^2 + ... + phi^h for h = 1..H."""
    powers = phi[None, :] ** np.arange(1, horizon + 1)[:, None]
    return np.cumsum(powers, axis=0)


def _initial_state(y: np.ndarray, t0: int, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Level, trend and seasonal slots from the (up to 3) full seasons before t0.

    Seasonal slots are indexed by absolute time mod m, so `season[t % m]` is the slot for t.
    The profile is lightly smoothed so that one noisy minute does not become part of the pattern.
    """
    k = max(1, min(3, t0 // m))
    blocks = np.stack([y[:, t0 - (j + 1) * m : t0 - j * m] for j in range(k)])  # (k, n, m), j=0 newest
    means = blocks.mean(axis=2)  # (k, n)
    level = means[0]
    trend = (means[0] - means[1]) / m if k > 1 else np.zeros_like(level)
    profile = (blocks - means[:, :, None]).mean(axis=0)  # (n, m), index 0 is time t0 - m
    # Within each season the trend is a ramp; it belongs to the trend, not to the pattern.
    profile -= trend[:, None] * (np.arange(m) - (m - 1) / 2)[None, :]
    profile = centered_mean(profile, max(0, round(m / 288)))
    profile -= profile.mean(axis=1, keepdims=True)
    season = np.empty((m, y.shape[0]))
    season[(np.arange(t0 - m, t0)) % m] = profile.T
    # level is the mean of the last season, centred half a season back: move it to t0 - 1
    level = level + trend * ((m - 1) / 2)
    return level, trend, season
