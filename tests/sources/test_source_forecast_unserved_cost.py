"""`forecast.unservedCost`: parsed and validated with clear errors, passed to the model, served."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adapter.errors import ValidationError
from adapter.sources.base import CommonSourceSettings, SourceContext
from adapter.sources.forecast import ForecastSource
from tests.sources.test_source_forecast import NOW, PATH, STEP, sine_history

HISTORY = {"api": {"url": "http://h/"}}


def parse(**fields):
    return ForecastSource.parse_config({"history": HISTORY, **fields}, PATH)


def test_default_is_the_fixed_quantile():
    config = parse()
    assert config.unserved_cost is None and config.quantile == 0.9


@pytest.mark.parametrize("value", [20, 0.5, "10", 10_000])
def test_valid_unserved_cost(value):
    assert parse(unservedCost=value).unserved_cost == float(value)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"unservedCost": 0}, "must be between 0.01 and 10000"),
        ({"unservedCost": -3}, "must be between 0.01 and 10000"),
        ({"unservedCost": 0.001}, "must be between 0.01 and 10000"),
        ({"unservedCost": 1e6}, "must be between 0.01 and 10000"),
        ({"unservedCost": math.nan}, "not a finite number"),
        ({"unservedCost": math.inf}, "not a finite number"),
        ({"unservedCost": "lots"}, "expected a number, got 'lots'"),
        ({"unservedCost": True}, "expected a number"),
        ({"unservedCost": [20]}, "expected a number"),
        ({"unservedCost": {"value": 20}}, "expected a number"),
        ({"unservedCost": 20, "quantile": 0.9}, "either quantile (fixed) or unservedCost"),
        ({"unservedCost": 20, "quantile": 0.95}, "not both"),
    ],
)
def test_bad_unserved_cost_gets_a_clear_error(fields, message):
    with pytest.raises(ValidationError) as info:
        parse(**fields)
    assert info.value.path == f"{PATH}.unservedCost"
    assert message in info.value.detail


def test_unknown_neighbour_is_still_rejected():
    with pytest.raises(ValidationError) as info:
        parse(unservedcost=20)
    assert info.value.path == f"{PATH}.unservedcost" and "unknown field" in info.value.detail


def test_the_model_receives_the_cost_and_items_carry_the_chosen_upper():
    config = parse(unservedCost=50, horizon="30m")
    source = ForecastSource(config, CommonSourceSettings(interval=300), SourceContext())
    times, values = sine_history(days=4)
    values = values + np.random.default_rng(2).exponential(10, values.size)
    seen = []

    def fit_many(grid, *args, **kwargs):
        from adapter.forecast import fit_predict_many

        seen.append(kwargs)
        return fit_predict_many(grid, *args, **kwargs)

    items, notes, warnings = source._forecast_all(fit_many, [({}, times, values)], STEP, NOW)
    assert warnings == [] and seen[0]["unserved_cost"] == 50.0
    assert len(items) == 6 and all(i.values["upper"] >= i.values["forecast"] for i in items)
    assert "by backtest cost (unservedCost 50)" in notes[0]

    fixed = ForecastSource(parse(horizon="30m"), CommonSourceSettings(interval=300), SourceContext())
    fixed_items, _, _ = fixed._forecast_all(fit_many, [({}, times, values)], STEP, NOW)
    assert seen[-1]["unserved_cost"] is None
    assert [i.values["forecast"] for i in fixed_items] == [i.values["forecast"] for i in items]
