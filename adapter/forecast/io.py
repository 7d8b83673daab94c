"""Read a `timestamp,value` CSV into an equally spaced series (missing grid points become NaN).

The rows are read by adapter.tscsv (Unix seconds or ISO 8601 timestamps, gaps as NaN). The step
is the most common difference between consecutive timestamps; points that fall off that grid are
rejected rather than silently moved, because a wrong step would make every season wrong.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from adapter.tscsv import CsvSeriesError, read_timestamp_value_csv

MAX_GRID_POINTS = 10_000_000


class SeriesError(ValueError):
    """The file cannot be read as a `timestamp,value` series; the message says why and where."""


def read_series(path: str | Path) -> tuple[np.ndarray, np.ndarray, float]:
    """Return (timestamps in Unix seconds, values with NaN for gaps, step in seconds)."""
    ts, vs = _read_rows(Path(path))
    if len(ts) < 2:
        raise SeriesError(f"{path}: need at least 2 data rows to know the step, got {len(ts)}")
    diffs = np.diff(ts)
    bad = np.flatnonzero(diffs <= 0)
    if len(bad):
        row = int(bad[0]) + 3  # +1 for the header, +1 for 1-based lines, +1 for the later row
        kind = "duplicate" if diffs[bad[0]] == 0 else "decreasing"
        raise SeriesError(f"{path}: timestamps must be strictly increasing ({kind} timestamp at line {row})")
    uniq, counts = np.unique(np.round(diffs, 6), return_counts=True)
    step = float(uniq[np.argmax(counts)])
    offsets = (ts - ts[0]) / step
    grid_pos = np.round(offsets)
    off_grid = np.abs(offsets - grid_pos) > 1e-3
    if np.any(off_grid):
        row = int(np.argmax(off_grid)) + 2
        raise SeriesError(
            f"{path}: timestamp at line {row} is not on the {step:g}s grid of the "
            "other rows (series must be equally spaced, gaps allowed)"
        )
    length = int(grid_pos[-1]) + 1
    if length > MAX_GRID_POINTS:
        raise SeriesError(f"{path}: {length} grid points at step {step:g}s is too many")
    full = np.full(length, np.nan)
    full[grid_pos.astype(int)] = vs
    timestamps = ts[0] + step * np.arange(length)
    return timestamps, full, step


def _read_rows(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise SeriesError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise SeriesError(f"{path}: is a directory, expected a CSV file") from None
    except UnicodeDecodeError:
        raise SeriesError(f"{path}: not a text CSV file (cannot decode as UTF-8)") from None
    except OSError as exc:
        raise SeriesError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        series = read_timestamp_value_csv(text)
    except CsvSeriesError as exc:
        raise SeriesError(f"{path}: {exc}") from None
    return series.timestamps, series.values
