"""`unserved_cost`: the quantile of `upper` chosen per series by an out-of-sample backtest cost."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adapter.forecast import fit_predict, fit_predict_many
from adapter.forecast.engine import QUANTILE_CANDIDATES, _widened, choose_quantile, nearest_candidate


def normal_ppf(p: float) -> float:
    """Inverse of the standard normal CDF by bisection (the test's own, independent of the code)."""
    lo, hi = -10.0, 10.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def expected_cost(offset: float, cost: float) -> float:
    """E[(o - r)+] + cost * E[(r - o)+] for r ~ N(0, 1)."""
    pdf = math.exp(-offset * offset / 2) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1 + math.erf(offset / math.sqrt(2)))
    idle = offset * cdf + pdf
    unserved = pdf - offset * (1 - cdf)
    return idle + cost * unserved


@pytest.mark.parametrize("cost", [0.5, 3.0, 6.0, 15.0, 40.0, 500.0])
def test_choice_minimises_the_stated_cost_on_normal_residuals(cost):
    """Residuals N(0, 1) at every origin: each candidate's offset is the normal quantile at its widened
    level, so its expected cost is known in closed form; the chooser must find the cheapest."""
    rng = np.random.default_rng(7)
    n, horizon, origins = 3, 4, 40_000
    norm = rng.standard_normal((n, horizon, origins))
    weight = np.ones_like(norm)
    scale = np.ones((n, origins))
    chosen, costs = choose_quantile(norm, weight, scale, cost)
    truth = {q: expected_cost(normal_ppf(_widened(q)), cost) for q in QUANTILE_CANDIDATES}
    best = min(truth, key=lambda q: truth[q])
    assert costs.shape == (n, len(QUANTILE_CANDIDATES))
    assert chosen.tolist() == [best] * n


def test_more_expensive_unserved_demand_never_lowers_the_quantile():
    rng = np.random.default_rng(3)
    norm = rng.gumbel(size=(2, 3, 400))
    weight = np.ones_like(norm)
    scale = np.ones((2, 400))
    picks = [choose_quantile(norm, weight, scale, c)[0] for c in (0.1, 1, 4, 9, 19, 49, 1000)]
    for low, high in zip(picks, picks[1:]):
        assert np.all(high >= low)
    assert picks[0].tolist() == [0.7, 0.7] and picks[-1].tolist() == [0.98, 0.98]


def test_cost_is_scored_in_series_units_and_skips_unobserved_points():
    """The newer half of the origins is scored; a huge unserved residual there at a high-volatility
    origin pushes the choice up, and the same residual marked unobserved is ignored."""
    origins = 200
    norm = np.tile(np.linspace(-1, 1, origins // 2), 2)[None, None, :]
    weight = np.ones_like(norm)
    scale = np.ones((1, origins))
    base, _ = choose_quantile(norm, weight, scale, 4.0)
    norm2 = norm.copy()
    norm2[0, 0, -1] = 3.0
    scale2 = scale.copy()
    scale2[0, -1] = 1000.0  # one very volatile origin: its unserved units dominate the cost
    spiked, _ = choose_quantile(norm2, weight, scale2, 4.0)
    assert spiked[0] > base[0]
    weight2 = weight.copy()
    weight2[0, 0, -1] = 0.0
    ignored, _ = choose_quantile(norm2, weight2, scale2, 4.0)
    assert ignored[0] == base[0]


def test_too_few_origins_take_the_candidate_nearest_c_over_1_plus_c():
    norm = np.zeros((2, 3, 1))
    chosen, _ = choose_quantile(norm, np.ones_like(norm), np.ones((2, 1)), 9.0)
    assert chosen.tolist() == [0.9, 0.9]
    assert nearest_candidate(1.0) == 0.7 and nearest_candidate(19.0) == 0.95 and nearest_candidate(1e4) == 0.98


def seasonal_series(days: int = 10, step: float = 300.0, seed: int = 5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(days * 86400 / step)) * step
    return 100 + 40 * np.sin(2 * np.pi * t / 86400) + rng.exponential(15, t.size)


def test_fit_predict_reports_the_chosen_quantile_and_widens_with_the_cost():
    y = seasonal_series()
    fixed = fit_predict(y, 300.0, 6)
    assert fixed.quantile == 0.9 and "backtest cost" not in fixed.note
    cheap = fit_predict(y, 300.0, 6, unserved_cost=0.5)
    dear = fit_predict(y, 300.0, 6, unserved_cost=200.0)
    assert cheap.quantile in QUANTILE_CANDIDATES and dear.quantile in QUANTILE_CANDIDATES
    assert cheap.quantile < dear.quantile
    assert np.all(dear.upper >= cheap.upper) and np.any(dear.upper > cheap.upper)
    np.testing.assert_allclose(cheap.forecast, dear.forecast)  # the point forecast does not change
    assert f"quantile {dear.quantile:g} by backtest cost (unservedCost 200)" in dear.note


def test_fit_predict_many_chooses_per_series():
    calm = 100 + 40 * np.sin(2 * np.pi * np.arange(2880) / 288)
    rng = np.random.default_rng(1)
    noisy = calm + rng.standard_t(2, calm.size) * 10
    out = fit_predict_many(np.stack([calm, noisy]), 300.0, 3, unserved_cost=9.0)
    assert all(r.quantile in QUANTILE_CANDIDATES for r in out)
    one = [fit_predict(s, 300.0, 3, unserved_cost=9.0) for s in (calm, noisy)]
    assert [r.quantile for r in out] == [r.quantile for r in one]


def test_history_too_short_to_backtest_uses_the_nearest_candidate():
    result = fit_predict(np.array([5.0, 6.0, 7.0, 6.0]), 60.0, 2, unserved_cost=19.0)
    assert result.quantile == 0.95


@pytest.mark.parametrize("bad", [0, -1.0, 0.001, 1e5, math.nan, math.inf, "20", True, [20]])
def test_bad_unserved_cost_is_rejected(bad):
    with pytest.raises(ValueError, match="unserved_cost must be"):
        fit_predict(seasonal_series(days=3), 300.0, 3, unserved_cost=bad)
