"""docs/adding-a-source.md stays true: its example kind, taken from the guide's code block, loads
through the registry and the resource parser and runs under the real SourceRunner."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import types
from pathlib import Path

import pytest

import adapter.sources.registry as registry
from adapter.errors import ValidationError
from adapter.resources import parse_virtual_metric_event
from adapter.sources.base import SourceContext
from adapter.sources.runner import SourceRunner

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "adding-a-source.md"


@pytest.fixture
def file_kind(monkeypatch):
    code = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)
    assert len(code) == 1, "the guide has one example module"
    module = types.ModuleType("adapter.sources.file_example")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # dataclasses look their module up
    exec(compile(code[0], str(GUIDE), "exec"), module.__dict__)  # noqa: S102 - our own documentation
    monkeypatch.setattr(registry, "_BY_KIND", {**registry._BY_KIND, "file": module.FileSource})
    return module.FileSource


def event(source: dict) -> dict:
    return {
        "apiVersion": "prescaler.pingpong.ai/v1",
        "kind": "VirtualMetricEvent",
        "metadata": {"name": "from-file"},
        "spec": {
            "source": source,
            "metrics": [
                {"name": "rps", "resource": {"namespace": "ns", "name": "web"}, "value": {"expression": "n * 2"}}
            ],
        },
    }


def test_the_guide_example_is_a_working_kind(file_kind, tmp_path):
    items = tmp_path / "items.json"
    items.write_text(
        json.dumps(
            {
                "items": [
                    {"start": 1_700_000_000, "end": 1_700_000_060, "values": {"n": 1}, "id": "a"},
                    {"start": 1_700_000_000, "end": 1_700_000_060, "values": {"n": 5}, "id": "a"},
                    {"start": "soon", "end": 1_700_000_060, "values": {"n": 1}},
                ]
            }
        )
    )
    vme = parse_virtual_metric_event(
        event({"file": {"path": str(items)}, "interval": "10s"}), registry.config_parsers()
    )
    assert vme.source.kind == "file" and vme.source.common.interval == 10.0
    source = registry.create_source("file", vme.source.config, vme.source.common, SourceContext())
    assert isinstance(source, file_kind)
    snapshots: list = []

    async def run() -> None:
        runner = SourceRunner(vme.name, source, lambda _name, got: snapshots.append(got))
        assert await runner.fetch_once()
        assert runner.health.warnings and "items[2].start" in runner.health.warnings[0]
        await runner.stop()

    asyncio.run(run())
    assert [(i.id, i.values["n"]) for i in snapshots[0]] == [("a", 5.0)]  # deduped by the runner


def test_the_guide_example_reports_config_errors_with_paths(file_kind):
    with pytest.raises(ValidationError, match=r"spec\.source\.file\.path.*absolute"):
        parse_virtual_metric_event(event({"file": {"path": "items.json"}}), registry.config_parsers())
    with pytest.raises(ValidationError, match=r"spec\.source: exactly one of api, schedule, prometheus, forecast"):
        parse_virtual_metric_event(event({}), registry.config_parsers())
