"""Items: what every source produces.

An item is a window `[start, end)` in unix seconds with named numeric values, e.g.
`{"start": 1700545800, "end": 1700545860, "values": {"scheduledMessage": 50}}` (the seed's format).
Items are immutable so snapshots can be shared between the fetch loop and the timeline builder.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from adapter.fields import as_float, show_value
from adapter.timefmt import rfc3339

# Bounds that keep every later computation finite and exact enough: unix seconds up to year ~2200,
# values well inside float64's exact-integer range so quantities stay meaningful.
MAX_TIMESTAMP = 7.3e9
MAX_ABS_VALUE = 1e15
MAX_VALUES_PER_ITEM = 64
MAX_NAME_LENGTH = 128


class ItemError(ValueError):
    """An item that cannot be used; the message says which field and why."""


@dataclass(frozen=True, slots=True)
class Item:
    start: float
    end: float
    values: Mapping[str, float] = field(default_factory=dict)
    id: str | None = None
    # Series labels (prometheus/forecast sources); a metric entry may take its target name from one.
    labels: Mapping[str, str] = field(default_factory=dict)


def parse_item(raw: Any, where: str = "item") -> Item:
    """Validate one item of the seed JSON format. Raises ItemError naming `where` and the field."""
    if not isinstance(raw, dict):
        raise ItemError(f"{where}: expected an object, got {type(raw).__name__}")
    start = _timestamp(raw.get("start"), f"{where}.start")
    end = _timestamp(raw.get("end"), f"{where}.end")
    if not start < end:
        raise ItemError(f"{where}: start ({_instant(start)}) must be before end ({_instant(end)})")
    values_raw = raw.get("values", {})
    if values_raw is None:
        values_raw = {}
    if not isinstance(values_raw, dict):
        raise ItemError(f"{where}.values: expected an object of name: number")
    if len(values_raw) > MAX_VALUES_PER_ITEM:
        raise ItemError(f"{where}.values: more than {MAX_VALUES_PER_ITEM} values")
    values: dict[str, float] = {}
    for name, value in values_raw.items():
        if not isinstance(name, str) or not name or len(name) > MAX_NAME_LENGTH:
            raise ItemError(f"{where}.values: invalid value name {str(name)[:40]!r}")
        values[name] = _number(value, f"{where}.values.{name}")
    item_id = raw.get("id")
    if item_id is not None:
        if isinstance(item_id, bool) or not isinstance(item_id, (str, int)):
            raise ItemError(f"{where}.id: expected a string or integer")
        item_id = str(item_id)
        if len(item_id) > 256:
            raise ItemError(f"{where}.id: longer than 256 characters")
    return Item(start=start, end=end, values=values, id=item_id)


def dedupe(items: list[Item]) -> list[Item]:
    """Duplicate ids in one snapshot count once (the last occurrence wins, as a re-announcement)."""
    seen: dict[str, int] = {}
    out: list[Item] = []
    for item in items:
        if item.id is None:
            out.append(item)
        elif item.id in seen:
            out[seen[item.id]] = item
        else:
            seen[item.id] = len(out)
            out.append(item)
    return out


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ItemError(f"{where}: expected a number, got {type(value).__name__}")
    number = as_float(value)  # ±inf for an integer too large for a float
    if math.isinf(number) and isinstance(value, int):
        raise ItemError(f"{where}: {show_value(value)} is outside ±{MAX_ABS_VALUE:g}")
    if not math.isfinite(number):
        raise ItemError(f"{where}: not a finite number")
    if abs(number) > MAX_ABS_VALUE:
        raise ItemError(f"{where}: {number:g} is outside ±{MAX_ABS_VALUE:g}")
    return number


def _instant(unix: float) -> str:
    """Exact unix seconds and their UTC time: %g would show two different seconds of today alike."""
    shown = f"{unix:.0f}" if unix == int(unix) else repr(unix)
    return f"{shown}, {rfc3339(unix)}"


def _timestamp(value: Any, where: str) -> float:
    if value is None:
        raise ItemError(f"{where}: required (unix seconds)")
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        _number(value, where)  # raises: not a number
    number = as_float(value)
    if isinstance(value, bool) or math.isnan(number) or (math.isinf(number) and isinstance(value, float)):
        raise ItemError(f"{where}: expected unix seconds")
    if not 0 <= number <= MAX_TIMESTAMP:
        shown = show_value(value) if math.isinf(number) else f"{number:g}"
        raise ItemError(f"{where}: {shown} is not a plausible unix timestamp in seconds")
    return number
