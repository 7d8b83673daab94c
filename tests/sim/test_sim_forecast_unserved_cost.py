"""The simulator's forecast source honours `unservedCost` as the server's does (same parser, same model)."""

from __future__ import annotations

import numpy as np

from adapter.policy import MetricPolicy
from adapter.resources import MetricEntry, ResourceRef, SourceSpec, VirtualMetric, VirtualMetricEvent
from adapter.sim.metrics import ForecastSettings, PrescalerModel, _forecast_overrides, forecast_snapshots
from adapter.sim.traffic import trace_from_arrays
from adapter.sources.base import CommonSourceSettings
from adapter.sources.forecast import ForecastSource

MIDNIGHT = 1_700_006_400.0  # a multiple of 86400


def noisy_trace(days: int = 4, step: float = 300.0):
    t = MIDNIGHT + step * np.arange(int(days * 86400 / step))
    rng = np.random.default_rng(11)
    values = 100 + 50 * np.sin(2 * np.pi * (t % 86400) / 86400) + rng.exponential(20, t.size)
    return trace_from_arrays(t, values)


def test_overrides_take_unserved_cost_from_the_raw_block_and_the_parsed_config():
    base = ForecastSettings()
    assert _forecast_overrides(base, None, {"forecast": {"unservedCost": 12}}).unserved_cost == 12.0
    assert _forecast_overrides(base, None, {"forecast": {"quantile": 0.8}}).unserved_cost is None
    config = ForecastSource.parse_config({"history": {"api": {"url": "http://h/"}}, "unservedCost": 7}, "f")
    assert _forecast_overrides(base, config, {}).unserved_cost == 7.0
    fixed = ForecastSource.parse_config({"history": {"api": {"url": "http://h/"}}}, "f")
    assert _forecast_overrides(base, fixed, {}).unserved_cost is None


def test_forecast_snapshots_pass_the_cost_to_every_fit():
    trace = noisy_trace()
    seen = []

    def fit(values, step, horizon, **kwargs):
        from adapter.forecast import fit_predict

        seen.append(kwargs.get("unserved_cost"))
        return fit_predict(values, step, horizon, **kwargs)

    lo = MIDNIGHT + 3 * 86400
    settings = ForecastSettings(refit=3600.0, lookback=10 * 86400.0, unserved_cost=30.0)
    snaps = forecast_snapshots(trace, lo, lo + 3600, settings, lead=300.0, fit=fit)
    assert seen == [30.0, 30.0] and len(snaps.items) == 2


def served(cost: float) -> np.ndarray:
    trace = noisy_trace()
    vm = VirtualMetric(name="rps", metric_name="rps", policy=MetricPolicy(lead_time=300.0))
    vme = VirtualMetricEvent(
        name="fc",
        source=SourceSpec(
            kind="forecast",
            config=None,
            common=CommonSourceSettings(),
            raw={"forecast": {"model": "auto", "unservedCost": cost}},
        ),
        metrics=(MetricEntry("rps", ResourceRef("ns", "web"), "upper"),),
    )
    model = PrescalerModel([vm], [vme], trace=trace, forecast=ForecastSettings(refit=1800.0))
    lo = MIDNIGHT + 3 * 86400
    return model.values("rps", "ns", "web", lo + 60.0 * np.arange(120))


def test_a_dearer_unserved_demand_serves_more():
    cheap, dear = served(0.5), served(500.0)
    assert np.all(dear >= cheap) and dear.mean() > cheap.mean()
