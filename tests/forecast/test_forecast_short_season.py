"""Sub-daily periods (an hourly job): found in the data, kept by the spike filter, forecast."""

import numpy as np

from adapter.forecast import fit_predict
from adapter.forecast.prep import short_season

STEP = 300.0


def hourly_job(days: float, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = int(days * 86400 / STEP)
    y = 30 + rng.normal(0, 1, n)
    y[10::12] = 100.0  # one 5-minute spike every hour
    return y


def test_hourly_spike_is_a_season_not_an_outlier():
    assert short_season(hourly_job(3), STEP) == 12


def test_smooth_daily_series_has_no_short_season():
    t = np.arange(int(4 * 86400 / STEP)) * STEP
    y = 50 + 20 * np.sin(2 * np.pi * t / 86400) + np.random.default_rng(2).normal(0, 1, len(t))
    assert short_season(y, STEP) is None


def test_auto_forecasts_the_next_hourly_spike():
    y = hourly_job(4)
    # the history ends 3 steps before a spike: 10 + 12k is the spike index
    end = 10 + 12 * (len(y) // 12 - 2) - 3
    result = fit_predict(y[: end + 1], STEP, horizon=6, model="auto", quantile=0.9)
    assert result.forecast[2] > 80, result  # the spike, 3 steps ahead
    assert max(result.forecast[[0, 1, 3, 4, 5]]) < 50
