"""`prescaler forecast` / `prescaler backtest` (via add_parsers) and the CSV reader."""

from __future__ import annotations

import argparse
import csv
import io
import shutil
from pathlib import Path

import numpy as np
import pytest

from adapter.forecast.cli import add_parsers
from adapter.forecast.io import SeriesError, read_series
from tests.shared_data import shared_path

ELB_TRACE = "data/traces/nab_aws_elb_request_count_8c0756_5min.csv"


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="prescaler")
    add_parsers(parser.add_subparsers())
    args = parser.parse_args(argv)
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def trace_copy(tmp_path: Path) -> Path:
    """The shared ELB trace (5-minute, 14 days)."""
    target = tmp_path / "elb.csv"
    shutil.copy(shared_path(ELB_TRACE), target)
    return target


def test_forecast_prints_csv_for_the_steps_after_the_history(tmp_path, capsys):
    path = trace_copy(tmp_path)
    stamps, _, step = read_series(path)
    code, out, err = run(["forecast", "--history", str(path), "--horizon", "15m"], capsys)
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert list(rows[0].keys()) == ["timestamp", "forecast", "lower", "upper"]
    assert [int(r["timestamp"]) for r in rows] == [int(stamps[-1] + step * k) for k in (1, 2, 3)]
    for r in rows:
        assert float(r["lower"]) <= float(r["forecast"]) <= float(r["upper"])
    assert "model=" in err


def test_forecast_with_model_season_quantile_and_short_horizon(tmp_path, capsys):
    t = 1_700_000_000 + 3600 * np.arange(24 * 15)
    v = 10 + 5 * np.sin(2 * np.pi * np.arange(len(t)) / 24)
    path = write(tmp_path / "h.csv", "timestamp,value\n" + "".join(f"{a},{b}\n" for a, b in zip(t, v)))
    code, out, _ = run(
        [
            "forecast",
            "--history",
            str(path),
            "--horizon",
            "30m",
            "--model",
            "seasonalNaive",
            "--season",
            "24h",
            "--quantile",
            "0.95",
        ],
        capsys,
    )
    assert code == 0
    rows = out.strip().splitlines()[1:]
    assert len(rows) == 1  # 30 minutes at a 1-hour step is the next point
    ts, fc, _, _ = rows[0].split(",")
    assert int(ts) == t[-1] + 3600
    assert float(fc) == pytest.approx(10 + 5 * np.sin(2 * np.pi * len(t) / 24), abs=1e-4)


def test_backtest_prints_mase_mae_coverage_next_to_seasonal_naive(tmp_path, capsys):
    path = trace_copy(tmp_path)
    code, out, _ = run(["backtest", "--trace", str(path), "--horizon", "15m", "--origins", "20"], capsys)
    assert code == 0
    lines = [ln for ln in out.splitlines() if not ln.startswith("#")]
    assert lines[0] == "model,mase,mae,coverage_upper,coverage_interval,used"
    models = [ln.split(",")[0] for ln in lines[1:]]
    assert models[:2] == ["auto", "seasonalNaive"]
    for ln in lines[1:]:
        _, mase, mae, cov, within, _ = ln.split(",")
        assert float(mase) > 0 and float(mae) > 0
        assert 0 <= float(within) <= float(cov) <= 1


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no such file"),
        ("this is not a csv\n", "expected 2 columns"),
        ("timestamp,value\n1,2\n2,abc\n", "not a number"),
        ("timestamp,value\n10,1\n5,2\n", "strictly increasing"),
        ("timestamp,value\n10,1\n", "at least 2 data rows"),
        ("timestamp,value\n", "no data rows"),
        ("timestamp,value\n0,1\n60,2\n120,3\n150,4\n240,5\n", "not on the 60s grid"),
        (b"\x89PNG\r\n\x1a\n\x00\xff", "not a text CSV"),
    ],
)
def test_bad_history_exits_2_with_a_clear_message(tmp_path, capsys, content, message):
    path = tmp_path / "bad.csv"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    for argv in (
        ["forecast", "--history", str(path), "--horizon", "5m"],
        ["backtest", "--trace", str(path), "--horizon", "5m"],
    ):
        code, out, err = run(argv, capsys)
        assert code == 2
        assert message in err
        assert "Traceback" not in err and out == ""


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--horizon", "soon"], "--horizon"),
        (["--horizon", "0s"], "must be positive"),
        (["--horizon", "5m", "--model", "magic"], "unknown model"),
        (["--horizon", "5m", "--quantile", "2"], "--quantile"),
        (["--horizon", "5m", "--season", "1x"], "--season"),
    ],
)
def test_bad_flags_exit_2(tmp_path, capsys, extra, message):
    path = write(tmp_path / "ok.csv", "timestamp,value\n0,1\n60,2\n120,3\n")
    code, _, err = run(["forecast", "--history", str(path)] + extra, capsys)
    assert code == 2 and message in err


def test_backtest_on_too_short_trace_exits_2(tmp_path, capsys):
    path = write(tmp_path / "short.csv", "timestamp,value\n0,1\n60,2\n120,3\n")
    code, _, err = run(["backtest", "--trace", str(path), "--horizon", "15m"], capsys)
    assert code == 2 and "too short" in err


def test_read_series_fills_missing_grid_points_with_nan(tmp_path):
    path = write(tmp_path / "gaps.csv", "timestamp,value\n0,1\n60,2\n240,5\n300,\n360,7\n")
    stamps, values, step = read_series(path)
    assert step == 60
    np.testing.assert_array_equal(stamps, [0, 60, 120, 180, 240, 300, 360])
    np.testing.assert_array_equal(np.isnan(values), [False, False, True, True, False, True, False])
    assert values[-1] == 7


def test_read_series_accepts_iso_timestamps_and_no_header(tmp_path):
    path = write(tmp_path / "iso.csv", "2024-01-01T00:00:00Z,1\n2024-01-01T00:05:00Z,2\n2024-01-01T00:10:00Z,3\n")
    stamps, values, step = read_series(path)
    assert step == 300 and stamps[0] == 1704067200
    np.testing.assert_array_equal(values, [1, 2, 3])


def test_read_series_rejects_duplicates(tmp_path):
    path = write(tmp_path / "dup.csv", "timestamp,value\n0,1\n60,2\n60,3\n")
    with pytest.raises(SeriesError, match="duplicate"):
        read_series(path)


def test_forecast_unserved_cost_chooses_and_reports_the_quantile(tmp_path, capsys):
    path = trace_copy(tmp_path)
    code, out, err = run(["forecast", "--history", str(path), "--horizon", "15m", "--unserved-cost", "1000"], capsys)
    assert code == 0 and "quantile=0.98" in err and "by backtest cost (unservedCost 1000)" in err
    dear = [float(r["upper"]) for r in csv.DictReader(io.StringIO(out))]
    code, out, err = run(["forecast", "--history", str(path), "--horizon", "15m", "--unserved-cost", "0.1"], capsys)
    cheap = [float(r["upper"]) for r in csv.DictReader(io.StringIO(out))]
    assert code == 0 and "quantile=0.7" in err
    assert all(d >= c for d, c in zip(dear, cheap)) and dear != cheap
    code, _, err = run(["forecast", "--history", str(path), "--horizon", "15m"], capsys)
    assert code == 0 and "quantile=0.9 " in err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--unserved-cost", "lots"], "--unserved-cost 'lots' is not a number"),
        (["--unserved-cost", "0"], "--unserved-cost: unserved_cost must be between 0.01 and 10000"),
        (["--unserved-cost", "nan"], "unserved_cost must be between"),
        (["--unserved-cost", "-4"], "unserved_cost must be between"),
        (["--unserved-cost", "10", "--quantile", "0.9"], "either --quantile or --unserved-cost"),
    ],
)
def test_bad_unserved_cost_flag_exits_2(tmp_path, capsys, extra, message):
    path = write(tmp_path / "ok.csv", "timestamp,value\n0,1\n60,2\n120,3\n")
    code, out, err = run(["forecast", "--history", str(path), "--horizon", "5m"] + extra, capsys)
    assert code == 2 and message in err and out == "" and "Traceback" not in err
