"""The simulate plot: demand vs ready capacity with unserved demand shaded, replicas on a second axis,
units, runs named prescaled/reactive/oracle, and --from/--duration zoom."""

from __future__ import annotations

import argparse
import contextlib
import io
from functools import cache
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from adapter.sim.cli import add_parsers  # noqa: E402
from adapter.sim.engine import run_scenario  # noqa: E402
from adapter.sim.plot import PlotWindow, plot_result  # noqa: E402
from adapter.sim.scenario import load_scenario  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CAMPAIGN = REPO / "examples/sim/campaign-schedule.yaml"
REPLAY = REPO / "examples/sim/replay-example1.yaml"
BURST = 804_729_600 + 10 * 3600  # 1995-07-03T10:00:00Z, the first campaign burst


@cache
def campaign_result() -> Any:
    return run_scenario(load_scenario(CAMPAIGN))


def simulate(*argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers())
    args = parser.parse_args(["simulate", *argv])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = args.func(args)
    return code, out.getvalue(), err.getvalue()


def test_plot_names_runs_shades_unserved_and_puts_replicas_on_a_second_axis(tmp_path: Path) -> None:
    png = tmp_path / "zoom.png"
    drawn = plot_result(campaign_result(), png, PlotWindow(BURST - 1800, BURST + 1800), unit="requests/min")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    labels = set(drawn["labels"])
    assert {
        "demand",
        "ready capacity, prescaled",
        "ready capacity, reactive",
        "ready capacity, oracle",
        "replicas, prescaled",
        "replicas, reactive",
        "replicas, oracle",
    } <= labels
    assert not any("scenario" in label for label in labels)
    # The reactive HPA is late for the burst: its unserved demand is shaded; prescaled is ready in time.
    assert "unserved demand, reactive" in labels and "unserved demand, prescaled" not in labels
    assert drawn["twin_axes"] and drawn["axes"] == ["load [requests/min]", "replicas [pods]", "time [UTC]"]
    assert drawn["range"][0] >= BURST - 1800 and drawn["range"][1] < BURST + 1800


def test_replay_without_traffic_plots_replicas_only(tmp_path: Path) -> None:
    drawn = plot_result(run_scenario(load_scenario(REPLAY)), tmp_path / "r.png")
    assert not drawn["twin_axes"] and drawn["labels"] == ["replicas, hpa"]


def test_cli_zooms_with_from_and_duration_and_names_runs(tmp_path: Path) -> None:
    png = tmp_path / "out.png"
    code, out, err = simulate(
        "--scenario", str(CAMPAIGN), "--plot", str(png), "--from", "9h30m", "--duration", "1h", "--unit", "requests/min"
    )
    assert code == 0, err
    assert png.exists()
    rows = {line.split()[0] for line in out.splitlines()[1:] if line.strip() and not line.startswith("note")}
    assert rows == {"prescaled", "reactive", "oracle"}
    # --for is the same flag under its other name.
    code, _, err = simulate(
        "--scenario", str(CAMPAIGN), "--plot", str(png), "--from", "1995-07-03T09:30:00Z", "--for", "1h"
    )
    assert code == 0, err


def test_cli_rejects_a_window_outside_the_run_and_zoom_without_plot(tmp_path: Path) -> None:
    code, _, err = simulate(
        "--scenario", str(REPLAY), "--plot", str(tmp_path / "x.png"), "--from", "1000000000", "--duration", "1h"
    )
    assert code == 2 and "holds no tick" in err and "Traceback" not in err
    code, _, err = simulate("--scenario", str(REPLAY), "--from", "1h")
    assert code == 2 and "--plot" in err
    code, _, err = simulate("--scenario", str(REPLAY), "--plot", str(tmp_path / "x.png"), "--duration", "soon")
    assert code == 2 and "--duration" in err
