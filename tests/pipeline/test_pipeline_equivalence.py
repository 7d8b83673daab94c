"""One pipeline: the server's query path, the simulator's metric feed and preview give identical values.

Random VirtualMetrics (every merge strategy, leadTime, holdTime, bounds) and VirtualMetricEvents
(inline schedule items, several entries and targets, expressions that sometimes fail) are loaded
into a real engine and into the simulator's model; the value of every target at every time must be
the same number on all three paths.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapter.labels import parse_selector
from adapter.pipeline.preview import PreviewRequest
from adapter.pipeline.query import Values
from adapter.resources import parse_virtual_metric, parse_virtual_metric_event
from adapter.sim.metrics import PrescalerModel
from adapter.sources.registry import config_parsers
from tests.helpers import NOW, entry, loaded_engine, metric, run, schedule_event

RESOURCES = ("svc-a", "svc-b")
EXPRESSIONS = ("n", "n * 2", "n - 40", "100 / (n - 10)", "max(n, 25)")

minutes = st.integers(min_value=0, max_value=10).map(lambda m: f"{m}m")
bound = st.one_of(st.none(), st.integers(min_value=0, max_value=150))


@st.composite
def virtual_metric(draw: st.DrawFn, name: str) -> dict:
    spec: dict = {
        "defaultValue": draw(st.integers(min_value=0, max_value=20)),
        "mergeStrategy": draw(st.sampled_from(["Sum", "Max", "Min", "Average"])),
        "leadTime": draw(minutes),
        "holdTime": draw(minutes),
    }
    low, high = draw(bound), draw(bound)
    if low is not None:
        spec["min"] = low
    if high is not None and (low is None or high >= low):
        spec["max"] = high
    return metric(name, **spec)


@st.composite
def item(draw: st.DrawFn) -> dict:
    start = NOW + 60 * draw(st.integers(min_value=-60, max_value=110)) + draw(st.integers(min_value=0, max_value=59))
    length = draw(st.integers(min_value=1, max_value=3600))
    return {"start": start, "end": start + length, "values": {"n": draw(st.integers(min_value=0, max_value=100))}}


@st.composite
def event(draw: st.DrawFn, name: str, metric_names: list[str]) -> dict:
    items = draw(st.lists(item(), min_size=1, max_size=6))
    entries = [
        entry(
            "ns",
            draw(st.sampled_from(RESOURCES)),
            draw(st.sampled_from(EXPRESSIONS)),
            draw(st.sampled_from(metric_names)),
        )
        for _ in range(draw(st.integers(min_value=1, max_value=3)))
    ]
    doc = schedule_event(name, items, entries)
    doc["spec"]["source"]["interval"] = "1h"
    return doc


@st.composite
def world(draw: st.DrawFn) -> tuple[list[dict], list[dict], int, int]:
    names = ["m0", "m1"][: draw(st.integers(min_value=1, max_value=2))]
    metrics = [draw(virtual_metric(n)) for n in names]
    events = [draw(event(f"ev{i}", names)) for i in range(draw(st.integers(min_value=1, max_value=3)))]
    step = draw(st.integers(min_value=1, max_value=600))
    count = draw(st.integers(min_value=1, max_value=40))
    return metrics, events, step, count


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world())
def test_server_simulator_and_preview_serve_identical_values(case: tuple[list[dict], list[dict], int, int]) -> None:
    metrics, events, step, count = case
    times = NOW + step * np.arange(count, dtype=float)

    async def server_and_preview() -> tuple[dict, dict]:
        engine = await loaded_engine(metrics + events, now=NOW)
        served: dict = {}
        previewed: dict = {}
        for m in metrics:
            name = m["spec"]["name"]
            for resource in RESOURCES:
                key = (name, resource)
                answers = [engine.query(name, "ns", parse_selector(f"resource={resource}"), float(t)) for t in times]
                assert all(isinstance(a, Values) for a in answers), answers
                served[key] = [a.values[0].value for a in answers]  # type: ignore[union-attr]
                doc = engine.preview(PreviewRequest(name, "ns", resource, NOW, step * (count - 1), step))
                assert isinstance(doc, dict)
                previewed[key] = [s["value"] for s in doc["steps"]]
        await engine.stop()
        return served, previewed

    served, previewed = run(server_and_preview())
    parsers = config_parsers()
    model = PrescalerModel(
        [parse_virtual_metric(m) for m in metrics], [parse_virtual_metric_event(e, parsers) for e in events]
    )
    for (name, resource), values in served.items():
        simulated = model.values(name, "ns", resource, times).tolist()
        assert simulated == values, (name, resource)
        assert previewed[(name, resource)] == values, (name, resource)
