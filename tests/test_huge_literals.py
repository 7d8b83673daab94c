"""Integer literals too large for a float (a 400-digit YAML integer) in number, duration and item
fields: the same field error as any other out-of-range number, never an OverflowError."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from adapter.durations import DurationError, parse_duration
from adapter.errors import ValidationError
from adapter.fields import read_duration, read_number
from adapter.items import ItemError, parse_item
from adapter.resources import parse_virtual_metric, parse_virtual_metric_event
from adapter.sources.registry import config_parsers

HUGE = int("9" * 400)

VM: dict[str, Any] = {
    "apiVersion": "prescaler.pingpong.ai/v1",
    "kind": "VirtualMetric",
    "metadata": {"name": "rps"},
    "spec": {"name": "rps", "defaultValue": 0, "leadTime": "0s"},
}
VME: dict[str, Any] = {
    "apiVersion": "prescaler.pingpong.ai/v1",
    "kind": "VirtualMetricEvent",
    "metadata": {"name": "ev"},
    "spec": {
        "source": {"schedule": {"items": [{"start": 1700000000, "end": 1700000300, "values": {"n": 5}}]}},
        "metrics": [{"name": "rps", "resource": {"name": "a", "namespace": "a"}, "value": {"expression": "n"}}],
    },
}


@pytest.mark.parametrize("value", [HUGE, -HUGE])
def test_read_number_reports_a_huge_integer_as_out_of_range(value: int) -> None:
    with pytest.raises(ValidationError) as info:
        read_number({"min": value}, "min", "spec")
    assert info.value.path == "spec.min"
    assert "is not a finite number within ±1e15" in info.value.detail
    assert len(info.value.detail) < 120  # the literal is shortened


def test_durations_of_a_huge_integer() -> None:
    with pytest.raises(DurationError, match="out of range"):
        parse_duration(HUGE)
    with pytest.raises(ValidationError) as info:
        read_duration({"leadTime": HUGE}, "leadTime", "spec", 0.0, maximum=7 * 86400.0)
    assert info.value.path == "spec.leadTime"
    assert "must be between 0s and 604800s" in info.value.detail and len(info.value.detail) < 120


@pytest.mark.parametrize("field", ["start", "end", "value"])
def test_items_with_a_huge_integer(field: str) -> None:
    raw: dict[str, Any] = {"start": 1700000000, "end": 1700000300, "values": {"n": 5}}
    if field == "value":
        raw["values"]["n"] = HUGE
    else:
        raw[field] = HUGE
    with pytest.raises(ItemError) as info:
        parse_item(raw, "items[0]")
    path = "items[0].values.n" if field == "value" else f"items[0].{field}"
    assert str(info.value).startswith(f"{path}: ")
    assert ("outside ±1e+15" if field == "value" else "not a plausible unix timestamp") in str(info.value)


@pytest.mark.parametrize("field", ["leadTime", "holdTime", "defaultValue", "min", "max"])
def test_virtual_metric_fields(field: str) -> None:
    doc = copy.deepcopy(VM)
    doc["spec"][field] = HUGE
    with pytest.raises(ValidationError) as info:
        parse_virtual_metric(doc)
    assert info.value.path == f"spec.{field}"


@pytest.mark.parametrize(
    "where, path",
    [
        (("interval",), "spec.source.interval"),
        (("schedule", "items", 0, "values", "n"), "spec.source.schedule.items[0].values.n"),
        (("schedule", "items", 0, "start"), "spec.source.schedule.items[0].start"),
    ],
)
def test_virtual_metric_event_fields(where: tuple[Any, ...], path: str) -> None:
    doc = copy.deepcopy(VME)
    node = doc["spec"]["source"]
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = HUGE
    with pytest.raises(ValidationError) as info:
        parse_virtual_metric_event(doc, config_parsers())
    assert info.value.path == path
