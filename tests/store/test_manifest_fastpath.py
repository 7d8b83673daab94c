"""Manifests at scale: JSON-shaped files skip PyYAML's constructor; the size limit is a flag."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapter.cli import build_parser
from adapter.store import manifests
from adapter.store.manifests import ManifestError, ManifestStore, load_documents


def event(name: str, targets: int) -> dict[str, Any]:
    return {
        "apiVersion": "prescaler.pingpong.ai/v1",
        "kind": "VirtualMetricEvent",
        "metadata": {"name": name, "labels": {"team": "a"}},
        "spec": {
            "source": {
                "schedule": {
                    "items": [{"start": 1700000000, "end": 1700003600, "values": {"n": 1.5, "id": "x\u00e9\\/"}}]
                }
            },
            "metrics": [
                {"name": "rps", "resource": {"name": f"svc-{i}", "namespace": "apps"}, "value": {"expression": "n * 2"}}
                for i in range(targets)
            ],
        },
    }


class RecordingSink:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def resync(self, kind: str, docs: list[dict[str, Any]]) -> None:
        self.calls.append((kind, [d["metadata"]["name"] for d in docs]))


def test_json_shaped_yaml_is_read_without_pyyaml_and_equals_the_yaml_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = event("big", 50)
    path = tmp_path / "big.yaml"
    path.write_text("\n  " + json.dumps(doc, indent=1) + "\n")
    expected = list(yaml.load_all(path.read_text(), Loader=yaml.SafeLoader))

    def no_yaml(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("PyYAML was used for a JSON-shaped file")

    monkeypatch.setattr(manifests.yaml, "load_all", no_yaml)
    assert load_documents(path) == expected


@pytest.mark.parametrize(
    "text",
    [
        '{"kind": "VirtualMetric", "metadata": {"name": "x"}, "spec": {"value": NaN}}',  # not JSON: YAML's string
        "{kind: VirtualMetric, metadata: {name: x}}",  # flow YAML, not JSON
        '{"kind": "VirtualMetric", "metadata": {"name": "x"}}\n---\n{"kind": "VirtualMetric", "metadata": {"name": "y"}}',
    ],
)
def test_text_that_is_not_one_json_object_is_read_as_yaml(tmp_path: Path, text: str) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(text)
    assert load_documents(path) == [d for d in yaml.load_all(text, Loader=yaml.SafeLoader) if d is not None]


def test_invalid_text_starting_like_json_still_gets_the_yaml_error_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text('{"kind": "VirtualMetric",\n "metadata": {"name": "x"\n')
    with pytest.raises(ManifestError, match=r"x.yaml: line \d+, column \d+: invalid YAML"):
        load_documents(path)


def test_size_limit_is_the_flag_and_the_error_names_it(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_text(json.dumps(event("big", 2000)))
    size = path.stat().st_size
    with pytest.raises(
        ManifestError,
        match=rf"{size} bytes is larger than the limit of 1000 bytes "
        r"\(raise it with --max-manifest-bytes\)",
    ):
        load_documents(path, max_bytes=1000)
    sink = RecordingSink()
    store = ManifestStore(sink, [str(tmp_path)], max_file_bytes=1000)
    store.poll()
    assert "--max-manifest-bytes" in store.errors[str(path)] and sink.calls[-1] == ("VirtualMetricEvent", [])
    store = ManifestStore(sink, [str(tmp_path)], max_file_bytes=size)
    store.poll()
    assert store.errors == {} and sink.calls[-1] == ("VirtualMetricEvent", ["big"])


def test_serve_flag_parses_and_refuses_nonsense(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["serve", "--manifests", "x", "--max-manifest-bytes", "67108864"])
    assert args.max_manifest_bytes == 64 * 2**20
    assert build_parser().parse_args(["serve", "--manifests", "x"]).max_manifest_bytes == manifests.MAX_FILE_BYTES
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--max-manifest-bytes", "0"])
    assert "--max-manifest-bytes: must be a positive number of bytes" in capsys.readouterr().err


ENTRY_VARIANTS: list[Any] = [
    {"name": "rps", "resource": {"name": "svc", "namespace": "apps"}, "value": {"expression": "n * 2"}},
    {"name": "rps", "resource": {"namespace": "apps", "name": "a.b-c"}, "value": {"expression": "1"}},
    {"name": "rps", "resource": {"name": "svc", "namespace": "apps"}, "value": {"expression": 5}},
    {"name": "rps", "resource": {"nameFromLabel": "app", "namespace": "apps"}, "value": {"expression": "n"}},
    {"name": "", "resource": {"name": "svc", "namespace": "apps"}, "value": {"expression": "n"}},
    {"name": "r ps", "resource": {"name": "svc", "namespace": "apps"}, "value": {"expression": "n"}},
    {"name": "rps", "resource": {"name": "Svc", "namespace": "apps"}, "value": {"expression": "n"}},
    {"name": "rps", "resource": {"name": "", "namespace": "apps"}, "value": {"expression": "n"}},
    {"name": "rps", "resource": {"name": "svc", "namespace": "Apps"}, "value": {"expression": "n"}},
    {"name": "rps", "resource": {"name": "svc", "namespace": ""}, "value": {"expression": "n"}},
    {"name": "rps", "resource": {"name": "svc", "namespace": "apps"}, "value": {"expression": "  "}},
    {"name": "rps", "resource": {"name": "svc", "namespace": "apps"}, "value": {"expr": "n"}},
    {"name": "rps", "resource": {"name": "svc", "namespace": "apps"}, "value": {"expression": None}},
    {"name": "rps", "resource": {"name": "svc", "namespace": "apps", "x": 1}, "value": {"expression": "n"}},
    {"name": "rps", "resource": {"name": None, "namespace": "apps"}, "value": {"expression": "n"}},
    {"name": "rps", "resource": {"name": "svc", "namespace": "apps"}, "value": {"expression": "n"}, "extra": 1},
    {"name": "rps", "resource": ["svc"], "value": {"expression": "n"}},
    {"name": 7, "resource": {"name": "svc", "namespace": "apps"}, "value": {"expression": "n"}},
    {"name": "rps", "resource": {"name": "s" * 300, "namespace": "apps"}, "value": {"expression": "n"}},
    {"name": "rps", "resource": {"name": "svc", "namespace": "apps"}, "value": "n"},
    "rps",
]


@pytest.mark.parametrize("index", range(len(ENTRY_VARIANTS)))
def test_bulk_entry_check_agrees_with_the_field_by_field_one(index: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from adapter import resources
    from adapter.errors import ValidationError

    def parse() -> Any:
        try:
            return resources._parse_metric_entries([ENTRY_VARIANTS[0], ENTRY_VARIANTS[index]])
        except ValidationError as exc:
            return f"error: {exc}"

    fast = parse()
    monkeypatch.setattr(resources, "_common_entry", lambda *args: None)
    assert fast == parse()


def test_bulk_entry_check_takes_the_common_shape() -> None:
    from adapter import resources

    assert resources._common_entry(ENTRY_VARIANTS[0], {}, {}) is not None
    assert resources._common_entry(ENTRY_VARIANTS[3], {}, {}) is None  # nameFromLabel: the full path
