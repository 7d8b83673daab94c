"""Announced events as regressors: learn from history what one announced unit does to load.

    load(t) ~ base(t) + sum_i beta_i * event_i(t)

`event_i(t)` is an announced series (another VirtualMetricEvent's items, a schedule: 0 when nothing
is announced). The base is whatever the forecasting models make of the history *without* the events'
effect, so the fit goes in three steps:

1. a robust local baseline: the running median of the load over a window several times longer than
   the longest event, so an event does not move it;
2. beta by Huber-weighted least squares (IRLS) of (load - baseline) on the event series, with its
   covariance from the final weights and a robust residual scale (MAD);
3. the history with the fitted effect removed goes to the usual model; the forecast adds
   beta . event(future) back, and the interval is widened in quadrature by the effect's
   uncertainty, z_q * sqrt(x' Cov x + (tau * beta . x)^2) for the announced x at each step: the
   coefficients' own error plus tau, the relative spread of one event's effect around its mean
   (measured on the history's event steps, `effect_dispersion`).

numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

HUBER_K = 1.345  # 95 % efficiency under Gaussian noise
IRLS_ITERATIONS = 20
MIN_BASELINE_HALF_WIDTH = 6  # steps
BASELINE_EVENT_FACTOR = 3  # baseline half-width, in units of the longest event
MAX_BASELINE_HALF_WIDTH = 720


@dataclass(frozen=True)
class Effects:
    """Fitted effect of one unit of each regressor on the load."""

    names: tuple[str, ...]
    beta: np.ndarray  # (k,)
    stderr: np.ndarray  # (k,)
    cov: np.ndarray  # (k, k)
    samples: np.ndarray  # (k,): history steps where the regressor was non-zero
    scale: float  # robust residual scale of the load around baseline + effect
    # Relative spread of one event's effect around beta . x (0.25: a crowd is typically 25 % off
    # what was announced): the effect is uncertain even with beta known exactly.
    dispersion: float = 0.0

    def as_dict(self) -> list[dict[str, float | int | str]]:
        """For status and CLI output: one row per regressor."""
        rows: list[dict[str, float | int | str]] = []
        for name, b, s, n in zip(self.names, self.beta, self.stderr, self.samples):
            row: dict[str, float | int | str] = {"name": name, "coefficient": _round(float(b)), "samples": int(n)}
            if math.isfinite(s):  # a regressor that never fired has no error estimate (and JSON no inf)
                row["stderr"] = _round(float(s))
            rows.append(row)
        return rows

    def describe(self) -> str:
        return ", ".join(
            f"{r['name']}: {r['coefficient']:g} ± {r.get('stderr', math.inf):g} per unit ({r['samples']} steps)"
            for r in self.as_dict()
        )


def _round(x: float) -> float:
    return float(f"{x:.4g}") if math.isfinite(x) else x


def running_median(y: np.ndarray, half_width: int) -> np.ndarray:
    """Median of y over [t - w, t + w] (the window shrinks at the ends)."""
    n = len(y)
    w = int(max(0, min(half_width, (n - 1) // 2)))
    if w == 0:
        return y.astype(float).copy()
    padded = np.concatenate([np.full(w, np.nan), y.astype(float), np.full(w, np.nan)])
    windows = np.lib.stride_tricks.sliding_window_view(padded, 2 * w + 1)
    # A wide median barely moves from one step to the next: evaluate it every w/4 steps (and at
    # the last one) and interpolate, which makes it w/4 times cheaper.
    stride = max(1, w // 4)
    at = np.unique(np.append(np.arange(0, n, stride), n - 1))
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN windows: filled by the caller
            coarse = np.nanmedian(windows[at], axis=1)
    good = np.isfinite(coarse)
    if not good.any():
        return np.full(n, np.nan)
    return np.interp(np.arange(n), at[good], coarse[good])


def baseline_half_width(events: np.ndarray) -> int:
    """Steps each side of the baseline median: several times the longest announced run."""
    longest = 0
    for column in np.atleast_2d(events.T):
        active = np.concatenate([[0], (column != 0).astype(np.int8), [0]])
        edges = np.flatnonzero(np.diff(active))
        if len(edges):
            longest = max(longest, int((edges[1::2] - edges[0::2]).max()))
    return int(min(max(MIN_BASELINE_HALF_WIDTH, BASELINE_EVENT_FACTOR * longest), MAX_BASELINE_HALF_WIDTH))


def fit_effects(values: np.ndarray, events: np.ndarray, names: Sequence[str]) -> Effects:
    """beta, its standard error and covariance from the history (NaN = gap, not scored).

    `values` (T,), `events` (T, k): the announced values at each history step (0 = none).
    """
    y = np.asarray(values, dtype=float)
    x = np.asarray(events, dtype=float).reshape(len(y), -1)
    k = x.shape[1]
    if len(names) != k:
        raise ValueError(f"{k} regressor columns but {len(names)} names")
    x = np.where(np.isfinite(x), x, 0.0)
    ok = np.isfinite(y)
    filled = y.copy()
    if not ok.all():
        if not ok.any():
            raise ValueError("history has no numeric value")
        pos = np.arange(len(y))
        filled = np.interp(pos, pos[ok], y[ok])
    # The baseline ignores event steps where it can (median of the non-event neighbours).
    quiet = np.where((x != 0).any(axis=1), np.nan, filled)
    if np.isnan(quiet).all():
        quiet = filled
    base = running_median(quiet, baseline_half_width(x))
    base = np.where(np.isfinite(base), base, running_median(filled, baseline_half_width(x)))
    r = (filled - base)[ok]
    xo = x[ok]
    samples = (xo != 0).sum(axis=0)
    beta = np.zeros(k)
    cov = np.zeros((k, k))
    scale = _mad(r)
    used = samples > 0
    if used.any():
        xu = xo[:, used]
        # Only steps near announced events inform beta; the rest only sets the noise scale.
        w = np.ones(len(r))
        b = np.zeros(xu.shape[1])
        s = max(scale, 1e-12)
        for _ in range(IRLS_ITERATIONS):
            xtw = xu.T * w
            try:
                b_new = np.linalg.solve(xtw @ xu + 1e-9 * np.eye(xu.shape[1]), xtw @ r)
            except np.linalg.LinAlgError:
                b_new = np.linalg.lstsq(xtw @ xu, xtw @ r, rcond=None)[0]
            resid = r - xu @ b_new
            s = max(_mad(resid[(xu != 0).any(axis=1)]) if (xu != 0).any() else _mad(resid), scale, 1e-12)
            u = np.abs(resid) / (HUBER_K * s)
            w = np.where(u <= 1, 1.0, 1.0 / np.maximum(u, 1e-12))
            converged = np.allclose(b_new, b, rtol=1e-6, atol=1e-9 * (1 + np.abs(b).max()))
            b = b_new
            if converged:
                break
        resid = r - xu @ b
        active = (xu != 0).any(axis=1)
        s_event = _mad(resid[active]) if active.sum() > 1 else scale
        s = max(s_event, 1e-12)
        xtw = xu.T * w
        try:
            inv = np.linalg.inv(xtw @ xu + 1e-9 * np.eye(xu.shape[1]))
        except np.linalg.LinAlgError:
            inv = np.linalg.pinv(xtw @ xu)
        dof = max(int(active.sum()) - xu.shape[1], 1)
        c = inv * s * s * max(int(active.sum()), 1) / dof
        # Steps of one event share its surprise (a bigger crowd than announced lifts every step), so
        # independent-step errors would be too optimistic: also compute the cluster-robust (sandwich)
        # covariance with one cluster per contiguous announced run, and keep the larger.
        run_id = np.cumsum(np.concatenate([[1], (active[1:] & ~active[:-1]).astype(int)]))[active]
        groups = int(run_id.max() - run_id.min() + 1) if len(run_id) else 0
        if groups > xu.shape[1]:
            score = xu[active] * (w[active] * np.clip(resid[active], -HUBER_K * s, HUBER_K * s))[:, None]
            sums = np.zeros((int(run_id.max()) + 1, xu.shape[1]))
            np.add.at(sums, run_id, score)
            meat = sums.T @ sums
            # Huber's bread: psi' is 1 inside the band and 0 outside (clipped steps carry no slope).
            inside = (np.abs(resid) <= HUBER_K * s).astype(float)
            bread = (xu.T * inside) @ xu
            try:
                bread_inv = np.linalg.inv(bread + 1e-9 * np.eye(xu.shape[1]))
            except np.linalg.LinAlgError:
                bread_inv = np.linalg.pinv(bread)
            robust = bread_inv @ meat @ bread_inv * groups / (groups - xu.shape[1])
            if np.trace(robust) > np.trace(c):
                c = robust
        beta[used] = b
        idx = np.flatnonzero(used)
        cov[np.ix_(idx, idx)] = c
        dispersion = effect_dispersion(resid, xu @ b, active)
    else:
        dispersion = 0.0
    stderr = np.sqrt(np.maximum(np.diag(cov), 0.0))
    stderr = np.where(used, stderr, np.inf)
    return Effects(tuple(names), beta, stderr, cov, samples, float(scale), dispersion)


MAX_DISPERSION = 2.0


def effect_dispersion(resid: np.ndarray, effect: np.ndarray, active: np.ndarray) -> float:
    """tau: the relative spread of an event's effect, var(resid at event steps) ~ s^2 + tau^2 effect^2.

    Moments, made robust: the quiet steps give the noise scale s (MAD), event-step residuals are
    winsorised at 5 robust scales before the excess variance is taken. Without it the interval at an
    announced step only carries the uncertainty of beta, which shrinks with more history, while each
    event's own surprise (a crowd bigger or smaller than announced) does not."""
    if active.sum() < 2 or (~active).sum() < 2:
        return 0.0
    quiet = _mad(resid[~active])
    ra, ea = resid[active], effect[active]
    limit = 5.0 * max(_mad(ra), quiet, 1e-12)
    ra = np.clip(ra, -limit, limit)
    energy = float((ea**2).sum())
    if energy <= 0:
        return 0.0
    excess = float((ra**2).sum()) - len(ra) * quiet**2
    return float(min(math.sqrt(max(excess, 0.0) / energy), MAX_DISPERSION))


def _mad(r: np.ndarray) -> float:
    if len(r) == 0:
        return 0.0
    return float(1.4826 * np.median(np.abs(r - np.median(r))))


def remove_effects(values: np.ndarray, events: np.ndarray, effects: Effects) -> np.ndarray:
    """The history as it would have been without the announced events."""
    x = np.where(np.isfinite(events), events, 0.0).reshape(len(values), -1)
    return np.asarray(values, dtype=float) - x @ _finite_beta(effects)


def _finite_beta(effects: Effects) -> np.ndarray:
    return np.where(np.isfinite(effects.stderr), effects.beta, 0.0)


def add_effects(
    forecast: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    future: np.ndarray,
    effects: Effects,
    quantile: float,
    nonnegative: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Forecast + beta . x(future); the interval widened in quadrature by the effect's uncertainty:
    the coefficients' (x' Cov x) and each event's own spread around its mean ((tau . beta x)^2)."""
    x = np.where(np.isfinite(future), future, 0.0).reshape(len(forecast), -1)
    effect = x @ _finite_beta(effects)
    cov = np.where(np.isfinite(effects.cov), effects.cov, 0.0)
    variance = np.einsum("hi,ij,hj->h", x, cov, x) + (effects.dispersion * effect) ** 2
    spread = np.sqrt(np.maximum(variance, 0.0)) * _z(quantile)
    point = forecast + effect
    up = point + np.sqrt((upper - forecast) ** 2 + spread**2)
    lo = point - np.sqrt((forecast - lower) ** 2 + spread**2)
    if nonnegative:
        point, lo, up = np.maximum(point, 0.0), np.maximum(lo, 0.0), np.maximum(up, 0.0)
    return point, lo, up


def _z(quantile: float) -> float:
    """Standard normal quantile (Acklam's rational approximation; numpy has no ppf)."""
    p = min(max(quantile, 1e-9), 1 - 1e-9)
    a = (
        -3.969683028665376e01,
        2.209460984245205e02,
        -2.759285104469687e02,
        1.383577518672690e02,
        -3.066479806614716e01,
        2.506628277459239e00,
    )
    b = (
        -5.447609879822406e01,
        1.615858368580409e02,
        -1.556989798598866e02,
        6.680131188771972e01,
        -1.328068155922141e01,
    )
    c = (
        -7.784894002430293e-03,
        -3.223964580411365e-01,
        -2.400758277161838e00,
        -2.549732539343734e00,
        4.374664141464968e00,
        2.938163982698783e00,
    )
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
    if p < 0.02425:
        q = math.sqrt(-2 * math.log(p))
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / (
            (((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1
        )
    if p > 1 - 0.02425:
        return -_z(1 - p)
    q = p - 0.5
    r = q * q
    return (
        (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5])
        * q
        / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)
    )


@dataclass(frozen=True)
class FusedResult:
    forecast: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    model: str
    season: float | None
    note: str
    effects: Effects
    baseline: np.ndarray  # the forecast without the events' effect
    quantile: float = 0.9  # quantile of `upper` (chosen by backtest cost when unserved_cost is given)


def fit_predict_fused(
    values: np.ndarray,
    step: float,
    horizon: int,
    events: np.ndarray,
    future: np.ndarray,
    names: Sequence[str],
    model: str = "auto",
    season: float | None = None,
    quantile: float = 0.9,
    unserved_cost: float | None = None,
) -> FusedResult:
    """`fit_predict` with announced regressors: events (T, k) over the history, future (horizon, k)."""
    from adapter.forecast import fit_predict

    y = np.asarray(values, dtype=float)
    ev = np.asarray(events, dtype=float).reshape(len(y), -1)
    fut = np.asarray(future, dtype=float).reshape(horizon, -1)
    if fut.shape[1] != ev.shape[1]:
        raise ValueError(f"future has {fut.shape[1]} regressor columns, history {ev.shape[1]}")
    effects = fit_effects(y, ev, names)
    base = fit_predict(
        remove_effects(y, ev, effects),
        step,
        horizon,
        model=model,
        season=season,
        quantile=quantile,
        unserved_cost=unserved_cost,
    )
    nonneg = bool(np.all(y[np.isfinite(y)] >= 0))
    point, lower, upper = add_effects(base.forecast, base.lower, base.upper, fut, effects, base.quantile, nonneg)
    note = "; ".join(p for p in (base.note, f"regressors: {effects.describe()}") if p)
    return FusedResult(
        point,
        lower,
        upper,
        base.model,
        base.season,
        note,
        effects,
        np.asarray(base.forecast, dtype=float),
        base.quantile,
    )


__all__ = ["Effects", "FusedResult", "add_effects", "fit_effects", "fit_predict_fused", "remove_effects"]
