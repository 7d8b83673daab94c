"""`prescaler forecast` and `prescaler backtest` subcommands.

adapter/cli.py calls add_parsers(subparsers); each subcommand's func(args) returns the exit code.
Bad input gives one clear line on stderr and exit code 2 (never a traceback).
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

import numpy as np

from ..durations import DurationError, parse_duration
from . import MODELS, fit_predict
from .evaluate import pick_origins, score, score_fused
from .io import SeriesError, read_series
from .prep import validate_unserved_cost

EXIT_BAD_INPUT = 2


def add_parsers(subparsers: Any) -> None:
    fc = subparsers.add_parser(
        "forecast",
        help="forecast a timestamp,value CSV",
        description="Read a timestamp,value CSV history and print timestamp,forecast,lower,upper "
        "for the steps after its last timestamp, at the history's step.",
    )
    fc.add_argument("--history", required=True, metavar="FILE.csv", help="timestamp,value CSV")
    fc.add_argument("--horizon", required=True, metavar="DURATION", help="how far ahead to forecast, e.g. 15m")
    fc.add_argument("--model", default="auto", help=f"one of {', '.join(MODELS)}")
    fc.add_argument(
        "--season",
        default=None,
        metavar="DURATION",
        help="season length, e.g. 24h or 168h (default: detected from the history)",
    )
    fc.add_argument(
        "--quantile", default=None, metavar="Q", help="upper bound quantile in (0.5, 1), default 0.9; lower is 1-Q"
    )
    fc.add_argument(
        "--unserved-cost",
        default=None,
        metavar="C",
        help="instead of --quantile: choose the quantile by backtest, one unit of demand above upper "
        "costing C units of capacity above demand (the forecast source's unservedCost)",
    )
    fc.set_defaults(func=run_forecast)

    bt = subparsers.add_parser(
        "backtest",
        help="rolling-origin backtest of a model on a timestamp,value CSV",
        description="Rolling origins over the last week of the trace; prints MASE, MAE and "
        "interval coverage of the model next to seasonal naive.",
    )
    bt.add_argument("--history", metavar="FILE.csv", help="timestamp,value CSV (required)")
    # The flag was called --trace before it took the name forecast uses; kept for existing scripts.
    bt.add_argument("--trace", dest="history", help=argparse.SUPPRESS)
    bt.add_argument("--horizon", required=True, metavar="DURATION", help="how far ahead to forecast, e.g. 15m")
    bt.add_argument("--model", default="auto", help=f"one of {', '.join(MODELS)}")
    bt.add_argument(
        "--season",
        default=None,
        metavar="DURATION",
        help="season length, e.g. 24h or 168h (default: detected from the history)",
    )
    bt.add_argument("--quantile", default="0.9", metavar="Q", help="upper bound quantile in (0.5, 1); lower is 1-Q")
    bt.add_argument("--origins", default="48", metavar="N", help="number of rolling origins (>= 1)")
    bt.add_argument(
        "--regressor",
        action="append",
        default=[],
        metavar="NAME=FILE.csv",
        help="an announced series (timestamp,value CSV; 0 where nothing was announced) whose "
        "effect per unit is fitted and shown; repeatable",
    )
    bt.set_defaults(func=run_backtest)


class _BadInput(Exception):
    pass


def _common(args: argparse.Namespace, path: str) -> tuple[np.ndarray, np.ndarray, float, int, float | None, float]:
    if args.model not in MODELS:
        raise _BadInput(f"unknown model {args.model!r}: expected one of {', '.join(MODELS)}")
    try:
        timestamps, values, step = read_series(path)
    except SeriesError as exc:
        raise _BadInput(str(exc)) from None
    horizon_s = _duration(args.horizon, "--horizon")
    # A horizon shorter than the step still means the next point.
    horizon = max(1, math.ceil(horizon_s / step - 1e-9))
    season = _duration(args.season, "--season") if args.season is not None else None
    text = "0.9" if args.quantile is None else args.quantile
    try:
        quantile = float(text)
    except ValueError:
        raise _BadInput(f"--quantile {args.quantile!r} is not a number") from None
    if not 0.5 < quantile < 1:
        raise _BadInput(f"--quantile must be in (0.5, 1), got {args.quantile}")
    if not np.any(np.isfinite(values)):
        raise _BadInput(f"{path}: no numeric values")
    return timestamps, values, step, horizon, season, quantile


def _unserved_cost(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        cost = float(text)
    except ValueError:
        raise _BadInput(f"--unserved-cost {text!r} is not a number") from None
    try:
        validate_unserved_cost(cost)
    except ValueError as exc:
        raise _BadInput(f"--unserved-cost: {exc}") from None
    return cost


def _duration(text: str, flag: str) -> float:
    try:
        seconds = parse_duration(text)
    except DurationError as exc:
        raise _BadInput(f"{flag}: {exc}") from None
    if seconds <= 0:
        raise _BadInput(f"{flag} must be positive, got {text!r}")
    return seconds


def run_forecast(args: argparse.Namespace) -> int:
    try:
        timestamps, values, step, horizon, season, quantile = _common(args, args.history)
        cost = _unserved_cost(args.unserved_cost)
        if cost is not None and args.quantile is not None:
            raise _BadInput("give either --quantile or --unserved-cost, not both")
        result = fit_predict(
            values, step, horizon, model=args.model, season=season, quantile=quantile, unserved_cost=cost
        )
    except (_BadInput, ValueError) as exc:
        print(f"prescaler forecast: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    season_txt = "none" if result.season is None else f"{result.season:g}s"
    print(
        f"# model={result.model} season={season_txt} quantile={result.quantile:g}"
        + (f" note={result.note}" if result.note else ""),
        file=sys.stderr,
    )
    out = sys.stdout
    out.write("timestamp,forecast,lower,upper\n")
    future = timestamps[-1] + step * np.arange(1, horizon + 1)
    for ts, f, lo, hi in zip(future, result.forecast, result.lower, result.upper):
        out.write(f"{_fmt_ts(ts)},{f:.6g},{lo:.6g},{hi:.6g}\n")
    return 0


def run_backtest(args: argparse.Namespace) -> int:
    try:
        if not args.history:
            raise _BadInput("--history FILE.csv is required")
        timestamps, values, step, horizon, season, quantile = _common(args, args.history)
        try:
            count = int(args.origins)
        except ValueError:
            raise _BadInput(f"--origins {args.origins!r} is not an integer") from None
        if count < 1:
            raise _BadInput("--origins must be >= 1")
        origins = pick_origins(
            len(values),
            step,
            horizon,
            count=count,
            min_history=max(2, min(len(values) // 2, len(values) - horizon - 1)),
        )
        rows = [score(values, step, horizon, args.model, origins, season, quantile)]
        effects = None
        if args.regressor:
            names, events = _regressors(args.regressor, timestamps, step)
            fused, effects = score_fused(values, events, names, step, horizon, args.model, origins, season, quantile)
            rows.insert(0, fused)
        if args.model != "seasonalNaive":
            rows.append(score(values, step, horizon, "seasonalNaive", origins, season, quantile))
        if args.model != "lastValue":
            rows.append(score(values, step, horizon, "lastValue", origins, season, quantile))
    except (_BadInput, ValueError) as exc:
        print(f"prescaler backtest: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"# {args.history}: step {step:g}s, horizon {horizon} step(s), {len(origins)} origins, quantile {quantile:g}")
    print("model,mase,mae,coverage_upper,coverage_interval,used")
    for r in rows:
        used = " ".join(f"{k}:{v}" for k, v in sorted(r.chosen.items()))
        print(f"{r.model},{r.mase:.4f},{r.mae:.4g},{r.coverage:.3f},{r.within:.3f},{used}")
    base = next((r for r in rows if r.model == "seasonalNaive"), None)
    if base is not None and base is not rows[0] and base.mae > 0:
        print(f"# MAE ratio {rows[0].model}/seasonalNaive = {rows[0].mae / base.mae:.3f}")
    if effects is not None:
        print("regressor,coefficient,stderr,samples")
        for row in effects.as_dict():  # type: ignore[attr-defined]
            print(f"{row['name']},{row['coefficient']:g},{row.get('stderr', '')},{row['samples']}")
    return 0


def _regressors(specs: list[str], timestamps: np.ndarray, step: float) -> tuple[list[str], np.ndarray]:
    """NAME=FILE.csv -> names and the announced values on the trace's timestamps (0 = none)."""
    names, columns = [], []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise _BadInput(f"--regressor {spec!r}: expected NAME=FILE.csv")
        if name in names:
            raise _BadInput(f"--regressor {name}: given twice")
        try:
            stamps, values, _ = read_series(path)
        except SeriesError as exc:
            raise _BadInput(f"--regressor {name}: {exc}") from None
        idx = np.clip(np.searchsorted(stamps, timestamps), 0, len(stamps) - 1)
        prev = np.clip(idx - 1, 0, len(stamps) - 1)
        pick = np.where(np.abs(stamps[prev] - timestamps) < np.abs(stamps[idx] - timestamps), prev, idx)
        close = np.abs(stamps[pick] - timestamps) <= step / 2
        names.append(name)
        columns.append(np.where(close & np.isfinite(values[pick]), values[pick], 0.0))
    return names, np.column_stack(columns)


def _fmt_ts(ts: float) -> str:
    return str(int(ts)) if float(ts).is_integer() else f"{ts:.3f}"
