"""The one reader for `timestamp,value` CSV text (forecast history files, the forecast source's
history endpoint, simulator traffic traces).

Rules: blank lines and lines starting with `#` are skipped; the first remaining line is a header when
its first cell is neither a number nor a date (`timestamp,value`); columns after the second are
ignored. Timestamps are Unix seconds or ISO 8601 (`2024-01-01T00:00:00Z`, no offset = UTC). An empty
value, `nan`, `null`, `none` or `na` is a gap (NaN); infinite numbers are refused.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

_GAPS = ("nan", "null", "none", "na")


class CsvSeriesError(ValueError):
    """Text that is not a `timestamp,value` series; the message names the line."""


@dataclass(frozen=True)
class CsvSeries:
    header: tuple[str, ...] | None  # the header cells, stripped, when there was a header line
    timestamps: np.ndarray  # float64 Unix seconds, in file order
    values: np.ndarray  # float64, NaN for gaps


def read_timestamp_value_csv(text: str, max_rows: int | None = None) -> CsvSeries:
    """Parse `text`; raises CsvSeriesError naming the line for the first bad row."""
    stamps: list[float] = []
    values: list[float] = []
    header: tuple[str, ...] | None = None
    first_row = True
    for line_no, row in enumerate(csv.reader(text.splitlines()), start=1):
        if not row or all(not cell.strip() for cell in row) or row[0].lstrip().startswith("#"):
            continue
        if len(row) < 2:
            raise CsvSeriesError(f"line {line_no}: expected 2 columns timestamp,value, got {row[:3]!r}")
        first, second = row[0].strip(), row[1].strip()
        if first_row:
            first_row = False
            if not _looks_like_timestamp(first):
                header = tuple(cell.strip() for cell in row)
                continue
        if max_rows is not None and len(stamps) >= max_rows:
            raise CsvSeriesError(f"more than {max_rows} rows")
        stamps.append(_timestamp(first, line_no))
        values.append(_value(second, line_no))
    if not stamps:
        raise CsvSeriesError("no data rows (expected CSV with header timestamp,value)")
    return CsvSeries(header, np.asarray(stamps, dtype=float), np.asarray(values, dtype=float))


def _looks_like_timestamp(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        pass
    try:
        parse_iso(text)
        return True
    except ValueError:
        return False


def _timestamp(text: str, line_no: int) -> float:
    try:
        value = float(text)
    except ValueError:
        try:
            return parse_iso(text)
        except ValueError:
            raise CsvSeriesError(
                f"line {line_no}: timestamp {text[:60]!r} is neither Unix seconds nor an ISO 8601 date-time"
            ) from None
    if not math.isfinite(value):
        raise CsvSeriesError(f"line {line_no}: timestamp {text[:60]!r} is not finite")
    return value


def parse_iso(text: str) -> float:
    stamp = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


def _value(text: str, line_no: int) -> float:
    if text == "" or text.lower() in _GAPS:
        return math.nan  # an explicit gap
    try:
        value = float(text)
    except ValueError:
        raise CsvSeriesError(f"line {line_no}: value {text[:60]!r} is not a number") from None
    if math.isinf(value):
        raise CsvSeriesError(f"line {line_no}: value {text[:60]!r} is not finite")
    return value
