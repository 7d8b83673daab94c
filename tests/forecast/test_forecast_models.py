"""Forecast models on synthetic series whose future is known by construction."""

from __future__ import annotations

import numpy as np
import pytest

from adapter.forecast import MODELS, ForecastResult, fit_predict, fit_predict_many

HOUR = 3600.0
DAY = 86400.0
WEEK = 7 * DAY


def pattern(t: np.ndarray, period: float) -> np.ndarray:
    """A non-sinusoidal daily shape (two harmonics), so seasonal naive has something to copy."""
    phase = 2 * np.pi * t / period
    return 50 + 20 * np.sin(phase) + 5 * np.cos(3 * phase)


def future(n_hist: int, horizon: int) -> np.ndarray:
    return np.arange(n_hist, n_hist + horizon)


def test_pure_seasonal_series_is_continued_exactly_by_seasonal_naive():
    step = 300.0
    m = int(DAY / step)
    t = np.arange(10 * m)
    res = fit_predict(pattern(t, m), step, 12, model="seasonalNaive")
    np.testing.assert_allclose(res.forecast, pattern(future(len(t), 12), m), atol=1e-9)
    assert res.model == "seasonalNaive"
    assert res.season == DAY


def test_seasonal_naive_beyond_one_season_repeats_the_last_season():
    step = HOUR
    t = np.arange(24 * 5)
    y = pattern(t, 24)
    res = fit_predict(y, step, 30, model="seasonalNaive", season=DAY)
    np.testing.assert_allclose(res.forecast, pattern(future(len(t), 30), 24), atol=1e-9)


def test_holt_winters_follows_linear_trend_plus_season():
    t = np.arange(24 * 20)
    y = 100 + 0.5 * t + 10 * np.sin(2 * np.pi * t / 24)
    tt = future(len(t), 12)
    truth = 100 + 0.5 * tt + 10 * np.sin(2 * np.pi * tt / 24)
    res = fit_predict(y, HOUR, 12, model="holtWinters")
    assert res.model == "holtWinters" and res.season == DAY
    # Seasonal naive misses the trend by 24 steps x 0.5 = 12 at every step; HW must see it.
    assert np.abs(res.forecast - truth).mean() < 1.0


def test_harmonic_continues_a_sum_of_sinusoids():
    step = 300.0
    m = int(DAY / step)
    t = np.arange(10 * m)
    res = fit_predict(pattern(t, m), step, 24, model="harmonic")
    assert res.model == "harmonic"
    np.testing.assert_allclose(res.forecast, pattern(future(len(t), 24), m), atol=1e-6)


def test_harmonic_keeps_a_linear_trend():
    step = HOUR
    t = np.arange(24 * 14)
    y = 10 + 0.2 * t + pattern(t, 24)
    tt = future(len(t), 6)
    res = fit_predict(y, step, 6, model="harmonic", season=DAY)
    np.testing.assert_allclose(res.forecast, 10 + 0.2 * tt + pattern(tt, 24), atol=0.05)


@pytest.mark.parametrize("model", MODELS)
def test_constant_series_gives_that_constant_with_zero_width_interval(model):
    res = fit_predict(np.full(24 * 15, 7.0), HOUR, 5, model=model)
    np.testing.assert_allclose(res.forecast, 7.0)
    np.testing.assert_allclose(res.lower, 7.0)
    np.testing.assert_allclose(res.upper, 7.0)


@pytest.mark.parametrize("model", MODELS)
def test_gaps_are_tolerated_and_results_finite(model):
    step = 300.0
    m = int(DAY / step)
    t = np.arange(9 * m)
    y = pattern(t, m)
    y[100:400] = np.nan  # a long gap
    y[::37] = np.nan  # scattered missing points
    y[-3] = np.nan  # a gap right before the forecast
    res = fit_predict(y, step, 6, model=model)
    assert np.all(np.isfinite(res.forecast)) and np.all(np.isfinite(res.upper))
    assert np.all(res.lower <= res.forecast + 1e-9) and np.all(res.forecast <= res.upper + 1e-9)
    truth = pattern(future(len(t), 6), m)
    # Every model here knows about the day pattern or the last level: errors stay small vs the 40 swing.
    assert np.abs(res.forecast - truth).max() < 6


def test_leading_gap_and_gap_at_the_end_are_filled():
    y = np.concatenate([np.full(10, np.nan), np.arange(50.0), np.full(2, np.nan)])
    res = fit_predict(y, 60.0, 3, model="lastValue")
    np.testing.assert_allclose(res.forecast, 49.0)


def test_zeros_and_bursts_never_forecast_negative():
    rng = np.random.default_rng(3)
    y = np.zeros(288 * 8)
    bursts = rng.choice(len(y), size=40, replace=False)
    y[bursts] = rng.uniform(50, 200, size=40)
    for model in MODELS:
        res = fit_predict(y, 300.0, 6, model=model)
        assert np.all(res.forecast >= 0) and np.all(res.lower >= 0), model
        assert np.all(np.isfinite(res.upper)), model


def test_negative_series_is_not_clipped_at_zero():
    y = -100 + np.sin(np.arange(500) / 5.0)
    res = fit_predict(y, 60.0, 3, model="lastValue")
    assert np.all(res.forecast < -98)


def test_auto_follows_a_level_shift():
    step = 300.0
    m = int(DAY / step)
    t = np.arange(10 * m)
    y = pattern(t, m)
    y[-m // 2 :] += 100  # the last 12 hours are 100 higher than any earlier day
    res = fit_predict(y, step, 3, model="auto")
    truth = pattern(future(len(t), 3), m) + 100
    # Seasonal naive would be off by 100; a level-aware forecaster is close.
    assert np.abs(res.forecast - truth).max() < 10


def test_auto_beats_persistence_on_noisy_seasonal_data():
    rng = np.random.default_rng(7)
    step = 300.0
    m = int(DAY / step)
    n_hist, horizon = 15 * m, 6
    t = np.arange(n_hist + horizon)
    clean = 100 + 60 * np.sin(2 * np.pi * t / m)
    series = clean[None, :] + rng.normal(0, 8, size=(20, len(t)))
    hist, truth = series[:, :n_hist], series[:, n_hist:]
    auto = fit_predict_many(hist, step, horizon, model="auto")
    last = fit_predict_many(hist, step, horizon, model="lastValue")
    err_auto = np.mean([np.abs(r.forecast - y).mean() for r, y in zip(auto, truth)])
    err_last = np.mean([np.abs(r.forecast - y).mean() for r, y in zip(last, truth)])
    assert err_auto < 0.8 * err_last


def test_upper_bound_covers_about_the_requested_share():
    rng = np.random.default_rng(11)
    step = 300.0
    m = int(DAY / step)
    n_hist, horizon, n_series = 9 * m, 3, 200
    t = np.arange(n_hist + horizon)
    clean = 100 + 40 * np.sin(2 * np.pi * t / m)
    series = clean[None, :] + rng.normal(0, 10, size=(n_series, len(t)))
    results = fit_predict_many(series[:, :n_hist], step, horizon, model="auto", quantile=0.9)
    actual = series[:, n_hist:]
    upper = np.stack([r.upper for r in results])
    lower = np.stack([r.lower for r in results])
    cover_upper = np.mean(actual <= upper)
    cover_lower = np.mean(actual >= lower)
    # 600 Bernoulli(0.9) draws: a correct bound lands in 0.85..0.95 with overwhelming probability.
    assert 0.84 <= cover_upper <= 0.97
    assert 0.84 <= cover_lower <= 0.97


def test_fit_predict_many_matches_one_by_one():
    rng = np.random.default_rng(5)
    step = 300.0
    m = int(DAY / step)
    t = np.arange(8 * m)
    series = np.stack([pattern(t, m) * s + rng.normal(0, 3, len(t)) for s in (0.5, 1.0, 3.0)])
    series[1, 50:90] = np.nan
    for model in MODELS:
        many = fit_predict_many(series, step, 4, model=model)
        for row, res in zip(series, many):
            one = fit_predict(row, step, 4, model=model)
            np.testing.assert_allclose(res.forecast, one.forecast, rtol=1e-9, atol=1e-9)
            np.testing.assert_allclose(res.upper, one.upper, rtol=1e-9, atol=1e-9)
            np.testing.assert_allclose(res.lower, one.lower, rtol=1e-9, atol=1e-9)
            assert (res.model, res.season, res.note) == (one.model, one.season, one.note)


def test_result_shapes_and_types():
    res = fit_predict(np.arange(100.0), 60.0, 7)
    assert isinstance(res, ForecastResult)
    assert res.forecast.shape == res.lower.shape == res.upper.shape == (7,)
    assert isinstance(res.note, str)


def test_isolated_spikes_in_the_history_are_not_copied_into_the_forecast():
    rng = np.random.default_rng(0)
    step, m = 300.0, 288
    t = np.arange(10 * m + 6)
    clean = 100 + 40 * np.sin(2 * np.pi * t / m)
    hist = (clean + rng.normal(0, 3, len(t)))[:-6]
    spikes = rng.choice(len(hist) - 50, 30, replace=False)
    hist[spikes] *= 20
    hist[len(hist) - m + 3] *= 30  # one day before the 3rd forecast step: seasonal naive bait
    for model in ("auto", "holtWinters", "harmonic", "seasonalNaive"):
        res = fit_predict(hist, step, 6, model=model)
        # noise sd is 3; a copied spike would be off by thousands
        assert np.abs(res.forecast - clean[-6:]).max() < 15, model


def test_a_spike_at_the_very_end_is_believed():
    # With no later point, a jump at the end may be the start of a real surge: keep it.
    y = np.full(500, 10.0)
    y[-1] = 1000.0
    res = fit_predict(y, 60.0, 1, model="lastValue")
    assert res.forecast[0] == 1000.0
