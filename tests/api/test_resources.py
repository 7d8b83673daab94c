"""Resource parsing: the seed manifests load unchanged; every error names the object and field path."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapter.errors import ValidationError
from adapter.resources import parse_virtual_metric, parse_virtual_metric_event
from adapter.sources.registry import config_parsers
from adapter.store.manifests import load_documents
from tests.shared_data import shared_path

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "examples" / "seed"


def seed_docs():
    docs = []
    for path in sorted(SEED.glob("*.yaml")):
        docs.extend(load_documents(path))
    return {d["kind"]: d for d in docs}


def test_seed_manifests_are_verbatim_from_the_original_design() -> None:
    text = shared_path("seeds/000_15703600d6350574.txt").read_text()
    for path in SEED.glob("*.yaml"):
        body = [line for line in path.read_text().splitlines() if not line.startswith("#")]
        # each manifest line appears in the seed text (the seed's own comments included)
        for line in body:
            assert line.rstrip() in text, (path.name, line)


def test_seed_manifests_parse_unchanged() -> None:
    docs = seed_docs()
    vm = parse_virtual_metric(docs["VirtualMetric"])
    assert (vm.metric_name, vm.default_value, vm.merge_strategy, vm.lead_time) == ("rps", 0.0, "Sum", 0.0)
    vme = parse_virtual_metric_event(docs["VirtualMetricEvent"], config_parsers())
    assert vme.source.kind == "api" and vme.source.common.interval == 30.0
    assert vme.source.common.stale_after == 150.0 and vme.source.common.on_stale == "Hold"
    assert [(e.resource.namespace, e.resource.name, e.expression) for e in vme.metrics] == [
        ("service-a", "service-a", "scheduledMessage * 2"),
        ("service-b", "service-b", "scheduledMessage"),
    ]


def _vm(**spec):
    return {
        "apiVersion": "prescaler.pingpong.ai/v1",
        "kind": "VirtualMetric",
        "metadata": {"name": "rps"},
        "spec": spec,
    }


@pytest.mark.parametrize(
    "spec, path, fragment",
    [
        ({"mergeStrategy": "Median"}, "spec.mergeStrategy", "not one of"),
        ({"defaultValue": "many"}, "spec.defaultValue", "expected a number"),
        ({"defaultValue": float("nan")}, "spec.defaultValue", "finite"),
        ({"leadTime": "5 minutes"}, "spec.leadTime", "invalid duration"),
        ({"leadTime": "-5m"}, "spec.leadTime", "between"),
        ({"leadTime": "30d"}, "spec.leadTime", "invalid duration"),
        ({"min": 5, "max": 1}, "spec.min", "greater than max"),
        ({"colour": "red"}, "spec.colour", "unknown field"),
        ({"name": "a/b"}, "spec.name", "not a valid metric name"),
    ],
)
def test_virtual_metric_errors_name_object_and_path(spec, path, fragment) -> None:
    with pytest.raises(ValidationError) as info:
        parse_virtual_metric(_vm(**spec))
    message = str(info.value)
    assert message.startswith(f"VirtualMetric/rps: {path}: "), message
    assert fragment in message


def _vme(source=None, metrics=None, **extra):
    doc = {
        "apiVersion": "prescaler.pingpong.ai/v1",
        "kind": "VirtualMetricEvent",
        "metadata": {"name": "ev"},
        "spec": {
            "source": source if source is not None else {"api": {"url": "http://127.0.0.1/x"}},
            "metrics": metrics
            if metrics is not None
            else [{"name": "rps", "resource": {"name": "a", "namespace": "a"}, "value": {"expression": "n"}}],
        },
    }
    doc.update(extra)
    return doc


@pytest.mark.parametrize(
    "doc, path, fragment",
    [
        (_vme(source={}), "spec.source", "exactly one of"),
        (_vme(source={"api": {"url": "http://x"}, "schedule": {"items": []}}), "spec.source", "exactly one of"),
        (_vme(source={"ftp": {}}), "spec.source.ftp", "unknown field"),
        (_vme(source={"api": {"url": "http://x"}, "interval": "0s"}), "spec.source.interval", "between"),
        (_vme(source={"api": {"url": "http://x"}, "onStale": "Panic"}), "spec.source.onStale", "not one of"),
        (
            _vme(source={"api": {"url": "http://x", "interval": "10s"}, "interval": "20s"}),
            "spec.source.api.interval",
            "conflicts",
        ),
        (_vme(metrics=[]), "spec.metrics", "non-empty"),
        (
            _vme(metrics=[{"name": "rps", "resource": {"name": "a"}, "value": {"expression": "n"}}]),
            "spec.metrics[0].resource.namespace",
            "required",
        ),
        (
            _vme(
                metrics=[
                    {
                        "name": "rps",
                        "resource": {"name": "a", "namespace": "a", "nameFromLabel": "x"},
                        "value": {"expression": "n"},
                    }
                ]
            ),
            "spec.metrics[0].resource",
            "exactly one of",
        ),
        (
            _vme(metrics=[{"name": "rps", "resource": {"name": "a", "namespace": "a"}, "value": {}}]),
            "spec.metrics[0].value.expression",
            "required",
        ),
        (
            _vme(
                metrics=[{"name": "rps", "resource": {"name": "a", "namespace": "A_B"}, "value": {"expression": "n"}}]
            ),
            "spec.metrics[0].resource.namespace",
            "not a valid namespace",
        ),
        (  # `$` in a pattern also matches before a trailing newline: names are matched whole
            _vme(
                metrics=[{"name": "rps", "resource": {"name": "a", "namespace": "ab\n"}, "value": {"expression": "n"}}]
            ),
            "spec.metrics[0].resource.namespace",
            "not a valid namespace",
        ),
        (
            _vme(
                metrics=[{"name": "rps", "resource": {"name": "a\n", "namespace": "ab"}, "value": {"expression": "n"}}]
            ),
            "spec.metrics[0].resource.name",
            "not a valid resource name",
        ),
        (
            _vme(
                metrics=[
                    {
                        "name": "rps",
                        "resource": {"name": "a", "namespace": "a"},
                        "value": {"expression": "n"},
                        "weight": 2,
                    }
                ]
            ),
            "spec.metrics[0].weight",
            "unknown field",
        ),
        (_vme(extra_top=1), "extra_top", "unknown field"),
    ],
)
def test_virtual_metric_event_errors_name_object_and_path(doc, path, fragment) -> None:
    with pytest.raises(ValidationError) as info:
        parse_virtual_metric_event(doc, config_parsers())
    message = str(info.value)
    assert message.startswith(f"VirtualMetricEvent/ev: {path}: "), message
    assert fragment in message


def test_wrong_api_version_kind_and_namespace() -> None:
    with pytest.raises(ValidationError, match="apiVersion: expected prescaler.pingpong.ai/v1"):
        parse_virtual_metric({**_vm(), "apiVersion": "v1"})
    with pytest.raises(ValidationError, match="cluster-scoped"):
        parse_virtual_metric({**_vm(), "metadata": {"name": "rps", "namespace": "x"}})
    with pytest.raises(ValidationError, match="metadata.name: required"):
        parse_virtual_metric({**_vm(), "metadata": {}})


def test_extensions_parse() -> None:
    vm = parse_virtual_metric(_vm(leadTime="5m", holdTime="1m30s", min=1, max="100"))
    assert (vm.lead_time, vm.hold_time, vm.min, vm.max) == (300.0, 90.0, 1.0, 100.0)
    vme = parse_virtual_metric_event(
        _vme(
            source={
                "api": {"url": "http://x"},
                "interval": "10s",
                "timeout": "2s",
                "staleAfter": "1m",
                "onStale": "UseKnown",
            }
        ),
        config_parsers(),
    )
    assert (
        vme.source.common.interval,
        vme.source.common.timeout,
        vme.source.common.stale_after,
        vme.source.common.on_stale,
    ) == (10.0, 2.0, 60.0, "UseKnown")
