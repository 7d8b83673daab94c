"""`prescaler preview` and /prescaler/v1/preview: values over a window, explained by contributions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from adapter.pipeline.preview import PreviewRequest, parse_time
from tests.helpers import NOW, client, entry, loaded_engine, metric, run, schedule_event

ROOT = Path(__file__).resolve().parent.parent


def docs():
    return [metric("rps", leadTime="2m", defaultValue=1),
            schedule_event("batches", [{"id": "b1", "start": NOW + 300, "end": NOW + 360, "values": {"n": 50}}],
                           [entry("service-a", "service-a", "n * 2")]),
            schedule_event("baseline", [{"start": NOW, "end": NOW + 600, "values": {"n": 7}}],
                           [entry("service-a", "service-a", "n")])]


def test_preview_values_and_attribution() -> None:
    async def go():
        engine = await loaded_engine(docs())
        result = engine.preview(PreviewRequest("rps", "service-a", "service-a", NOW, 600, 60))
        await engine.stop()
        return result
    doc = run(go())
    values = [s["value"] for s in doc["steps"]]
    # baseline 7 all along; the batch (100) is served from 2 minutes before it starts (leadTime).
    assert values == [7, 7, 7, 107, 107, 107, 7, 7, 7, 7, 1]
    at_180 = doc["steps"][3]["contributions"]
    assert {(c["event"], c["value"]) for c in at_180} == {("batches", 100.0), ("baseline", 7.0)}
    assert doc["steps"][0]["contributions"][0]["expression"] == "n"
    assert doc["steps"][10]["contributions"] == []  # after everything: the default, nothing to explain


def test_preview_route_and_errors() -> None:
    async def go():
        engine = await loaded_engine(docs())
        async with client(engine) as c:
            ok = await c.get("/prescaler/v1/preview", params={"metric": "rps", "namespace": "service-a",
                                                              "resource": "service-a", "start": str(NOW),
                                                              "duration": "10m", "step": "5m"})
            unknown = await c.get("/prescaler/v1/preview", params={"metric": "nope", "namespace": "a",
                                                                   "resource": "b"})
            bad = await c.get("/prescaler/v1/preview", params={"metric": "rps", "namespace": "a", "resource": "b",
                                                               "step": "often"})
            huge = await c.get("/prescaler/v1/preview", params={"metric": "rps", "namespace": "a", "resource": "b",
                                                                "duration": "9000h", "step": "1s"})
        await engine.stop()
        return ok, unknown, bad, huge
    ok, unknown, bad, huge = run(go())
    assert ok.status_code == 200 and [s["value"] for s in ok.json()["steps"]] == [7, 107, 1]
    assert unknown.status_code == 404 and "nope" in unknown.json()["message"]
    assert unknown.json()["kind"] == "Status" and unknown.json()["reason"] == "NotFound"
    assert bad.status_code == 400 and "invalid duration" in bad.json()["message"]
    assert huge.status_code == 400 and "at most" in huge.json()["message"]


@pytest.mark.parametrize("params", [{"start": "inf"}, {"start": "-inf"}, {"start": "nan"}, {"start": "1e300"},
                                    {"start": "-1e20"}, {"start": "9" * 400}, {"duration": "1e300s"},
                                    {"step": "1e300s"}])
def test_preview_bad_numbers_are_400_status(params) -> None:
    async def go():
        engine = await loaded_engine(docs())
        async with client(engine) as c:
            response = await c.get("/prescaler/v1/preview", params={"metric": "rps", "namespace": "service-a",
                                                                    "resource": "service-a", **params})
            after = await c.get("/prescaler/v1/preview", params={"metric": "rps", "namespace": "service-a",
                                                                 "resource": "service-a", "start": str(NOW),
                                                                 "duration": "10m", "step": "5m"})
        await engine.stop()
        return response, after
    response, after = run(go())
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["kind"] == "Status" and body["reason"] == "BadRequest" and body["code"] == 400
    assert after.status_code == 200  # the server keeps answering


def test_parse_time() -> None:
    assert parse_time("now", 5.0) == 5.0
    assert parse_time("1700000000", 0) == 1_700_000_000
    assert parse_time("2023-11-14T22:13:20Z", 0) == 1_700_000_000
    try:
        parse_time("yesterday", 0)
    except ValueError as exc:
        assert "invalid time" in str(exc)
    else:
        raise AssertionError("accepted junk")


def test_preview_cli(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(yaml.safe_dump_all(docs()))
    args = [sys.executable, "-m", "adapter.cli", "preview", "--manifests", str(tmp_path), "--metric", "rps",
            "--namespace", "service-a", "--resource", "service-a", "--from", str(NOW), "--for", "10m",
            "--step", "3m"]
    table = subprocess.run(args + ["--plot", str(tmp_path / "p.png")], cwd=ROOT, capture_output=True, text=True,
                           timeout=120)
    assert table.returncode == 0, table.stderr
    assert "batches[0] n * 2=100.0" in table.stdout and "baseline[0] n=7.0" in table.stdout
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    as_json = subprocess.run(args + ["--json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert [s["value"] for s in json.loads(as_json.stdout)["steps"]] == [7, 107, 7, 7]
    missing = subprocess.run(args[:5] + [str(tmp_path / "nope")] + args[6:], cwd=ROOT, capture_output=True,
                             text=True, timeout=120)
    assert missing.returncode == 2 and "no such file" in missing.stderr and "Traceback" not in missing.stderr
