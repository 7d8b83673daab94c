"""Forecasting models for the `forecast` source (numpy only).

Public API: `fit_predict` for one series, `fit_predict_many` for many equally long series at once
(vectorised), `ForecastResult`, `MODELS`. See engine.py for how `auto` chooses and how the
prediction intervals are made.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import engine
from .prep import fill_gaps, validate, validate_unserved_cost

SERIES_PER_CHUNK = 128

MODELS = ("seasonalNaive", "holtWinters", "harmonic", "auto", "lastValue")


@dataclass(frozen=True)
class ForecastResult:
    forecast: np.ndarray  # shape (horizon,)
    lower: np.ndarray
    upper: np.ndarray
    model: str  # model actually used, e.g. "holtWinters"
    season: float | None  # season used, in seconds (None = no seasonality)
    note: str  # e.g. "history shorter than 2 weeks: used daily season"
    quantile: float = 0.9  # quantile of `upper`: the one asked for, or the one `unserved_cost` chose


def fit_predict(
    values: np.ndarray,
    step: float,
    horizon: int,
    model: str = "auto",
    season: float | None = None,
    quantile: float = 0.9,
    unserved_cost: float | None = None,
) -> ForecastResult:
    """Forecast `horizon` steps after the last value of one equally spaced history (NaN = gap)."""
    arr = np.asarray(values, dtype=float) if not isinstance(values, np.ndarray) else values
    if np.ndim(arr) != 1:
        raise ValueError(
            f"fit_predict takes one series (1-D), got shape {np.shape(arr)}; use fit_predict_many for several"
        )
    return fit_predict_many(arr[None, :], step, horizon, model, season, quantile, unserved_cost)[0]


def fit_predict_many(
    values: np.ndarray,
    step: float,
    horizon: int,
    model: str = "auto",
    season: float | None = None,
    quantile: float = 0.9,
    unserved_cost: float | None = None,
) -> list[ForecastResult]:
    """Forecast every row of `values` (n_series, n_steps); all rows share step and length.

    `unserved_cost`: choose the quantile of `upper` per series by backtest instead of `quantile`
    (engine.choose_quantile): one unit of demand above `upper` costs this many units of capacity
    above demand."""
    if model not in MODELS:
        raise ValueError(f"unknown forecast model {model!r}: expected one of {', '.join(MODELS)}")
    if season is not None and (not isinstance(season, (int, float)) or not np.isfinite(season) or season <= 0):
        raise ValueError(f"season must be a positive number of seconds, got {season!r}")
    arr = validate(values, step, horizon, quantile)
    validate_unserved_cost(unserved_cost)
    results = []
    # Chunks bound the memory of the backtest arrays (candidates x series x origins x steps)
    # while keeping the numpy calls big enough to amortise their overhead.
    for lo in range(0, arr.shape[0], SERIES_PER_CHUNK):
        prep = fill_gaps(arr[lo : lo + SERIES_PER_CHUNK], step)
        cost = None if unserved_cost is None else float(unserved_cost)
        out = engine.run(prep, int(horizon), model, season, float(quantile), cost)
        for i in range(prep.filled.shape[0]):
            season_used = out.season[i]
            results.append(
                ForecastResult(
                    forecast=out.forecast[i].copy(),
                    lower=out.lower[i].copy(),
                    upper=out.upper[i].copy(),
                    model=out.model[i],
                    season=None if season_used is None else season_used * float(step),
                    note=out.note[i],
                    quantile=float(quantile) if out.quantile is None else out.quantile[i],
                )
            )
    return results


__all__ = ["MODELS", "ForecastResult", "fit_predict", "fit_predict_many"]
