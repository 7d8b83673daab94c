"""Forecast accuracy and speed benchmark (run by `make bench`, not by the tests).

    python bench/forecast.py [TRACES_DIR]        (or env PRESCALER_TRACES; default shared traces)
    env BENCH_FORECAST_ORIGINS=96, BENCH_FORECAST_SKIP_SPEED=1, BENCH_FORECAST_SKIP_STATSMODELS=1

For every trace: 96 rolling origins over the last week; horizons of 5, 15 and 30 minutes (in
steps, at least 1). Each origin sees a history window of the same length ending at it. Scored at
exactly h steps ahead: MAE and MASE (scale: in-sample MAE of daily seasonal naive) for last value,
seasonal naive daily and weekly, our holtWinters, harmonic and auto, and statsmodels' damped
additive Holt-Winters (bench-only dependency; skipped with a message when not importable).
Then the goals at 15 minutes, and the speed of fit+predict of 14-day 1-minute series.
"""

from __future__ import annotations

import math
import os
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapter.forecast import fit_predict, fit_predict_many
from adapter.forecast.evaluate import mase_scale, pick_origins, window_batch
from adapter.forecast.io import read_series
from adapter.forecast.prep import DAY, WEEK, season_steps

DEFAULT_TRACES = str(Path(__file__).resolve().parents[2] / "shared" / "data" / "traces")  # ../shared beside the repo
HORIZON_MINUTES = (5, 15, 30)
GOAL_MINUTES = 15
OURS = (
    ("lastValue", "lastValue", None),
    ("snDaily", "seasonalNaive", DAY),
    ("snWeekly", "seasonalNaive", WEEK),
    ("holtWinters", "holtWinters", None),
    ("harmonic", "harmonic", None),
    ("auto", "auto", None),
)  # first three: computed raw
NAIVE = ("lastValue", "snDaily", "snWeekly")
SM_HISTORY_DAYS = 8
SM_MAX_POINTS = 8640  # 6 days at 1 minute: statsmodels takes seconds per fit beyond that


def main(argv: list[str]) -> int:
    traces_dir = Path(argv[1] if len(argv) > 1 else os.environ.get("PRESCALER_TRACES", DEFAULT_TRACES))
    files = sorted(traces_dir.glob("*.csv"))
    if not files:
        print(f"no *.csv traces in {traces_dir}", file=sys.stderr)
        return 2
    n_origins = int(os.environ.get("BENCH_FORECAST_ORIGINS", "96"))
    use_sm = _statsmodels_available() and not os.environ.get("BENCH_FORECAST_SKIP_STATSMODELS")
    goal_rows = []
    for path in files:
        goal_rows.append(bench_trace(path, n_origins, use_sm))
    print_goals(goal_rows, use_sm)
    if not os.environ.get("BENCH_FORECAST_SKIP_SPEED"):
        bench_speed(files)
    return 0


def _statsmodels_available() -> bool:
    try:
        import statsmodels
    except ImportError:
        print(
            "statsmodels not importable: skipping the statsmodels Holt-Winters column "
            "(pip install statsmodels into the venv to include it)"
        )
        return False
    print(f"statsmodels {statsmodels.__version__} (bench-only dependency) for the Holt-Winters column")
    return True


def bench_trace(path: Path, n_origins: int, use_sm: bool) -> dict:
    _, values, step = read_series(path)
    horizons = sorted({max(1, math.ceil(mins * 60 / step - 1e-9)) for mins in HORIZON_MINUTES})
    goal_h = max(1, math.ceil(GOAL_MINUTES * 60 / step - 1e-9))
    print(
        f"\n== {path.name}: {len(values)} points, step {step:g}s, horizons {horizons} step(s), "
        f"{n_origins} origins over the last week"
    )
    origins = pick_origins(len(values), step, max(horizons), count=n_origins, min_history=len(values) // 3)
    batch = window_batch(values, origins, step)
    print(f"   history window per origin: {batch.shape[1] * step / DAY:.1f} days")
    scale = mase_scale(values, step, int(origins[0]) + 1)
    sm_fc = statsmodels_forecasts(values, origins, step, max(horizons)) if use_sm else None
    header = ["h(steps)"] + [name for name, _, _ in OURS] + (["statsmodelsHW"] if use_sm else [])
    print("   MAE   " + " ".join(f"{h:>12}" for h in header))
    per_h: dict[int, tuple[dict[str, float], float]] = {}
    for h in horizons:
        actual = values[origins + h]
        maes: dict[str, float] = {}
        chosen: dict[str, int] = {}
        cover = float("nan")
        # The baselines are their textbook definitions on the raw trace (no gap filling or
        # despiking as our models do), so the ratios compare against the real thing.
        maes["lastValue"] = float(np.nanmean(np.abs(actual - values[origins])))
        for name, period in (("snDaily", DAY), ("snWeekly", WEEK)):
            m = season_steps(period, step)
            if batch.shape[1] >= 2 * m:  # as much history as our seasonal models require
                maes[name] = float(np.nanmean(np.abs(actual - values[origins + h - m])))
        for name, model, season in OURS:
            if name in NAIVE:
                continue
            res = fit_predict_many(batch, step, h, model=model, season=season)
            point = np.array([r.forecast[-1] for r in res])
            maes[name] = float(np.nanmean(np.abs(actual - point)))
            if name == "auto":
                upper = np.array([r.upper[-1] for r in res])
                cover = float(np.mean(actual[np.isfinite(actual)] <= upper[np.isfinite(actual)]))
                for r in res:
                    chosen[r.model] = chosen.get(r.model, 0) + 1
        if sm_fc is not None:
            maes["statsmodelsHW"] = float(np.nanmean(np.abs(actual - sm_fc[:, h - 1])))
        cells = [f"{h:>12}"] + [f"{maes[n]:>12.4g}" if n in maes else f"{'n/a':>12}" for n in header[1:]]
        print("   MAE   " + " ".join(cells))
        print(
            "   MASE  "
            + " ".join(
                [f"{'':>12}"] + [f"{maes[n] / scale:>12.3f}" if n in maes else f"{'n/a':>12}" for n in header[1:]]
            )
        )
        best_naive = min(maes[n] for n in NAIVE if n in maes)
        print(
            f"   auto/best-naive {maes['auto'] / best_naive:.3f}   upper(90%) coverage {cover:.3f}"
            f"   auto used {dict(sorted(chosen.items()))}"
        )
        per_h[h] = (maes, cover)
    maes, cover = per_h[goal_h]
    best_naive = min(maes[n] for n in NAIVE if n in maes)
    return {
        "trace": path.name,
        "ratio": maes["auto"] / best_naive,
        "coverage": cover,
        "auto": maes["auto"],
        "sm": maes.get("statsmodelsHW"),
        "best_naive": best_naive,
    }


def statsmodels_forecasts(values: np.ndarray, origins: np.ndarray, step: float, horizon: int) -> np.ndarray:
    """Damped additive Holt-Winters (daily season) from statsmodels, fitted at every origin."""
    m = season_steps(DAY, step)
    length = int(min(origins[0] + 1, SM_MAX_POINTS, max(SM_HISTORY_DAYS * DAY / step, 4 * m)))
    jobs = [(values[o + 1 - length : o + 1], m, horizon) for o in origins]
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=2) as pool:
        out = np.array(list(pool.map(_sm_fit, jobs)))
    print(f"   statsmodels HW: {len(jobs)} fits on {length} points (season {m}) in {time.perf_counter() - start:.1f}s")
    return out


def _sm_fit(job: tuple[np.ndarray, int, int]) -> np.ndarray:
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    history, m, horizon = job
    history = np.where(np.isfinite(history), history, np.nanmean(history))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = ExponentialSmoothing(
            history,
            trend="add",
            damped_trend=True,
            seasonal="add",
            seasonal_periods=m,
            initialization_method="estimated",
        ).fit()
        return np.asarray(fit.forecast(horizon))


def print_goals(rows: list[dict], use_sm: bool) -> None:
    print(f"\n== goals at {GOAL_MINUTES} minutes")
    print(
        f"   {'trace':<45} {'auto MAE':>10} {'best naive':>10} {'ratio':>7} {'<=1.05':>7} "
        f"{'cover90':>8} {'>=0.88':>7}" + (f" {'sm HW':>10} {'auto<=sm':>9}" if use_sm else "")
    )
    for r in rows:
        line = (
            f"   {r['trace']:<45} {r['auto']:>10.4g} {r['best_naive']:>10.4g} {r['ratio']:>7.3f} "
            f"{_ok(r['ratio'] <= 1.05):>7} {r['coverage']:>8.3f} {_ok(r['coverage'] >= 0.88):>7}"
        )
        if use_sm and r["sm"] is not None:
            line += f" {r['sm']:>10.4g} {_ok(r['auto'] <= r['sm']):>9}"
        print(line)
    geo = math.exp(np.mean([math.log(r["ratio"]) for r in rows]))
    print(f"   geometric mean of auto/best-naive MAE ratio: {geo:.3f} (goal <= 0.85: {_ok(geo <= 0.85)})")
    pooled = np.mean([r["coverage"] for r in rows])
    print(f"   mean upper-bound coverage: {pooled:.3f} (goal >= 0.88: {_ok(pooled >= 0.88)})")


def _ok(flag: bool) -> str:
    return "yes" if flag else "NO"


def bench_speed(files: list[Path]) -> None:
    print("\n== speed: auto, 14-day 1-minute series, horizon 15 steps")
    one_min = [f for f in files if read_series(f)[2] == 60.0]
    if one_min:
        values = read_series(one_min[0])[1]
    else:  # synthetic daily pattern with noise
        t = np.arange(40000)
        values = 100 + 50 * np.sin(2 * np.pi * t / 1440) + np.random.default_rng(0).normal(0, 5, t.size)
    n = 14 * 1440
    series = values[:n].astype(float)
    fit_predict(series, 60.0, 15)  # warm-up (imports, caches)
    times = []
    for _ in range(7):
        start = time.perf_counter()
        fit_predict(series, 60.0, 15)
        times.append(time.perf_counter() - start)
    print(f"   one series: median {np.median(times) * 1000:.1f} ms, min {min(times) * 1000:.1f} ms (goal < 50 ms)")
    rng = np.random.default_rng(1)
    offsets = rng.integers(0, max(1, len(values) - n), size=1000)
    batch = np.stack([values[o : o + n] for o in offsets]) * rng.uniform(0.5, 2.0, size=(1000, 1))
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=2) as pool:
        list(pool.map(_many, np.array_split(batch, 2)))
    elapsed = time.perf_counter() - start
    print(f"   1000 series, 2 worker processes: {elapsed:.2f} s (goal < 10 s)")
    start = time.perf_counter()
    fit_predict_many(batch[:250], 60.0, 15)
    print(f"   250 series in one process (fit_predict_many): {time.perf_counter() - start:.2f} s")


def _many(chunk: np.ndarray) -> int:
    return len(fit_predict_many(chunk, 60.0, 15))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
