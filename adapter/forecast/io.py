"""Read a `timestamp,value` CSV into an equally spaced series (missing grid points become NaN).

Timestamps may be Unix seconds (integer or float) or ISO 8601 (`2024-01-01T00:00:00Z`). The step
is the most common difference between consecutive timestamps; points that fall off that grid are
rejected rather than silently moved, because a wrong step would make every season wrong.
"""

from __future__ import annotations

import csv
import math
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

MAX_GRID_POINTS = 10_000_000


class SeriesError(ValueError):
    """The file cannot be read as a `timestamp,value` series; the message says why and where."""


def read_series(path: str | Path) -> tuple[np.ndarray, np.ndarray, float]:
    """Return (timestamps in Unix seconds, values with NaN for gaps, step in seconds)."""
    stamps, values = _read_rows(Path(path))
    if len(stamps) < 2:
        raise SeriesError(f"{path}: need at least 2 data rows to know the step, got {len(stamps)}")
    ts = np.asarray(stamps, dtype=float)
    vs = np.asarray(values, dtype=float)
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
        raise SeriesError(f"{path}: timestamp at line {row} is not on the {step:g}s grid of the "
                          "other rows (series must be equally spaced, gaps allowed)")
    length = int(grid_pos[-1]) + 1
    if length > MAX_GRID_POINTS:
        raise SeriesError(f"{path}: {length} grid points at step {step:g}s is too many")
    full = np.full(length, np.nan)
    full[grid_pos.astype(int)] = vs
    timestamps = ts[0] + step * np.arange(length)
    return timestamps, full, step


def _read_rows(path: Path) -> tuple[list[float], list[float]]:
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
    reader = csv.reader(text.splitlines())
    stamps: list[float] = []
    values: list[float] = []
    header_seen = False
    for line_no, row in enumerate(reader, start=1):
        if not row or all(not cell.strip() for cell in row) or row[0].lstrip().startswith("#"):
            continue
        if len(row) < 2:
            raise SeriesError(f"{path}: line {line_no}: expected 2 columns timestamp,value, got {row!r}")
        first, second = row[0].strip(), row[1].strip()
        if not header_seen:
            header_seen = True
            if not _looks_numeric_or_date(first):
                continue  # a header such as timestamp,value
        stamps.append(_parse_timestamp(first, path, line_no))
        values.append(_parse_value(second, path, line_no))
    if not stamps:
        raise SeriesError(f"{path}: no data rows (expected CSV with header timestamp,value)")
    return stamps, values


def _looks_numeric_or_date(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        pass
    try:
        _parse_iso(text)
        return True
    except ValueError:
        return False


def _parse_timestamp(text: str, path: Path, line_no: int) -> float:
    try:
        value = float(text)
    except ValueError:
        try:
            return _parse_iso(text)
        except ValueError:
            raise SeriesError(f"{path}: line {line_no}: timestamp {text!r} is neither Unix seconds "
                              "nor an ISO 8601 date-time") from None
    if not math.isfinite(value):
        raise SeriesError(f"{path}: line {line_no}: timestamp {text!r} is not finite")
    return value


def _parse_iso(text: str) -> float:
    stamp = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


def _parse_value(text: str, path: Path, line_no: int) -> float:
    if text == "" or text.lower() in ("nan", "null", "none", "na"):
        return math.nan  # an explicit gap
    try:
        value = float(text)
    except ValueError:
        raise SeriesError(f"{path}: line {line_no}: value {text!r} is not a number") from None
    if math.isinf(value):
        raise SeriesError(f"{path}: line {line_no}: value {text!r} is not finite")
    return value
