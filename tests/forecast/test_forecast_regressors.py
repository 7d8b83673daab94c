"""Announced events as regressors: the effect of one unit is learnt from history, robustly."""

import numpy as np
import pytest

from adapter.forecast import fit_predict
from adapter.forecast.regressors import add_effects, fit_effects, fit_predict_fused

STEP = 300.0
DAY = 288


def history(days: int = 8, seed: int = 0, beta: float = 3.0, outliers: int = 20):
    rng = np.random.default_rng(seed)
    n = DAY * days
    t = np.arange(n)
    y = 50 + 20 * np.sin(2 * np.pi * t / DAY) + rng.normal(0, 2, n)
    x = np.zeros((n, 1))
    for s in rng.choice(n - 30, 25, replace=False):
        x[s : s + 6, 0] = rng.integers(1, 10)
    y += x[:, 0] * beta * (1 + rng.normal(0, 0.3, n))
    y[rng.choice(n, outliers, replace=False)] += 150.0  # bursts that are no event's doing
    return y, x


def test_effect_per_unit_is_recovered_despite_outliers():
    y, x = history(beta=3.0)
    effects = fit_effects(y, x, ["audience"])
    assert effects.beta[0] == pytest.approx(3.0, rel=0.1)
    assert 0 < effects.stderr[0] < 0.5
    assert effects.as_dict()[0]["samples"] == int((x[:, 0] != 0).sum())


def test_regressor_that_never_fired_has_no_effect_and_unknown_error():
    y, x = history()
    effects = fit_effects(y, np.column_stack([x, np.zeros(len(y))]), ["audience", "never"])
    assert effects.beta[1] == 0 and np.isinf(effects.stderr[1])


def test_fused_forecast_includes_the_announced_event_and_beats_the_plain_one():
    y, x = history(beta=3.0, seed=3)
    future = np.zeros((12, 1))
    future[4:10, 0] = 8  # an announced event 25..50 minutes ahead: +24 load
    truth_extra = 24.0
    fused = fit_predict_fused(y, STEP, 12, x, future, ["audience"])
    plain = fit_predict(y, STEP, 12)
    lift = fused.forecast[4:10] - plain.forecast[4:10]
    assert np.all(np.abs(lift - truth_extra) < 6), lift
    assert "audience" in fused.note


def test_interval_is_widened_by_the_coefficient_uncertainty():
    y, x = history()
    effects = fit_effects(y, x, ["audience"])
    base = np.full(4, 10.0)
    future = np.array([[0.0], [0.0], [5.0], [50.0]])
    point, lower, upper = add_effects(base, base - 1, base + 1, future, effects, 0.9)
    widths = upper - point
    assert widths[0] == pytest.approx(1.0) and widths[1] == pytest.approx(1.0)
    assert widths[3] > widths[2] > 1.0  # more announced units, more uncertainty


def _surprising_events(rng: np.random.Generator, y: np.ndarray, count: int) -> np.ndarray:
    """Adds `count` 6-step events of an announced size 1..10 to `y` (in place), 6 per unit, each crowd
    25 % off its announcement (one draw per event) and 10 % per step; returns the announced series."""
    n = len(y)
    x = np.zeros((n, 1))
    for s in rng.choice(n - 20, count, replace=False):
        a = rng.integers(1, 11)
        x[s : s + 6, 0] = a
        y[s : s + 6] += a * 6 * (1 + rng.normal(0, 0.25)) * (1 + rng.normal(0, 0.1, 6))
    return x


def test_standard_error_accounts_for_each_events_own_surprise():
    # A crowd bigger than announced lifts every step of its event: steps are not independent.
    z = []
    for seed in range(40):
        rng = np.random.default_rng(seed)
        n = DAY * 7
        t = np.arange(n)
        y = 50 + 20 * np.sin(2 * np.pi * t / DAY) + rng.normal(0, 2, n)
        x = _surprising_events(rng, y, 20)
        effects = fit_effects(y, x, ["audience"])
        z.append((effects.beta[0] - 6) / effects.stderr[0])
    z = np.abs(np.array(z))
    assert np.mean(z <= 1.96) >= 0.75  # independent-step errors alone cover about two thirds


def test_dispersion_of_each_events_effect_is_measured_and_widens_the_interval():
    # Events whose crowd is 25 % off what was announced (one draw per event) and 10 % per step.
    rng = np.random.default_rng(7)
    n = DAY * 10
    t = np.arange(n)
    base = 50 + 20 * np.sin(2 * np.pi * t / DAY)
    noise = 2.0
    y = base + rng.normal(0, noise, n)
    x = _surprising_events(rng, y, 40)
    effects = fit_effects(y, x, ["audience"])
    assert 0.15 < effects.dispersion < 0.4  # about sqrt(0.25^2 + 0.1^2) = 0.27
    # Fresh events, with the base forecast known exactly: the upper 90 % bound must cover about 90 %
    # of the event steps. beta's own error alone (the interval before) covers far fewer.
    a = rng.integers(1, 11, 2000).astype(float)
    truth = 60 + a * 6 * (1 + rng.normal(0, 0.25, 2000)) * (1 + rng.normal(0, 0.1, 2000)) + rng.normal(0, noise, 2000)
    f = np.full(2000, 60.0)
    z90 = 1.2816
    _, _, upper = add_effects(f, f - z90 * noise, f + z90 * noise, a[:, None], effects, 0.9)
    covered = np.mean(truth <= upper)
    assert 0.85 <= covered <= 0.97
    from dataclasses import replace

    _, _, narrow = add_effects(f, f - z90 * noise, f + z90 * noise, a[:, None], replace(effects, dispersion=0.0), 0.9)
    assert np.mean(truth <= narrow) < min(0.85, covered - 0.05)


def test_no_dispersion_without_events_or_with_exact_effects():
    y, x = history(outliers=0)
    assert fit_effects(y, np.zeros_like(x), ["audience"]).dispersion == 0.0
    rng = np.random.default_rng(1)
    n = DAY * 8
    y = 50 + rng.normal(0, 2, n)
    x = np.zeros((n, 1))
    for s in rng.choice(n - 30, 25, replace=False):
        x[s : s + 6, 0] = 5
    y += x[:, 0] * 4.0  # the effect is exactly beta x: nothing left to spread
    assert fit_effects(y, x, ["audience"]).dispersion < 0.05
