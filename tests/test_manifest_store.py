"""Local mode store: multi-document files, reload on change, broken files keep their last good objects."""

from __future__ import annotations

import asyncio
import textwrap
import time
from pathlib import Path

import pytest

from adapter.labels import parse_selector
from adapter.store.manifests import ManifestError, ManifestStore, load_documents
from tests.helpers import run, settle

GOOD = textwrap.dedent("""\
    apiVersion: prescaler.pingpong.ai/v1
    kind: VirtualMetric
    metadata: {name: rps}
    spec: {name: rps, defaultValue: %s}
    ---
    apiVersion: v1
    kind: Secret
    metadata: {name: token, namespace: apps}
    stringData: {value: s3cret}
    ---
    apiVersion: autoscaling/v2
    kind: HorizontalPodAutoscaler
    metadata: {name: ignored}
    """)


class RecordingSink:
    def __init__(self):
        self.calls = []

    def resync(self, kind, docs):
        self.calls.append((kind, [d["metadata"]["name"] for d in docs]))


def _touch(path: Path, text: str) -> None:
    path.write_text(text)
    stamp = time.time() + 1
    import os
    os.utime(path, (stamp, stamp))


def test_load_reload_and_broken_file(tmp_path: Path) -> None:
    sink = RecordingSink()
    f = tmp_path / "rps.yaml"
    _touch(f, GOOD % 1)
    store = ManifestStore(sink, [str(tmp_path)])
    assert store.poll() is True
    assert sink.calls[-2:] == [("VirtualMetric", ["rps"]), ("VirtualMetricEvent", [])]
    assert store.resolve_secret("apps", "token", "value") == "s3cret"
    with pytest.raises(LookupError):
        store.resolve_secret("apps", "token", "missing")
    assert store.poll() is False  # nothing changed
    _touch(f, "kind: VirtualMetric\nmetadata: {name: [unclosed\n")
    store.poll()
    assert "invalid YAML" in store.errors[str(f)] and "line" in store.errors[str(f)]
    assert sink.calls[-2] == ("VirtualMetric", ["rps"])  # last good version kept
    _touch(f, GOOD % 2)
    store.poll()
    assert store.errors == {}
    f.unlink()
    store.poll()
    assert sink.calls[-2] == ("VirtualMetric", [])


def test_missing_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="no such file"):
        ManifestStore(RecordingSink(), [str(tmp_path / "nope")])


@pytest.mark.parametrize("text, fragment", [
    ("- a\n- b\n", "not a mapping"),
    ("a: b\n---\n[1, 2]\n", "document 2 is not a mapping"),
    ("key: {\n", "invalid YAML"),
])
def test_load_documents_errors(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(text)
    with pytest.raises(ManifestError, match=fragment):
        load_documents(path)


def test_engine_follows_file_changes(tmp_path: Path) -> None:
    from adapter.engine import Engine

    async def go():
        engine = Engine(start_sources=False)
        store = ManifestStore(engine, [str(tmp_path)], poll_interval=0.05)
        f = tmp_path / "rps.yaml"
        _touch(f, GOOD % 4)
        await engine.start()
        store.start()
        await settle(engine)
        first = engine.query("rps", "ns", parse_selector("resource=a")).values[0].value
        _touch(f, GOOD % 9)
        for _ in range(100):
            await asyncio.sleep(0.05)
            await settle(engine)
            if engine.query("rps", "ns", parse_selector("resource=a")).values[0].value == 9:
                break
        second = engine.query("rps", "ns", parse_selector("resource=a")).values[0].value
        await store.stop()
        await engine.stop()
        return first, second
    assert run(go()) == (4.0, 9.0)
