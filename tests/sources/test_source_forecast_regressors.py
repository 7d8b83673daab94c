"""The forecast source with announced regressors: history + announcements in, fused items out."""

from __future__ import annotations

import asyncio
import json
import math

import numpy as np
import pytest

from adapter.errors import ValidationError
from adapter.sources.base import CommonSourceSettings, SourceContext
from adapter.sources.forecast import ForecastSource
from tests.source_http_fixture import start_server

PATH = "spec.source.forecast"
STEP = 300.0
NOW = 1_800_000_000.0
BETA = 4.0  # true extra load per announced unit: never given to the source


@pytest.fixture
def server():
    state, stop = start_server({})
    yield state
    stop()


def csv(times: np.ndarray, values: np.ndarray) -> bytes:
    return ("timestamp,value\n" + "\n".join(f"{t:.0f},{v:.6f}" for t, v in zip(times, values))).encode()


def publish(server) -> None:
    rng = np.random.default_rng(5)
    times = NOW - STEP * np.arange(int(8 * 86400 / STEP))[::-1]
    load = 100 + 50 * np.sin(2 * math.pi * times / 86400) + rng.normal(0, 2, len(times))
    announced = np.zeros(len(times))
    for s in rng.choice(len(times) - 20, 30, replace=False):
        announced[s : s + 6] = rng.integers(1, 10)
    load += announced * BETA * (1 + rng.normal(0, 0.2, len(times)))
    server.routes["/load.csv"] = (200, "text/csv", csv(times, load))
    server.routes["/announced.csv"] = (200, "text/csv", csv(times, announced))
    future = {"items": [{"start": NOW + 1800, "end": NOW + 3600, "values": {"audience": 10}}]}
    server.routes["/items"] = (200, "application/json", json.dumps(future).encode())


def block(server) -> dict:
    return {
        "history": {"api": {"url": server.base_url + "/load.csv"}},
        "horizon": "90m",
        "regressors": [
            {
                "name": "audience",
                "history": {"api": {"url": server.base_url + "/announced.csv"}},
                "future": {"api": {"url": server.base_url + "/items"}},
            }
        ],
    }


def fetch(config_block: dict):
    source = ForecastSource(
        ForecastSource.parse_config(config_block, PATH), CommonSourceSettings(interval=300, timeout=5), SourceContext()
    )

    async def go():
        try:
            return await source.fetch(NOW)
        finally:
            await source.close()

    return list(asyncio.run(go()).items), source


def test_announced_event_lifts_the_forecast_by_the_learnt_effect(server):
    publish(server)
    items, source = fetch(block(server))
    during = [i for i in items if NOW + 1800 <= i.start < NOW + 3600]
    before = [i for i in items if i.start < NOW + 1800]
    assert during and before
    assert all(i.values["events"] == pytest.approx(10 * BETA, rel=0.15) for i in during)
    assert all(i.values["events"] == 0 for i in before)
    assert all(i.values["forecast"] == pytest.approx(i.values["baseline"] + i.values["events"]) for i in items)
    (fit,) = source.last_effects
    (row,) = fit["regressors"]
    assert row["name"] == "audience" and row["coefficient"] == pytest.approx(BETA, rel=0.15)
    assert 0 < row["stderr"] < 0.5 and row["samples"] > 100
    assert ForecastSource.value_names(source.config) >= {"baseline", "events"}


@pytest.mark.parametrize(
    "regressors, path, message",
    [
        ([], "regressors", "non-empty"),
        ([{"name": "a b", "history": {}, "future": {}}], "regressors[0].name", "name"),
        ([{"name": "a", "future": {"api": {"url": "http://x/"}}}], "regressors[0].history", "required"),
        (
            [{"name": "a", "history": {"api": {"url": "http://x/"}}, "future": {"prometheus": {}}}],
            "regressors[0].future",
            "exactly one of api, schedule",
        ),
    ],
)
def test_regressor_config_errors_name_the_field(regressors, path, message):
    spec = {"history": {"api": {"url": "http://x/h.csv"}}, "regressors": regressors}
    with pytest.raises(ValidationError) as err:
        ForecastSource.parse_config(spec, PATH)
    assert f"{PATH}.{path}" in str(err.value) and message in str(err.value)


def test_fitted_coefficients_in_the_event_status_fit_the_crd(server):
    import importlib.util
    import sys
    from pathlib import Path

    from adapter.store.status import complete_status
    from tests.helpers import event_status, fetch_all, loaded_engine, metric

    publish(server)
    doc = {
        "apiVersion": "prescaler.pingpong.ai/v1",
        "kind": "VirtualMetricEvent",
        "metadata": {"name": "fc"},
        "spec": {
            "source": {"forecast": block(server)},
            "metrics": [
                {
                    "name": "rps",
                    "resource": {"namespace": "shop", "name": "web"},
                    "value": {"expression": "baseline + events"},
                }
            ],
        },
    }

    async def go():
        engine = await loaded_engine([metric("rps"), doc], now=NOW)
        await fetch_all(engine)
        status = event_status(engine, "fc")
        await engine.stop()
        return status

    status = asyncio.run(go())
    (series,) = status["regressors"]
    assert series["regressors"][0]["name"] == "audience"
    assert series["regressors"][0]["coefficient"] == pytest.approx(BETA, rel=0.15)
    crds = Path(__file__).resolve().parents[2] / "deploy" / "crds"
    spec = importlib.util.spec_from_file_location("prescaler_crd_validate_regressors", crds / "validate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    validators = module.load_validators(crds)
    full = {**doc, "status": complete_status(1, status, {}, "2026-11-29T00:00:00Z")}
    assert module.validate_documents([full], validators) == []
