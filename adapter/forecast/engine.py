"""Candidate forecasters, the rolling-origin backtest and the per-series choice of `auto`.

Every candidate is evaluated at the same origins: up to MAX_ORIGINS points spread over the most
recent BACKTEST_SPAN of history (each one with its H actual values known) plus the final origin,
the last history point, whose forecast is the answer. Backtest errors give
  * the choice of `auto`: per series and per forecast step h, the candidate (or blend) with the
    lowest mean absolute error over steps h/2..h, recent origins weighted more, and
  * the prediction interval: empirical quantiles of the chosen forecaster's backtest residuals,
    scaled by the local volatility.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from . import harmonic as harmonic_mod
from . import holt_winters as hw
from . import simple
from .prep import DAY, WEEK, Prepared, choose_season, season_steps, usable_seasons

MAX_ORIGINS = 150
# Holt-Winters recursion is a Python loop over time: bound the seasons it runs on.
HW_MAX_SEASON = 10080


@dataclass(frozen=True)
class Candidate:
    name: str  # public model name reported to the caller
    label: str  # distinguishing detail, e.g. "k=10" (for notes and the bench)
    season: int | None  # season in steps
    need: int  # history points needed before the first origin
    run: Callable[[np.ndarray, np.ndarray, int], np.ndarray]


@dataclass(frozen=True)
class Outcome:
    forecast: np.ndarray  # (n, H)
    lower: np.ndarray
    upper: np.ndarray
    model: list[str]
    season: list[int | None]
    note: list[str]
    quantile: list[float] | None = None  # per series: the quantile chosen by cost (None: as asked)


def backtest_span(step: float) -> int:
    """Steps of recent history whose points serve as backtest origins (about a day, 200..2000)."""
    return int(min(max(round(DAY / step), 200), 2000))


LEVEL_WINDOWS = (3, 10, 30)  # points averaged by the recent-level candidates


def persistence_candidates(horizon: int) -> list[Candidate]:
    out = [Candidate("lastValue", "", None, 1, simple.last_value)]
    for k in LEVEL_WINDOWS:
        out.append(Candidate("recentLevel", f"k={k}", None, k, partial(simple.recent_mean, k=k)))
    return out


def seasonal_naive_candidate(m: int) -> Candidate:
    return Candidate("seasonalNaive", "", m, m, partial(simple.seasonal_naive, m=m))


def seasonal_level_candidates(m: int, horizon: int, history: int) -> list[Candidate]:
    out = []
    smooth = max(0, round(m / 288))
    for seasons in (1, 3):
        for k in (3, 15):
            need = simple.seasonal_level_history(m, seasons, smooth, horizon, k)
            if need > history:
                continue
            out.append(
                Candidate(
                    "seasonalLevel",
                    f"seasons={seasons},k={k}",
                    m,
                    need,
                    partial(simple.seasonal_level, m=m, seasons=seasons, smooth=smooth, k=k),
                )
            )
    return out


def _holt_winters_forecasts(y: np.ndarray, origins: np.ndarray, horizon: int, m: int) -> np.ndarray:
    return hw.holt_winters(y, origins, horizon, m, hw.fit_steps(m))[0]


def holt_winters_candidate(m: int) -> Candidate:
    return Candidate("holtWinters", "", m, m + 1, partial(_holt_winters_forecasts, m=m))


def harmonic_candidate(m: int, history: int, step: float) -> Candidate | None:
    """Window: as many whole seasons as fit in the history, at most about two weeks of data."""
    seasons = min(history // m, max(1, round(2 * WEEK / step) // m))
    if seasons < 1 or m < 4:
        return None
    window = seasons * m
    k = max(3, round(m / 96))
    return Candidate(
        "harmonic", f"window={seasons}x", m, window, partial(harmonic_mod.harmonic, window=window, season=m, level_k=k)
    )


def make_origins(n_steps: int, horizon: int, span: int, need: int) -> np.ndarray:
    """Backtest origins (ascending) in [max(need, T-1-span), T-1-H]; may be empty."""
    last = n_steps - 1 - horizon
    first = max(need, n_steps - 1 - span)
    if last < first:
        return np.empty(0, dtype=int)
    count = min(MAX_ORIGINS, last - first + 1)
    return np.unique(np.linspace(first, last, count).round().astype(int))


def candidates_for(
    model: str, prep: Prepared, horizon: int, season: float | None, span: int
) -> tuple[list[Candidate], str]:
    """The candidate set for `model`, and a note about season fallbacks."""
    n_steps = prep.filled.shape[1]
    history = max(0, n_steps - 1 - span)  # points available before the first backtest origin
    if model == "lastValue":
        return persistence_candidates(horizon)[:1], ""
    if model == "auto":
        cands = persistence_candidates(horizon)
        seasons = usable_seasons(n_steps, prep.step, horizon)
        if season is not None:
            m, note = choose_season(prep, horizon, season)
            seasons = [m] if m else []
        else:
            note = _auto_season_note(seasons, prep.step, n_steps)
        # Sub-daily periods found in the data (an hourly job): seasonal naive and seasonal level.
        seasons = seasons + sorted(
            {m for m in prep.short_season if m is not None and m > horizon // 4 and m not in seasons}
        )
        for m in seasons:
            if m <= history:
                cands.append(seasonal_naive_candidate(m))
            cands.extend(seasonal_level_candidates(m, horizon, history))
            if m <= HW_MAX_SEASON and hw.history_needed(m) <= history:
                cands.append(holt_winters_candidate(m))
        if seasons:
            harm = harmonic_candidate(seasons[0], max(history, 0), prep.step)
            if harm is not None:
                cands.append(harm)
        return cands, note
    m, note = choose_season(prep, horizon, season)
    if m is None:
        k = max(1, min(10, n_steps // 4))
        return [Candidate("recentLevel", f"k={k}", None, k, partial(simple.recent_mean, k=k))], note
    if model == "seasonalNaive":
        return [seasonal_naive_candidate(m)], note
    if model == "holtWinters":
        return [holt_winters_candidate(m)], note
    harm = harmonic_candidate(m, max(history, m), prep.step)
    if harm is None:
        return [seasonal_naive_candidate(m)], note + "; too short for harmonic: used seasonal naive"
    return [harm], note


def _auto_season_note(seasons: list[int], step: float, n_steps: int) -> str:
    week = season_steps(WEEK, step)
    if week in seasons:
        return ""
    if seasons:
        return "history shorter than 2 weeks: weekly season not considered"
    return "history shorter than 2 days: used recent level only"


def run(
    prep: Prepared,
    horizon: int,
    model: str,
    season: float | None,
    quantile: float,
    unserved_cost: float | None = None,
) -> Outcome:
    y = prep.filled
    n, n_steps = y.shape
    span = backtest_span(prep.step)
    cands, note = candidates_for(model, prep, horizon, season, span)
    need = max(c.need for c in cands)
    origins = make_origins(n_steps, horizon, span, need)
    # Candidates that need more history than the backtest window leaves are dropped (auto).
    if model == "auto" and len(origins) > 0:
        cands = [c for c in cands if c.need <= origins[0]]
    elif model == "auto":
        cands = [c for c in cands if c.need <= 1] or cands[:1]
        origins = make_origins(n_steps, horizon, span, 1)
    all_origins = np.append(origins, n_steps - 1).astype(int)

    forecasts = np.stack([c.run(y, all_origins, horizon) for c in cands])  # (C, n, O+1, H)
    final = forecasts[:, :, -1, :]  # (C, n, H)
    back = forecasts[:, :, :-1, :]  # (C, n, O, H)

    if len(origins) == 0:
        if unserved_cost is None:
            return _without_backtest(prep, final[0], cands[0], horizon, quantile, note)
        q = nearest_candidate(unserved_cost)
        out = _without_backtest(prep, final[0], cands[0], horizon, q, note)
        return Outcome(out.forecast, out.lower, out.upper, out.model, out.season, out.note, [q] * n)

    idx = simple.targets(origins, horizon)
    actual = prep.raw[:, idx]  # (n, O, H): scored against what really happened
    weight = prep.observed[:, idx].astype(float)
    resid = actual[None] - back  # (C, n, O, H)
    denom = np.maximum(weight.sum(axis=1), 1.0)  # (n, H)
    mae = (np.abs(resid) * weight[None]).sum(axis=2) / denom[None]  # (C, n, H)

    names = [c.name for c in cands]
    seasons_of = [c.season for c in cands]
    sel_weight = weight * _recency(origins, span)[None, :, None]
    if len(cands) > 1:
        final, resid, mae, names, seasons_of = _add_blends(final, back, actual, weight, resid, mae, names, seasons_of)
    sel_denom = np.maximum(sel_weight.sum(axis=1), 1e-12)
    sel_mae = (np.abs(resid) * sel_weight[None]).sum(axis=2) / sel_denom[None]
    sel_mae = _pool_steps(sel_mae)
    choice = np.argmin(sel_mae, axis=0)  # (n, H)
    rows = np.arange(n)[:, None]
    cols = np.arange(horizon)[None, :]
    point = final[choice, rows, cols]  # (n, H)
    chosen_resid = resid[choice, rows, :, cols]  # (n, H, O)
    chosen_weight = np.transpose(weight, (0, 2, 1))  # (n, H, O)
    scale_back, scale_now = _volatility(y, origins), _volatility(y, all_origins[-1:])
    # Quantiles of residuals in units of the volatility at their origin, times today's volatility.
    norm = chosen_resid / scale_back[:, None, :]
    chosen_q: np.ndarray | None = None
    if unserved_cost is None:
        upper_off, lower_off = _residual_quantiles(norm, chosen_weight, _widened(quantile))
    else:
        chosen_q, costs = choose_quantile(norm, chosen_weight, scale_back, unserved_cost)
        upper_off = np.zeros((n, horizon))
        lower_off = np.zeros((n, horizon))
        for q in np.unique(chosen_q):
            rows_q = chosen_q == q
            hi, lo = _residual_quantiles(norm[rows_q], chosen_weight[rows_q], _widened(float(q)))
            upper_off[rows_q], lower_off[rows_q] = hi, lo
    upper_off, lower_off = upper_off * scale_now, lower_off * scale_now
    upper = point + upper_off
    lower = point + lower_off
    point, lower, upper = _clip_nonnegative(prep, point, lower, upper)

    models, seasons_out, notes = [], [], []
    for i in range(n):
        last = int(choice[i, -1])
        models.append(names[last])
        seasons_out.append(seasons_of[last])
        parts = [note] if note else []
        if model == "auto":
            parts.append(f"auto: picked {names[last]} by backtest MAE over {len(origins)} origins")
        if chosen_q is not None:
            parts.append(f"quantile {chosen_q[i]:g} by backtest cost (unservedCost {unserved_cost:g})")
        notes.append("; ".join(parts))
    quantiles = None if chosen_q is None else [float(q) for q in chosen_q]
    return Outcome(point, lower, upper, models, seasons_out, notes, quantiles)


# Quantiles `unservedCost` chooses from (the widening below applies to each, as to a fixed quantile).
QUANTILE_CANDIDATES = (0.7, 0.8, 0.9, 0.95, 0.98)


def nearest_candidate(unserved_cost: float, candidates: tuple[float, ...] = QUANTILE_CANDIDATES) -> float:
    """Without a backtest: the candidate nearest c / (1 + c), the quantile that minimises the stated
    cost when the interval is calibrated."""
    ideal = unserved_cost / (1.0 + unserved_cost)
    return min(candidates, key=lambda q: (abs(q - ideal), q))


def choose_quantile(
    norm: np.ndarray,
    weight: np.ndarray,
    scale_back: np.ndarray,
    unserved_cost: float,
    candidates: tuple[float, ...] = QUANTILE_CANDIDATES,
) -> tuple[np.ndarray, np.ndarray]:
    """Per series, the candidate quantile whose `upper` had the lowest stated cost on the backtest.

    norm (n, H, O): backtest residuals in units of the volatility at their origin, scale_back (n, O)
    that volatility, weight (n, H, O) > 0 where the actual value was observed. Out of sample: each
    candidate's offsets are estimated on the older half of the origins, as a fixed quantile is, and
    scored on the newer half, in the series' units: every unit of `upper` above the actual value costs
    1 (idle capacity), every unit of actual value above `upper` costs `unserved_cost` (demand not
    served). Ties go to the lower quantile. Returns (chosen quantile per series (n,), costs (n, K)).
    """
    n, _, n_origins = norm.shape
    split = n_origins // 2
    if split < 1 or n_origins - split < 1:
        # Too few origins to estimate on some and score on others: c / (1 + c), the quantile that
        # minimises this cost for a calibrated interval, rounded to the nearest candidate.
        return np.full(n, nearest_candidate(unserved_cost, candidates)), np.zeros((n, len(candidates)))
    fit_norm, fit_w = norm[:, :, :split], weight[:, :, :split]
    test_resid = norm[:, :, split:] * scale_back[:, None, split:]  # actual - point, in series units
    test_scale = scale_back[:, None, split:]
    test_w = weight[:, :, split:]
    costs = np.empty((n, len(candidates)))
    for k, q in enumerate(candidates):
        offset, _ = _residual_quantiles(fit_norm, fit_w, _widened(q))  # (n, H)
        gap = offset[:, :, None] * test_scale - test_resid  # upper - actual
        cost = np.where(gap >= 0, gap, -gap * unserved_cost)
        costs[:, k] = (cost * test_w).sum(axis=(1, 2))
    best = np.argmin(costs, axis=1)  # the first minimum: the lower quantile on a tie
    return np.asarray(candidates, dtype=float)[best], costs


def _add_blends(
    final: np.ndarray,
    back: np.ndarray,
    actual: np.ndarray,
    weight: np.ndarray,
    resid: np.ndarray,
    mae: np.ndarray,
    names: list[str],
    seasons_of: list[int | None],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str], list[int | None]]:
    """Add blends of the candidates (kinds in BLENDS).

    Averaging forecasters that err differently (persistence lags, seasonal profiles misjudge the
    level) often beats each one. "topK" averages the K candidates with the lowest backtest MAE;
    "good" all whose backtest MAE is within 15 % of the best.
    """
    n_c = len(names)
    order = np.argsort(mae, axis=0)  # (C, n, H)
    extra_final, extra_back = [], []
    for kind in BLENDS:
        if kind.startswith("top"):
            top = int(kind[3:])
            if n_c < top + 1:
                continue
            pick = order[:top]  # (top, n, H)
            f = np.take_along_axis(final, pick, axis=0).mean(axis=0)  # (n, H)
            b_pick = np.broadcast_to(pick[:, :, None, :], (top,) + back.shape[1:])
            b = np.take_along_axis(back, b_pick, axis=0).mean(axis=0)  # (n, O, H)
        elif kind == "good":
            if n_c < 3:
                continue
            member = (mae <= 1.15 * mae.min(axis=0, keepdims=True)).astype(float)  # (C, n, H)
            count = member.sum(axis=0)
            f = (final * member).sum(axis=0) / count
            b = (back * member[:, :, None, :]).sum(axis=0) / count[:, None, :]
        else:
            raise AssertionError(kind)
        extra_final.append(f)
        extra_back.append(b)
        names = names + ["blend"]
        seasons_of = seasons_of + [seasons_of[int(np.bincount(order[0].ravel()).argmax())]]
    if not extra_final:
        return final, resid, mae, names, seasons_of
    ef = np.stack(extra_final)
    eb = np.stack(extra_back)
    er = actual[None] - eb
    denom = np.maximum(weight.sum(axis=1), 1.0)
    emae = (np.abs(er) * weight[None]).sum(axis=2) / denom[None]
    return (np.concatenate([final, ef]), np.concatenate([resid, er]), np.concatenate([mae, emae]), names, seasons_of)


# Choice of `auto`, tuned with bench/forecast.py on the shared traces (15-minute horizon):
RECENCY_HALF_LIFE = 0.25  # fraction of the backtest span after which an origin's weight halves
BLENDS = ("top2", "top3", "good")
# Prediction interval:
VOLATILITY_WINDOW = 30  # points before an origin whose mean |change| scales its residual
VOLATILITY_MIX = 0.5  # share of that local volatility (the rest: whole-history volatility)
QUANTILE_WIDENING = 0.3  # 0.9 -> 0.93: makes up for picking the best backtest (optimism)


def _pool_steps(mae: np.ndarray) -> np.ndarray:
    """Average the error of step h with that of steps h/2..h: a choice less at the mercy of noise."""
    csum = np.concatenate([np.zeros(mae.shape[:-1] + (1,)), np.cumsum(mae, axis=-1)], axis=-1)
    steps = np.arange(1, mae.shape[-1] + 1)
    lo = steps - (steps + 1) // 2
    return (csum[..., steps] - csum[..., lo]) / (steps - lo)


def _recency(origins: np.ndarray, span: int) -> np.ndarray:
    """Weights of backtest origins for the choice: recent ones count more after a change."""
    return 0.5 ** ((origins[-1] - origins) / (RECENCY_HALF_LIFE * span))


def _widened(quantile: float) -> float:
    return quantile + (1 - quantile) * QUANTILE_WIDENING


def _volatility(y: np.ndarray, origins: np.ndarray) -> np.ndarray:
    """(n, n_origins): mean absolute one-step change over the recent window at each origin.

    Residuals are divided by it at backtest origins and multiplied by it at the final origin,
    so a quiet night after a busy day gets a narrower interval, and a busy morning a wider one.
    Mixed with the whole-history value so one flat hour does not collapse the interval.
    """
    w = VOLATILITY_WINDOW
    # whole-history mean |one-step change|, from every 7th pair of neighbours (cheap, unbiased)
    ends = y.shape[1] - 1
    overall = (
        np.abs(y[:, 1 : ends + 1 : 7] - y[:, 0:ends:7]).mean(axis=1, keepdims=True)
        if ends > 0
        else np.zeros((y.shape[0], 1))
    )
    # Only the stretch the origins look at is differenced in full (the history can be long).
    start = max(int(origins.min()) - w - 1, 0)
    y = y[:, start:]
    origins = origins - start
    diffs = np.abs(np.diff(y, axis=1))
    csum = np.zeros((y.shape[0], diffs.shape[1] + 1))
    np.cumsum(diffs, axis=1, out=csum[:, 1:])
    hi = np.maximum(origins, 1)
    lo = np.maximum(hi - w, 0)
    local = (csum[:, hi] - csum[:, lo]) / np.maximum(hi - lo, 1)
    mix = VOLATILITY_MIX
    vol = mix * local + (1 - mix) * overall
    return np.where(vol > 0, vol, 1.0)


def _residual_quantiles(resid: np.ndarray, weight: np.ndarray, quantile: float) -> tuple[np.ndarray, np.ndarray]:
    """Per series and step: the `quantile` and `1-quantile` of observed backtest residuals."""
    valid = weight > 0
    hi = masked_quantile(resid, valid, quantile)
    lo = masked_quantile(resid, valid, 1 - quantile)
    return np.maximum(hi, 0.0), np.minimum(lo, 0.0)


def masked_quantile(x: np.ndarray, valid: np.ndarray, q: float) -> np.ndarray:
    """Quantile (linear interpolation) over the last axis of the valid entries; 0 where none.

    One sort for the whole array instead of np.nanquantile's per-row Python loop.
    """
    ordered = np.sort(np.where(valid, x, np.inf), axis=-1)
    count = valid.sum(axis=-1)
    pos = q * np.maximum(count - 1, 0)
    below = np.floor(pos).astype(int)
    above = np.minimum(below + 1, np.maximum(count - 1, 0))
    frac = pos - below
    lo_val = np.take_along_axis(ordered, below[..., None], axis=-1)[..., 0]
    hi_val = np.take_along_axis(ordered, above[..., None], axis=-1)[..., 0]
    out = lo_val + frac * (hi_val - lo_val)
    return np.where(count > 0, np.nan_to_num(out, posinf=0.0, neginf=0.0), 0.0)


def _without_backtest(
    prep: Prepared, point: np.ndarray, cand: Candidate, horizon: int, quantile: float, note: str
) -> Outcome:
    """Too short to backtest: intervals from the spread of h-step changes in the history."""
    y = prep.filled
    n, n_steps = y.shape
    spread = np.zeros((n, horizon))
    for h in range(1, horizon + 1):
        if n_steps > h:
            diffs = y[:, h:] - y[:, :-h]
            spread[:, h - 1] = np.quantile(np.abs(diffs), quantile, axis=1)
        else:
            spread[:, h - 1] = np.abs(y - y.mean(axis=1, keepdims=True)).max(axis=1)
    point, lower, upper = _clip_nonnegative(prep, point, point - spread, point + spread)
    extra = "history too short to backtest: interval from the spread of past changes"
    full = "; ".join(p for p in (note, extra) if p)
    return Outcome(point, lower, upper, [cand.name] * n, [cand.season] * n, [full] * n)


def _clip_nonnegative(
    prep: Prepared, point: np.ndarray, lower: np.ndarray, upper: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A series that was never negative (rates, counts, CPU) is not forecast negative."""
    floor = np.where(prep.nonnegative[:, None], 0.0, -np.inf)
    return np.maximum(point, floor), np.maximum(lower, floor), np.maximum(upper, floor)
