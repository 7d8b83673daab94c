"""Traffic traces: `timestamp,value` CSV files put onto the controller's tick grid.

A trace point `(T, v)` is read as the demand during `[T, T + step)` (traces are per-bin counts or
averages). `step` interpolation holds that value over the bin — it never invents traffic between bins
and keeps bin totals; `linear` joins bin starts with straight lines. Demand outside the trace is 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from adapter.errors import ValidationError
from adapter.tscsv import CsvSeriesError, read_timestamp_value_csv

INTERPOLATIONS = ("step", "linear")
MAX_TRACE_ROWS = 5_000_000


@dataclass(frozen=True)
class Trace:
    timestamps: np.ndarray  # float seconds, strictly increasing
    values: np.ndarray
    step: float  # the trace's own sampling step (median spacing)

    @property
    def start(self) -> float:
        return float(self.timestamps[0])

    @property
    def end(self) -> float:
        """End of the last bin."""
        return float(self.timestamps[-1] + self.step)

    def at(self, times: np.ndarray, interpolation: str = "step") -> np.ndarray:
        """Demand at each time; 0 outside [start, end)."""
        times = np.asarray(times, dtype=float)
        if interpolation == "linear":
            out = np.interp(times, self.timestamps, self.values)
        else:
            idx = np.searchsorted(self.timestamps, times, side="right") - 1
            out = self.values[np.clip(idx, 0, len(self.values) - 1)]
        return np.where((times >= self.start) & (times < self.end), out, 0.0)

    def history_until(self, now: float) -> tuple[np.ndarray, np.ndarray]:
        """Points whose bin has completed by `now` (what a monitoring system would have recorded)."""
        count = int(np.searchsorted(self.timestamps + self.step, now, side="right"))
        return self.timestamps[:count], self.values[:count]


def trace_from_arrays(timestamps: np.ndarray, values: np.ndarray, where: str = "traffic") -> Trace:
    timestamps = np.asarray(timestamps, dtype=float)
    values = np.asarray(values, dtype=float)
    if len(timestamps) < 2:
        raise ValidationError(where, "a trace needs at least 2 points")
    if not np.all(np.isfinite(values)) or not np.all(np.isfinite(timestamps)):
        raise ValidationError(where, "trace values and timestamps must be finite numbers")
    if np.any(values < 0):
        raise ValidationError(where, "trace values must not be negative (demand)")
    spacing = np.diff(timestamps)
    if np.any(spacing <= 0):
        row = int(np.argmax(spacing <= 0)) + 2
        raise ValidationError(where, f"timestamps must be strictly increasing (row {row})")
    return Trace(timestamps, values, float(np.median(spacing)))


def load_trace(path: Path, where: str = "traffic.file") -> Trace:
    """Read a `timestamp,value` CSV (adapter.tscsv); errors say which file and line."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ValidationError(where, f"cannot read {path}: {reason}") from None
    try:
        series = read_timestamp_value_csv(text, max_rows=MAX_TRACE_ROWS)
    except CsvSeriesError as exc:
        raise ValidationError(where, f"{path}: {exc}") from None
    if series.header is None or series.header[:2] != ("timestamp", "value"):
        raise ValidationError(where, f"{path}: expected the header 'timestamp,value'")
    return trace_from_arrays(series.timestamps, series.values, f"{where} ({path})")
