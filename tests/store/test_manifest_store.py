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


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("- a\n- b\n", "not a mapping"),
        ("a: b\n---\n[1, 2]\n", "document 2 is not a mapping"),
        ("key: {\n", "invalid YAML"),
    ],
)
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


# ---------------------------------------------------------------- hostile files and objects


def _laughs(levels: int) -> str:
    """A "billion laughs" Secret: each level lists the previous one 9 times (9**levels strings)."""
    lines = [
        "apiVersion: v1",
        "kind: Secret",
        "metadata: {name: lol, namespace: apps}",
        "stringData:",
        '  l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
    ]
    for level in range(1, levels):
        lines.append(f"  l{level}: &l{level} [{','.join([f'*l{level - 1}'] * 9)}]")
    return "\n".join(lines) + "\n"


def test_alias_bomb_in_a_secret_is_refused_quickly(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_laughs(9))
    assert len(bomb.read_bytes()) < 600
    started = time.perf_counter()
    with pytest.raises(ManifestError, match="aliases expand to more than"):
        load_documents(bomb)
    assert time.perf_counter() - started < 5  # a bound, not a benchmark: the expansion is never built


def test_alias_bomb_keeps_the_other_files_working(tmp_path: Path) -> None:
    sink = RecordingSink()
    _touch(tmp_path / "rps.yaml", GOOD % 1)
    _touch(tmp_path / "bomb.yaml", _laughs(9))
    store = ManifestStore(sink, [str(tmp_path)])
    store.poll()
    assert "aliases" in store.errors[str(tmp_path / "bomb.yaml")]
    assert ("VirtualMetric", ["rps"]) in sink.calls
    with pytest.raises(LookupError):
        store.resolve_secret("apps", "lol", "l8")


def test_ordinary_anchors_and_aliases_still_load(tmp_path: Path) -> None:
    path = tmp_path / "anchors.yaml"
    path.write_text(
        textwrap.dedent("""\
        kind: VirtualMetricEvent
        metadata: {name: e, labels: &labels {team: a, tier: web}}
        spec:
          metrics:
            - {name: rps, resource: {name: a, namespace: ns}, labels: *labels}
            - {name: rps, resource: {name: b, namespace: ns}, labels: *labels}
        """)
    )
    [doc] = load_documents(path)
    assert doc["spec"]["metrics"][1]["labels"] == {"team": "a", "tier": "web"}


def test_secret_with_non_mapping_data_does_not_abort_the_reload(tmp_path: Path) -> None:
    sink = RecordingSink()
    _touch(tmp_path / "rps.yaml", GOOD % 1)
    _touch(tmp_path / "odd.yaml", "kind: Secret\nmetadata: {name: odd}\nstringData: [a, b]\ndata: 12\n")
    store = ManifestStore(sink, [str(tmp_path)])
    store.poll()
    assert ("VirtualMetric", ["rps"]) in sink.calls
    assert store.resolve_secret("apps", "token", "value") == "s3cret"


class PickySink(RecordingSink):
    """A sink that fails on one object, as a bug in object handling would."""

    def __init__(self) -> None:
        super().__init__()
        self.applied: list[str] = []

    def resync(self, kind, docs):
        if any(d["metadata"]["name"] == "bad" for d in docs):
            raise OverflowError("int too large to convert to float")
        super().resync(kind, docs)

    def apply(self, doc):
        if doc["metadata"]["name"] == "bad":
            raise OverflowError("int too large to convert to float")
        self.applied.append(doc["metadata"]["name"])


def test_one_object_the_sink_cannot_take_never_blocks_the_others(tmp_path: Path) -> None:
    sink = PickySink()
    _touch(tmp_path / "a.yaml", GOOD % 1)
    _touch(
        tmp_path / "bad.yaml",
        "kind: VirtualMetric\nmetadata: {name: bad}\nspec: {}\n"
        "---\nkind: VirtualMetricEvent\nmetadata: {name: ev}\nspec: {}\n",
    )
    store = ManifestStore(sink, [str(tmp_path)])
    assert store.poll() is True  # no exception
    assert sink.calls == [("VirtualMetric", ["rps"]), ("VirtualMetricEvent", ["ev"])]


def test_an_unexpected_error_loading_one_file_keeps_the_others(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import adapter.store.manifests as manifests

    real = manifests.load_documents

    def flaky(path: Path, *args: int):
        if path.name == "broken.yaml":
            raise RecursionError("maximum recursion depth exceeded")
        return real(path, *args)

    monkeypatch.setattr(manifests, "load_documents", flaky)
    sink = RecordingSink()
    _touch(tmp_path / "broken.yaml", "kind: VirtualMetric\n")
    _touch(tmp_path / "rps.yaml", GOOD % 1)
    store = ManifestStore(sink, [str(tmp_path)])
    store.poll()
    assert "RecursionError" in store.errors[str(tmp_path / "broken.yaml")]
    assert ("VirtualMetric", ["rps"]) in sink.calls


def test_huge_literal_is_an_object_error_and_other_edits_still_apply(tmp_path: Path) -> None:
    """A 309-digit literal used to crash `serve` at start and abort the whole reload."""
    from adapter.engine import Engine

    def event(name: str, target: str, expression: str) -> str:
        return textwrap.dedent(f"""\
            apiVersion: prescaler.pingpong.ai/v1
            kind: VirtualMetricEvent
            metadata: {{name: {name}}}
            spec:
              source: {{schedule: {{items: [{{start: 0, end: 4000000000, values: {{n: 3}}}}]}}}}
              metrics:
                - {{name: rps, resource: {{name: {target}, namespace: ns}}, value: {{expression: "{expression}"}}}}
            """)

    async def go() -> tuple[float, str, float]:
        engine = Engine()
        store = ManifestStore(engine, [str(tmp_path)], poll_interval=0.05)
        _touch(tmp_path / "rps.yaml", GOOD % 0)
        _touch(tmp_path / "good.yaml", event("good", "a", "n * 2"))
        _touch(tmp_path / "huge.yaml", event("huge", "b", "n * " + "9" * 309))  # > the largest float
        await engine.start()
        store.start()  # used to raise OverflowError here

        async def value_of_a(expected: float) -> float:
            value = -1.0
            for _ in range(200):
                await asyncio.sleep(0.05)
                await settle(engine)
                values = engine.query("rps", "ns", parse_selector("resource=a")).values
                value = values[0].value if values else -1.0
                if value == expected:
                    break
            return value

        first = await value_of_a(6.0)
        error = engine.events["huge"].error or ""
        _touch(tmp_path / "good.yaml", event("good", "a", "n * 5"))  # an edit in the same reload as ...
        _touch(tmp_path / "huge.yaml", event("huge", "b", "n * " + "9" * 400))  # ... another bad one
        second = await value_of_a(15.0)
        await store.stop()
        await engine.stop()
        return first, error, second

    first, error, second = run(go())
    assert first == 6.0 and second == 15.0
    assert "VirtualMetricEvent/huge" in error and "spec.metrics[0].value.expression" in error
    assert "too large" in error


def test_the_watcher_reads_and_parses_files_off_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Parsing a file of 10 000 objects takes seconds; the watcher does it in a worker thread and
    only hands the parsed documents to the loop."""
    import threading

    import adapter.store.manifests as manifests

    parsed_on: list[int] = []
    real_load = manifests.load_documents

    def recording_load(path: Path, max_bytes: int = manifests.MAX_FILE_BYTES):
        parsed_on.append(threading.get_ident())
        return real_load(path, max_bytes)

    monkeypatch.setattr(manifests, "load_documents", recording_load)
    sink = RecordingSink()
    f = tmp_path / "rps.yaml"
    _touch(f, GOOD % 1)

    async def scenario() -> int:
        store = ManifestStore(sink, [str(tmp_path)], poll_interval=0.01)
        store.start()  # the first load, before serving, in one go
        _touch(f, GOOD % 2)
        for _ in range(300):
            if len(parsed_on) >= 2 and len(sink.calls) >= 4:
                break
            await asyncio.sleep(0.01)
        await store.stop()
        return threading.get_ident()

    loop_thread = run(scenario())
    assert parsed_on[0] == loop_thread and len(parsed_on) >= 2
    assert all(ident != loop_thread for ident in parsed_on[1:])
    assert sink.calls[-2:] == [("VirtualMetric", ["rps"]), ("VirtualMetricEvent", [])]


@pytest.mark.parametrize(
    "scalar, fragment",
    [
        ("[2023-02-30]", "invalid date or time 2023-02-30: day is out of range for month"),
        ("[" + "9" * 5000 + "]", "has too many digits"),  # beyond Python's int-to-string limit
    ],
)
def test_a_scalar_yaml_cannot_construct_is_invalid_yaml_with_its_line(
    tmp_path: Path, scalar: str, fragment: str
) -> None:
    """PyYAML raised a bare ValueError for these: no line, and every object of the file dropped."""
    path = tmp_path / "bad.yaml"
    path.write_text(
        "apiVersion: prescaler.pingpong.ai/v1\nkind: VirtualMetricEvent\nmetadata: {name: ev}\n"
        f"spec:\n  source:\n    schedule:\n      exclude: {scalar}\n"
    )
    with pytest.raises(ManifestError) as info:
        load_documents(path)
    assert str(info.value).startswith(f"{path}: line 7, column 17: invalid YAML: ")
    assert fragment in str(info.value)


def test_a_bad_date_in_one_file_keeps_the_other_files_working(tmp_path: Path) -> None:
    sink = RecordingSink()
    _touch(tmp_path / "rps.yaml", GOOD % 1)
    _touch(tmp_path / "dates.yaml", "kind: VirtualMetricEvent\nmetadata: {name: ev}\nspec: {exclude: [2023-02-30]}\n")
    store = ManifestStore(sink, [str(tmp_path)])
    store.poll()
    error = store.errors[str(tmp_path / "dates.yaml")]
    assert "line 3" in error and "invalid date or time 2023-02-30" in error and "ValueError" not in error
    assert ("VirtualMetric", ["rps"]) in sink.calls
