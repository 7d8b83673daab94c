"""Short histories, season fallbacks and bad input to the Python API."""

from __future__ import annotations

import numpy as np
import pytest

from adapter.forecast import fit_predict, fit_predict_many

DAY = 86400.0
WEEK = 7 * DAY


def daily(n_days: float, step: float) -> np.ndarray:
    t = np.arange(int(n_days * DAY / step))
    return 100 + 30 * np.sin(2 * np.pi * t * step / DAY)


def test_week_requested_but_ten_days_of_history_falls_back_to_daily():
    res = fit_predict(daily(10, 300.0), 300.0, 3, model="seasonalNaive", season=WEEK)
    assert res.season == DAY
    assert "used 1d season" in res.note and "shorter than 2 x season 7d" in res.note


def test_under_two_days_falls_back_to_recent_level_and_says_so():
    y = daily(1.5, 300.0)
    for model in ("seasonalNaive", "holtWinters", "harmonic"):
        res = fit_predict(y, 300.0, 3, model=model)
        assert res.season is None, model
        assert "recent level" in res.note, model
        assert res.model == "recentLevel"
        # the recent level is the mean of the last points, not some old value
        assert abs(res.forecast[0] - y[-10:].mean()) < 1e-9


def test_auto_without_two_weeks_says_weekly_was_not_considered():
    res = fit_predict(daily(5, 300.0), 300.0, 3, model="auto")
    assert "weekly season not considered" in res.note
    assert res.season in (None, DAY)


def test_auto_with_two_weeks_considers_weekly_season():
    res = fit_predict(daily(15, 1800.0), 1800.0, 2, model="auto")
    assert "weekly" not in res.note


def test_auto_on_very_short_history_uses_recent_level():
    res = fit_predict(np.array([5.0, 6.0, 7.0]), 60.0, 2, model="auto")
    assert res.season is None
    assert "recent level" in res.note or "too short to backtest" in res.note
    assert np.all(np.isfinite(res.forecast))
    assert np.all(res.lower <= res.forecast) and np.all(res.forecast <= res.upper)


def test_single_point_history():
    res = fit_predict(np.array([42.0]), 60.0, 3)
    np.testing.assert_allclose(res.forecast, 42.0)


def test_explicit_daily_season_is_used_when_history_allows():
    res = fit_predict(daily(15, 300.0), 300.0, 3, model="holtWinters", season=DAY)
    assert res.season == DAY and res.note == ""


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"model": "prophet"}, "unknown forecast model"),
        ({"horizon": 0}, "horizon"),
        ({"horizon": 2.5}, "horizon"),
        ({"quantile": 1.5}, "quantile"),
        ({"quantile": 0.3}, "quantile"),
        ({"step": 0.0}, "step"),
        ({"season": -5.0}, "season"),
    ],
)
def test_bad_arguments_raise_clear_value_errors(kwargs, message):
    args = {"values": np.arange(50.0), "step": 60.0, "horizon": 3}
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        fit_predict(**args)


def test_empty_and_all_nan_histories_are_rejected():
    with pytest.raises(ValueError, match="empty"):
        fit_predict(np.array([]), 60.0, 3)
    with pytest.raises(ValueError, match="all NaN"):
        fit_predict(np.full(10, np.nan), 60.0, 3)
    with pytest.raises(ValueError, match="series 1"):
        fit_predict_many(np.stack([np.arange(10.0), np.full(10, np.nan)]), 60.0, 3)


def test_fit_predict_rejects_two_dimensional_input():
    with pytest.raises(ValueError, match="fit_predict_many"):
        fit_predict(np.ones((2, 10)), 60.0, 3)
