"""`prescaler backtest --regressor NAME=FILE.csv`: the fitted effect per unit and the fused scores."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from adapter.forecast.cli import add_parsers

STEP = 300


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="prescaler")
    add_parsers(parser.add_subparsers())
    args = parser.parse_args(argv)
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


def write_series(path: Path, times: np.ndarray, values: np.ndarray) -> str:
    path.write_text("timestamp,value\n" + "\n".join(f"{t},{v:.4f}" for t, v in zip(times, values)))
    return str(path)


def test_backtest_shows_the_coefficient_and_the_fused_model_wins(tmp_path, capsys):
    rng = np.random.default_rng(4)
    n = 288 * 9
    times = 1_700_000_100 + STEP * np.arange(n)
    announced = np.zeros(n)
    for s in rng.choice(n - 12, 60, replace=False):
        announced[s : s + 6] = rng.integers(1, 10)
    load = 100 + 40 * np.sin(2 * np.pi * np.arange(n) / 288) + rng.normal(0, 3, n) + 5.0 * announced
    trace = write_series(tmp_path / "load.csv", times, load)
    events = write_series(tmp_path / "audience.csv", times, announced)
    code, out, err = run(
        ["backtest", "--history", trace, "--horizon", "15m", "--origins", "24", "--regressor", f"audience={events}"],
        capsys,
    )
    assert code == 0, err
    lines = out.splitlines()
    fused = next(line for line in lines if line.startswith("auto+regressors,"))
    plain = next(line for line in lines if line.startswith("auto,"))
    assert float(fused.split(",")[2]) < float(plain.split(",")[2])  # MAE
    row = lines[lines.index("regressor,coefficient,stderr,samples") + 1].split(",")
    assert row[0] == "audience" and abs(float(row[1]) - 5.0) < 0.5 and 0 < float(row[2]) < 0.5


def test_bad_regressor_argument_is_one_clear_line(tmp_path, capsys):
    times = 1_700_000_100 + STEP * np.arange(600)
    trace = write_series(tmp_path / "load.csv", times, np.ones(600))
    code, _, err = run(["backtest", "--history", trace, "--horizon", "15m", "--regressor", "nofile"], capsys)
    assert code == 2 and "--regressor 'nofile': expected NAME=FILE.csv" in err
