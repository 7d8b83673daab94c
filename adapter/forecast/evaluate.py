"""Rolling-origin evaluation shared by `prescaler backtest` and bench/forecast.py.

At each origin the model sees a history window of the same length ending at that origin, so all
origins form one (n_origins, window) batch for fit_predict_many. The error is scored at exactly
`horizon` steps ahead (the value the autoscaler will act on).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import fit_predict_many
from .prep import DAY, WEEK, season_steps

MAX_WINDOW_SECONDS = 28 * DAY


@dataclass(frozen=True)
class Scores:
    model: str
    mae: float
    mase: float
    coverage: float  # share of actual values <= upper
    within: float  # share of actual values within [lower, upper]
    chosen: dict[str, int]  # model actually used -> count of origins


def pick_origins(
    n_steps: int, step: float, horizon: int, count: int = 48, span_seconds: float = WEEK, min_history: int = 1
) -> np.ndarray:
    """`count` origins spread evenly over the last `span_seconds` (each with its actual known)."""
    last = n_steps - 1 - horizon
    first = max(min_history, last - int(span_seconds / step))
    if last < first:
        raise ValueError(f"series too short to backtest: {n_steps} points, need at least {min_history + horizon + 1}")
    count = max(1, min(count, last - first + 1))
    return np.unique(np.linspace(first, last, count).round().astype(int))


def window_batch(values: np.ndarray, origins: np.ndarray, step: float) -> np.ndarray:
    """(n_origins, L) histories ending at each origin, L equal for all (as long as allowed)."""
    length = int(min(origins[0] + 1, MAX_WINDOW_SECONDS / step))
    idx = origins[:, None] - np.arange(length - 1, -1, -1)[None, :]
    return values[idx]


def mase_scale(values: np.ndarray, step: float, end: int) -> float:
    """In-sample MAE of seasonal naive (daily season) before `end`: the MASE denominator."""
    m = season_steps(DAY, step)
    hist = values[:end]
    if len(hist) <= m:
        m = 1
    diffs = np.abs(hist[m:] - hist[:-m])
    scale = float(np.nanmean(diffs)) if np.any(np.isfinite(diffs)) else 0.0
    return scale if scale > 0 else 1.0


def score(
    values: np.ndarray,
    step: float,
    horizon: int,
    model: str,
    origins: np.ndarray,
    season: float | None = None,
    quantile: float = 0.9,
) -> Scores:
    batch = window_batch(values, origins, step)
    results = fit_predict_many(batch, step, horizon, model=model, season=season, quantile=quantile)
    return scores_from(values, step, horizon, model, origins, results)


def scores_from(
    values: np.ndarray, step: float, horizon: int, model: str, origins: np.ndarray, results: list
) -> Scores:
    actual = values[origins + horizon]
    point = np.array([r.forecast[-1] for r in results])
    upper = np.array([r.upper[-1] for r in results])
    lower = np.array([r.lower[-1] for r in results])
    ok = np.isfinite(actual)
    err = np.abs(actual - point)[ok]
    scale = mase_scale(values, step, int(origins[0]) + 1)
    chosen: dict[str, int] = {}
    for r in results:
        chosen[r.model] = chosen.get(r.model, 0) + 1
    return Scores(
        model=model,
        mae=float(err.mean()),
        mase=float(err.mean() / scale),
        coverage=float(np.mean(actual[ok] <= upper[ok])),
        within=float(np.mean((actual[ok] <= upper[ok]) & (actual[ok] >= lower[ok]))),
        chosen=chosen,
    )


def score_fused(
    values: np.ndarray,
    events: np.ndarray,
    names: list[str],
    step: float,
    horizon: int,
    model: str,
    origins: np.ndarray,
    season: float | None = None,
    quantile: float = 0.9,
) -> tuple[Scores, object]:
    """`score` with announced regressors (T, k): at each origin the effects are fitted on that
    origin's window only, the announced values of the next `horizon` steps are known (announced
    ahead). Returns the scores and the effects fitted at the last origin."""
    from .regressors import add_effects, fit_effects, remove_effects

    batch = window_batch(values, origins, step)
    length = batch.shape[1]
    cleaned, effects_of, futures = [], [], []
    for row, origin in zip(batch, origins):
        x = events[origin - length + 1 : origin + 1]
        effects = fit_effects(row, x, names)
        cleaned.append(remove_effects(row, x, effects))
        effects_of.append(effects)
        futures.append(events[origin + 1 : origin + 1 + horizon])
    base = fit_predict_many(np.stack(cleaned), step, horizon, model=model, season=season, quantile=quantile)
    fused = []
    for res, effects, future in zip(base, effects_of, futures):
        f, lo, up = add_effects(
            res.forecast,
            res.lower,
            res.upper,
            future,
            effects,
            quantile,
            bool(np.all(values[np.isfinite(values)] >= 0)),
        )
        fused.append(_Fused(f, lo, up, res.model))
    return scores_from(values, step, horizon, f"{model}+regressors", origins, fused), effects_of[-1]


@dataclass(frozen=True)
class _Fused:
    forecast: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    model: str
