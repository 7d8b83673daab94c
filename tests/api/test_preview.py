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

ROOT = Path(__file__).resolve().parents[2]


def docs():
    return [
        metric("rps", leadTime="2m", defaultValue=1),
        schedule_event(
            "batches",
            [{"id": "b1", "start": NOW + 300, "end": NOW + 360, "values": {"n": 50}}],
            [entry("service-a", "service-a", "n * 2")],
        ),
        schedule_event(
            "baseline", [{"start": NOW, "end": NOW + 600, "values": {"n": 7}}], [entry("service-a", "service-a", "n")]
        ),
    ]


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


def _merge(strategy: str, values: list[float], default: float) -> float:
    if not values:
        return default
    return {"Sum": sum(values), "Max": max(values), "Min": min(values), "Average": sum(values) / len(values)}[strategy]


def _clamp(value: float, low, high) -> float:
    return min(max(value, low if low is not None else value), high if high is not None else value)


@pytest.mark.parametrize("strategy", ["Sum", "Max", "Min", "Average"])
def test_listed_contributions_merge_to_the_served_value(strategy: str) -> None:
    """Per step: the contributions listed are those active at the peak time, and merged with the
    strategy (default when none) and clamped they give exactly the value served."""
    items = [
        {
            "id": f"w{i}",
            "start": NOW + 90 * i,
            "end": NOW + 90 * i + 30 + 20 * (i % 3),
            "values": {"n": float(5 + 7 * ((i * 3) % 5))},
        }
        for i in range(12)
    ]
    spread = [
        {"id": f"s{i}", "start": NOW + 200 * i + 45, "end": NOW + 200 * i + 145, "values": {"n": float(11 + i)}}
        for i in range(5)
    ]
    objects = [
        metric("rps", leadTime="3m", holdTime="40s", defaultValue=2, mergeStrategy=strategy, max=40),
        schedule_event("waves", items, [entry("service-a", "service-a", "n")]),
        schedule_event("spread", spread, [entry("service-a", "service-a", "n * 2")]),
    ]

    async def go():
        engine = await loaded_engine(objects)
        result = engine.preview(PreviewRequest("rps", "service-a", "service-a", NOW - 60, 1500, 15))
        await engine.stop()
        return result

    doc = run(go())
    assert {s["value"] for s in doc["steps"]} != {2.0}  # the scenario has something to explain
    for step in doc["steps"]:
        t, peak = step["unix"], step["peakUnix"]
        assert t <= peak <= t + doc["leadTime"]
        listed = [c["value"] for c in step["contributions"]]
        assert all(c["start"] <= peak < c["activeUntil"] for c in step["contributions"])
        merged = _merge(strategy, listed, doc["defaultValue"])
        assert step["merged"] == pytest.approx(merged)
        assert _clamp(merged, doc["min"], doc["max"]) == pytest.approx(step["value"]), step


def test_contributions_outside_the_peak_are_not_listed() -> None:
    """Two batches inside one look-ahead window: only the one at the peak makes up the value."""
    objects = [
        metric("rps", leadTime="10m"),
        schedule_event(
            "batches",
            [
                {"id": "small", "start": NOW + 60, "end": NOW + 120, "values": {"n": 5}},
                {"id": "big", "start": NOW + 300, "end": NOW + 360, "values": {"n": 9}},
            ],
            [entry("service-a", "service-a", "n")],
        ),
    ]

    async def go():
        engine = await loaded_engine(objects)
        result = engine.preview(PreviewRequest("rps", "service-a", "service-a", NOW, 0, 60))
        await engine.stop()
        return result

    [step] = run(go())["steps"]
    assert step["value"] == 9 and step["peakUnix"] == NOW + 300
    assert [c["itemId"] for c in step["contributions"]] == ["big"]
    assert step["load"] == 0 and step["loadByObject"] == {}  # nothing active at t itself


def test_preview_route_and_errors() -> None:
    async def go():
        engine = await loaded_engine(docs())
        async with client(engine) as c:
            ok = await c.get(
                "/prescaler/v1/preview",
                params={
                    "metric": "rps",
                    "namespace": "service-a",
                    "resource": "service-a",
                    "start": str(NOW),
                    "duration": "10m",
                    "step": "5m",
                },
            )
            unknown = await c.get("/prescaler/v1/preview", params={"metric": "nope", "namespace": "a", "resource": "b"})
            bad = await c.get(
                "/prescaler/v1/preview", params={"metric": "rps", "namespace": "a", "resource": "b", "step": "often"}
            )
            huge = await c.get(
                "/prescaler/v1/preview",
                params={"metric": "rps", "namespace": "a", "resource": "b", "duration": "9000h", "step": "1s"},
            )
            missing = await c.get("/prescaler/v1/preview", params={"metric": "rps"})
        await engine.stop()
        return ok, unknown, bad, huge, missing

    ok, unknown, bad, huge, missing = run(go())
    assert missing.status_code == 400 and missing.json()["kind"] == "Status"
    assert "namespace, resource" in missing.json()["message"]
    assert ok.status_code == 200 and [s["value"] for s in ok.json()["steps"]] == [7, 107, 1]
    assert unknown.status_code == 404 and "nope" in unknown.json()["message"]
    assert unknown.json()["kind"] == "Status" and unknown.json()["reason"] == "NotFound"
    assert bad.status_code == 400 and "invalid duration" in bad.json()["message"]
    assert huge.status_code == 400 and "at most" in huge.json()["message"]


@pytest.mark.parametrize(
    "params",
    [
        {"start": "inf"},
        {"start": "-inf"},
        {"start": "nan"},
        {"start": "1e300"},
        {"start": "-1e20"},
        {"start": "9" * 400},
        {"duration": "1e300s"},
        {"step": "1e300s"},
    ],
)
def test_preview_bad_numbers_are_400_status(params) -> None:
    async def go():
        engine = await loaded_engine(docs())
        async with client(engine) as c:
            response = await c.get(
                "/prescaler/v1/preview",
                params={"metric": "rps", "namespace": "service-a", "resource": "service-a", **params},
            )
            after = await c.get(
                "/prescaler/v1/preview",
                params={
                    "metric": "rps",
                    "namespace": "service-a",
                    "resource": "service-a",
                    "start": str(NOW),
                    "duration": "10m",
                    "step": "5m",
                },
            )
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
    args = [
        sys.executable,
        "-m",
        "adapter.cli",
        "preview",
        "--manifests",
        str(tmp_path),
        "--metric",
        "rps",
        "--namespace",
        "service-a",
        "--resource",
        "service-a",
        "--from",
        str(NOW),
        "--for",
        "10m",
        "--step",
        "3m",
    ]
    table = subprocess.run(
        args + ["--plot", str(tmp_path / "p.png")], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert table.returncode == 0, table.stderr
    assert "batches[0] n * 2=100 " in table.stdout and "baseline[0] n=7 " in table.stdout
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    as_json = subprocess.run(args + ["--json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert [s["value"] for s in json.loads(as_json.stdout)["steps"]] == [7, 107, 7, 7]
    missing = subprocess.run(
        args[:5] + [str(tmp_path / "nope")] + args[6:], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert missing.returncode == 2 and "no such file" in missing.stderr and "Traceback" not in missing.stderr


def test_preview_cli_time_zone_and_plot(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(yaml.safe_dump_all(docs()))
    args = [
        sys.executable,
        "-m",
        "adapter.cli",
        "preview",
        "--manifests",
        str(tmp_path),
        "--metric",
        "rps",
        "--namespace",
        "service-a",
        "--resource",
        "service-a",
        "--from",
        str(NOW),
        "--for",
        "10m",
        "--step",
        "3m",
    ]
    seoul = subprocess.run(
        args + ["--time-zone", "Asia/Seoul", "--plot", str(tmp_path / "p.png")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert seoul.returncode == 0, seoul.stderr
    from datetime import datetime
    from zoneinfo import ZoneInfo

    first = datetime.fromtimestamp(NOW, tz=ZoneInfo("Asia/Seoul")).isoformat(timespec="seconds")
    assert first in seoul.stdout and "+09:00" in first and "times in Asia/Seoul" in seoul.stdout
    assert (tmp_path / "p.png").stat().st_size > 10_000
    bad = subprocess.run(args + ["--time-zone", "Mars/Olympus"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--time-zone" in bad.stderr and "Traceback" not in bad.stderr


def test_preview_reads_the_objects_from_a_cluster(tmp_path: Path) -> None:
    from tests.fakekube import FakeKube

    with FakeKube() as fake:
        for doc in docs():
            fake.apply(doc)
        kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig")
        args = [
            sys.executable,
            "-m",
            "adapter.cli",
            "preview",
            "--kubeconfig",
            str(kubeconfig),
            "--metric",
            "rps",
            "--namespace",
            "service-a",
            "--resource",
            "service-a",
            "--from",
            str(NOW),
            "--for",
            "10m",
            "--step",
            "3m",
            "--json",
        ]
        result = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)
        lists = fake.requests_matching("GET", "/virtualmetric")
        watches = [r for r in lists if r.query.get("watch")]
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [s["value"] for s in doc["steps"]] == [7, 107, 7, 7]
    assert {c["event"] for c in doc["steps"][1]["contributions"]} == {"batches", "baseline"}
    assert len(lists) == 2 and not watches  # one list per kind, no watch
    unreachable = subprocess.run(
        args[:5] + [str(tmp_path / "none")] + args[6:], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert unreachable.returncode == 2 and "kubeconfig" in unreachable.stderr
    assert "Traceback" not in unreachable.stderr


def test_preview_cli_prints_the_warnings_the_server_would_report(tmp_path: Path) -> None:
    """Skipped items, a metric no VirtualMetric defines and a contested metric name are printed, and the
    table is still made of what is valid."""
    from tests.source_http_fixture import start_server

    body = json.dumps(
        {
            "items": [
                {"id": "ok", "start": NOW + 60, "end": NOW + 120, "values": {"n": 5}},
                {"id": "typo", "start": NOW + 60, "end": NOW + 30, "values": {"n": 9}},
            ]
        }
    ).encode()
    server, stop = start_server({"/items": (200, "application/json", body)})
    announced = {
        "apiVersion": "prescaler.pingpong.ai/v1",
        "kind": "VirtualMetricEvent",
        "metadata": {"name": "announced"},
        "spec": {
            "source": {"api": {"url": server.base_url + "/items"}},
            "metrics": [entry("service-a", "service-a", "n"), entry("service-a", "service-a", "n", "qps")],
        },
    }
    first, second = metric("rps", leadTime="1m"), metric("rps", leadTime="1m")
    first["metadata"]["creationTimestamp"] = "2020-01-01T00:00:00Z"
    second["metadata"]["name"] = "rps-again"
    second["metadata"]["creationTimestamp"] = "2030-01-01T00:00:00Z"
    (tmp_path / "m.yaml").write_text(yaml.safe_dump_all([first, second, announced]))
    try:
        run_ = subprocess.run(
            [sys.executable, "-m", "adapter.cli", "preview", "--manifests", str(tmp_path), "--metric", "rps"]
            + ["--namespace", "service-a", "--resource", "service-a", "--from", str(NOW), "--duration", "4m"]
            + ["--step", "1m", "--allow-private-networks", "--json"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        stop()
    assert run_.returncode == 0, run_.stderr
    warnings = [line for line in run_.stderr.splitlines() if line.startswith("warning: ")]
    skipped = f"VirtualMetricEvent announced: items[1]: start ({NOW + 60:.0f}, "
    assert any(skipped in w and f"must be before end ({NOW + 30:.0f}, " in w for w in warnings), warnings
    assert any("VirtualMetricEvent announced: names metric 'qps'" in w for w in warnings), warnings
    assert any("VirtualMetric/rps-again: spec.name: metric 'rps' is already served" in w for w in warnings), warnings
    assert len(warnings) == 3, warnings
    assert [s["value"] for s in json.loads(run_.stdout)["steps"]] == [5, 5, 0, 0, 0]
