"""Regressors of the `forecast` source: announced series whose effect on load is learnt from history.

    forecast:
      history: {prometheus: {...}}
      regressors:
        - name: audience              # how status and notes call it
          value: audience             # the item value to read (default: name)
          history:                    # the announced values of the past, same forms as forecast.history:
            prometheus: {url: ..., query: 'prescaler_announced_value{virtualmetricevent="launch",value="audience"}'}
            # or api: {url: https://announcer/history.csv}
          future:                     # what is announced ahead: exactly one source config
            api: {url: https://announcer/items}   # the endpoint another VirtualMetricEvent reads
            # or schedule: {...}

I/O only (reading the series); the fit is adapter.forecast.regressors. The forecast items then carry
`forecast`/`lower`/`upper` with the events' fitted effect included, plus `baseline` (without it) and
`events` (the fitted effect), so an expression never has to guess a factor.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from adapter.errors import SourceError, ValidationError
from adapter.fields import expect_mapping, read_string, reject_unknown
from adapter.items import Item
from adapter.sources.base import CommonSourceSettings, Source, SourceContext

FUTURE_KINDS = ("api", "schedule")
MAX_REGRESSORS = 8
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}\Z")
EXTRA_VALUES = ("baseline", "events")


@dataclass(frozen=True)
class RegressorConfig:
    name: str
    value: str
    history: Any  # adapter.sources.forecast.PrometheusHistory | ApiHistory
    future_kind: str
    future: Any  # that kind's parsed config


def parse_regressors(raw: Any, path: str, parse_history: Any) -> tuple[RegressorConfig, ...]:
    """The `regressors` list; `parse_history` is the forecast source's own history parser."""
    from adapter.sources.registry import config_parsers

    if not isinstance(raw, list) or not raw:
        raise ValidationError(path, "expected a non-empty list of {name, history, future}")
    if len(raw) > MAX_REGRESSORS:
        raise ValidationError(path, f"at most {MAX_REGRESSORS} regressors")
    out: list[RegressorConfig] = []
    for i, entry in enumerate(raw):
        where = f"{path}[{i}]"
        entry = expect_mapping(entry, where)
        reject_unknown(entry, ("name", "value", "history", "future"), where)
        name = read_string(entry, "name", where)
        if not name or not _NAME.match(name):
            raise ValidationError(f"{where}.name", "required: a name like audience or launch_size")
        if any(r.name == name for r in out):
            raise ValidationError(f"{where}.name", f"duplicate regressor name {name!r}")
        value = read_string(entry, "value", where, default=name) or name
        if "history" not in entry:
            raise ValidationError(
                f"{where}.history", "required: the announced values of the past ({prometheus: {...}} or {api: {...}})"
            )
        history = parse_history(entry["history"], f"{where}.history")
        future = expect_mapping(entry.get("future"), f"{where}.future")
        if len(future) != 1 or next(iter(future)) not in FUTURE_KINDS:
            raise ValidationError(f"{where}.future", f"exactly one of {', '.join(FUTURE_KINDS)}")
        kind = next(iter(future))
        parsed = config_parsers()[kind](
            kind, expect_mapping(future[kind], f"{where}.future.{kind}"), f"{where}.future.{kind}"
        )
        out.append(RegressorConfig(name, value, history, kind, parsed))
    return tuple(out)


@dataclass
class RegressorData:
    """What one fetch read: each regressor's history samples and its announced items ahead."""

    names: tuple[str, ...]
    history: list[tuple[np.ndarray, np.ndarray]]  # per regressor: (timestamps, values)
    future: list[list[Item]]
    values: tuple[str, ...]

    def on_grid(self, last: float, step: float, size: int) -> np.ndarray:
        """(size, k) announced values at the history grid ending at `last` (0 = nothing announced)."""
        grid = last - step * np.arange(size - 1, -1, -1, dtype=float)
        out = np.zeros((size, len(self.names)))
        for j, (stamps, values) in enumerate(self.history):
            out[:, j] = _nearest(grid, stamps, values, step)
            # Announced items already past also count (a history that lags behind the announcer).
            out[:, j] = np.where(out[:, j] == 0, _items_at(grid, self.future[j], self.values[j]), out[:, j])
        return out

    def ahead(self, last: float, step: float, count: int) -> np.ndarray:
        """(count, k) announced values at the forecast steps after `last`."""
        times = last + step * np.arange(1, count + 1, dtype=float)
        return (
            np.column_stack([_items_at(times, items, value) for items, value in zip(self.future, self.values)])
            if self.names
            else np.zeros((count, 0))
        )


def _nearest(grid: np.ndarray, stamps: np.ndarray, values: np.ndarray, step: float) -> np.ndarray:
    ok = np.isfinite(stamps) & np.isfinite(values)
    stamps, values = stamps[ok], values[ok]
    if len(stamps) == 0:
        return np.zeros(len(grid))
    order = np.argsort(stamps)
    stamps, values = stamps[order], values[order]
    idx = np.clip(np.searchsorted(stamps, grid), 1, len(stamps) - 1) if len(stamps) > 1 else np.zeros(len(grid), int)
    left = np.maximum(idx - 1, 0)
    pick = np.where(np.abs(stamps[left] - grid) <= np.abs(stamps[idx] - grid), left, idx)
    close = np.abs(stamps[pick] - grid) <= step / 2
    return np.where(close, values[pick], 0.0)


def _items_at(times: np.ndarray, items: Sequence[Item], value: str) -> np.ndarray:
    """Sum of the announced `value` over the items covering each time."""
    out = np.zeros(len(times))
    for item in items:
        v = item.values.get(value)
        if v is None or not np.isfinite(v):
            continue
        out[(times >= item.start) & (times < item.end)] += float(v)
    return out


class RegressorReader:
    """Reads the regressors of one forecast source: history like the load's, future via a source."""

    def __init__(
        self,
        regressors: Sequence[RegressorConfig],
        history_reader: Any,
        common: CommonSourceSettings,
        context: SourceContext,
    ):
        from adapter.sources.registry import create_source

        self.regressors = tuple(regressors)
        # history_reader(history_config) -> an object with `async _history(now)` and `close()`
        self._history = [history_reader(r.history) for r in self.regressors]
        self._future: list[Source] = [create_source(r.future_kind, r.future, common, context) for r in self.regressors]

    async def fetch(self, now: float) -> RegressorData:
        history: list[tuple[np.ndarray, np.ndarray]] = []
        future: list[list[Item]] = []
        for r, reader, source in zip(self.regressors, self._history, self._future):
            try:
                series, _step = await reader._history(now)
            except SourceError as exc:
                raise SourceError(f"regressor {r.name}: history: {exc}") from None
            if series:
                stamps = np.concatenate([s[1] for s in series])
                values = np.concatenate([s[2] for s in series])
            else:  # nothing was ever announced: all zeros
                stamps, values = np.empty(0), np.empty(0)
            history.append((stamps, values))
            try:
                future.append(list((await source.fetch(now)).items))
            except SourceError as exc:
                raise SourceError(f"regressor {r.name}: future: {exc}") from None
        return RegressorData(
            tuple(r.name for r in self.regressors), history, future, tuple(r.value for r in self.regressors)
        )

    async def close(self) -> None:
        for reader in self._history:
            await reader.close()
        for source in self._future:
            await source.close()
