"""The fixed replay form and `prescaler simulate` on it: docs/hpa-algorithm.md's worked examples end to end.

Expected replica sequences are the docs/hpa-algorithm.md §10 tables, read by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapter.sim.cli import add_parsers
from adapter.sim.engine import run_scenario
from adapter.sim.scenario import parse_scenario

REPO = Path(__file__).resolve().parents[2]


def hpa(
    target_type: str = "AverageValue",
    target: str = "10",
    behavior: Any = "default",
    max_r: int = 50,
    names: tuple[str, ...] = ("rps",),
) -> dict[str, Any]:
    key = "averageValue" if target_type == "AverageValue" else "value"
    spec: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "minReplicas": 1,
        "maxReplicas": max_r,
        "metrics": [
            {"type": "External", "external": {"metric": {"name": n}, "target": {"type": target_type, key: target}}}
            for n in names
        ],
    }
    if behavior == "default":
        spec["behavior"] = {}
    elif behavior is not None:
        spec["behavior"] = behavior
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": spec,
    }


def replay(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return run_scenario(parse_scenario(doc)).to_json()["ticks"]


def replicas(ticks: list[dict[str, Any]]) -> list[int]:
    return [t["replicas"] for t in ticks]


def cli(tmp_path: Path, doc: Any, *extra: str) -> tuple[int, str, str]:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers())
    args = parser.parse_args(["simulate", "--scenario", str(scenario), *extra])
    err, std = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
        code = args.func(args)
    return code, std.getvalue(), err.getvalue()


# ---------------------------------------------------------------- worked examples (docs/hpa-algorithm.md §10)


def test_example_1_behavior_and_legacy() -> None:
    base = {"tick": "15s", "workload": {"replicas": 2, "startupDelay": "0s"}, "metrics": {"rps": [200] * 4}}
    assert replicas(replay({**base, "hpa": hpa()})) == [6, 12, 20, 20]
    assert replicas(replay({**base, "hpa": hpa(behavior=None)})) == [4, 8, 16, 20]


def test_example_1_ticks_carry_time_and_ready() -> None:
    ticks = replay(
        {
            "hpa": hpa(),
            "tick": "15s",
            "workload": {"replicas": 2, "startupDelay": "0s"},
            "metrics": {"rps": [200, 200, 200]},
        }
    )
    assert [t["time"] for t in ticks] == [0, 15, 30]
    # ready pods seen by each reconcile: pods created at t with no delay are Ready from the next tick
    assert [t["readyReplicas"] for t in ticks] == [2, 6, 12]


@pytest.mark.parametrize("behavior", [None, "default"])
def test_example_2_drop_at_345(behavior: Any) -> None:
    series = [200] * 4 + [20] * 21
    ticks = replay(
        {
            "hpa": hpa(behavior=behavior),
            "tick": "15s",
            "workload": {"replicas": 2, "startupDelay": "0s"},
            "metrics": {"rps": series},
        }
    )
    by_time = {t["time"]: t["replicas"] for t in ticks}
    assert by_time[330] == 20 and by_time[345] == 2


def test_example_3_value_target_with_30s_readiness() -> None:
    ticks = replay(
        {
            "hpa": hpa("Value", "100", max_r=10),
            "tick": "15s",
            "workload": {"replicas": 2, "startupDelay": "30s"},
            "metrics": {"rps": [150] * 9},
        }
    )
    assert replicas(ticks) == [3, 3, 5, 5, 8, 8, 10, 10, 10]
    assert [t["readyReplicas"] for t in ticks][:7] == [2, 2, 3, 3, 5, 5, 8]


@pytest.mark.parametrize(
    "behavior, expected_head, drop_time",
    [
        (None, [4, 8, 16, 20], 300),
        ("default", [6, 6, 6, 6], 300),
    ],
)
def test_example_4_one_tick_spike(behavior: Any, expected_head: list[int], drop_time: int) -> None:
    series = [200] + [20] * 21
    ticks = replay(
        {
            "hpa": hpa(behavior=behavior),
            "tick": "15s",
            "workload": {"replicas": 2, "startupDelay": "0s"},
            "metrics": {"rps": series},
        }
    )
    by_time = {t["time"]: t["replicas"] for t in ticks}
    assert [by_time[t] for t in (0, 15, 30, 45)] == expected_head
    assert by_time[drop_time - 15] == expected_head[-1]
    assert by_time[drop_time] == 2


def test_quantity_strings_and_failures_in_replay() -> None:
    # "225" as a quantity string and "225000m" are the same value; null fails the only metric: hold
    ticks = replay(
        {"hpa": hpa(), "tick": "15s", "workload": {"replicas": 20}, "metrics": {"rps": ["225000m", None, "0.215k"]}}
    )
    assert replicas(ticks) == [23, 23, 23]
    assert ticks[1]["outcome"] == "aborted"


def test_failed_metric_blocks_scale_down_in_replay() -> None:
    doc = {
        "hpa": hpa(names=("a", "b"), behavior={"scaleDown": {"stabilizationWindowSeconds": 0}}),
        "tick": "15s",
        "workload": {"replicas": 10},
        "metrics": {"a": [20, 20, 150], "b": [None, 20, None]},
    }
    # t0: a wants 2 but b fails -> hold 10; t15: both valid -> 2; t30: b fails but a wants 15 > 2 ->
    # scale up, limited to max(2 + 4, 2 * 2) = 6
    assert replicas(replay(doc)) == [10, 2, 6]


# ---------------------------------------------------------------- CLI


def test_cli_writes_json_for_the_replay_example(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    code, stdout, _ = cli(tmp_path, (REPO / "examples/sim/replay-example1.yaml").read_text(), "--output", str(out))
    assert code == 0
    doc = json.loads(out.read_text())
    seq = [(t["time"], t["replicas"]) for t in doc["ticks"]]
    assert seq[:4] == [(0, 6), (15, 12), (30, 20), (45, 20)]
    assert dict(seq)[330] == 20 and dict(seq)[345] == 2
    assert doc["ticks"][26]["outcome"] == "aborted" and doc["ticks"][26]["replicas"] == 2
    assert "summary" in doc and "hpa" in stdout.split()  # the run as given; no prescaler metric


def test_cli_end_to_end_through_the_prescaler_command(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "adapter.cli",
            "simulate",
            "--scenario",
            str(REPO / "examples/sim/replay-example3.yaml"),
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert [t["replicas"] for t in json.loads(out.read_text())["ticks"]] == [3, 3, 5, 5, 8, 8, 10, 10]


def test_cli_bad_scenario_exits_2_with_the_field(tmp_path: Path) -> None:
    proc_file = tmp_path / "bad.yaml"
    proc_file.write_text(yaml.safe_dump({"hpa": hpa(), "tick": "15 seconds", "metrics": {"rps": [1]}}))
    proc = subprocess.run(
        [sys.executable, "-m", "adapter.cli", "simulate", "--scenario", str(proc_file)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert "tick" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "doc, field",
    [
        ({"tick": "15s", "metrics": {"rps": [1]}}, "hpa"),
        ({"hpa": hpa(), "metrics": {"rps": [1, "x"]}}, "metrics.rps[1]"),
        ({"hpa": hpa(), "metrics": {"qps": [1]}}, "metrics.qps"),
        ({"hpa": hpa(), "metrics": {}}, "metrics.rps"),
        ({"hpa": hpa(), "metrics": {"rps": [1]}, "workload": {"replicas": -1}}, "workload.replicas"),
        ({"hpa": hpa(), "metrics": {"rps": [1]}, "workload": {"startupDelay": "soon"}}, "workload.startupDelay"),
        ({"hpa": hpa(names=("a", "b")), "metrics": {"a": [1, 2], "b": [1]}}, "metrics"),
        ({"hpa": hpa(), "metrics": {"rps": [1]}, "surprise": 1}, "surprise"),
        (
            {"hpa": {**hpa(), "spec": {**hpa()["spec"], "maxReplicas": "many"}}, "metrics": {"rps": [1]}},
            "hpa.spec.maxReplicas",
        ),
        ({"hpa": hpa(), "metrics": {"rps": {"from": "traffic"}}}, "metrics.rps"),
        ("hpa: [unclosed", ""),
        ("- just\n- a list\n", "scenario"),
    ],
)
def test_bad_scenarios_name_the_field(tmp_path: Path, doc: Any, field: str) -> None:
    code, _, err = cli(tmp_path, doc)
    assert code == 2
    assert "Traceback" not in err
    assert field in err


def test_replay_values_keep_their_exact_milli_value() -> None:
    # 20 significant digits: a float would lose the last milli; the HPA's MilliValue() does not
    scenario = parse_scenario({"hpa": hpa(), "metrics": {"rps": ["10.000000000000000001", "1n", None]}})
    assert scenario.metrics["rps"].milli == (10_001, 1, None)
