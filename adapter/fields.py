"""Typed readers for manifest fields: each checks one field and names it by its path on error.

Shared by the resource models (`adapter.resources`) and the source kinds (`adapter.sources.*`), so
they sit below both: nothing here knows what a VirtualMetric or a source is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from adapter.durations import DurationError, parse_duration
from adapter.errors import ValidationError


def expect_mapping(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValidationError(path, f"expected an object, got {type_name(value)}")
    return value


def reject_unknown(obj: Mapping[str, Any], allowed: tuple[str, ...] | set[str], path: str) -> None:
    for key in obj:
        if key not in allowed:
            hint = ", ".join(sorted(allowed))
            raise ValidationError(join_path(path, str(key)), f"unknown field (allowed: {hint})")


def read_number(
    obj: Mapping[str, Any], key: str, path: str, default: float | None = None, required: bool = False
) -> float | None:
    if key not in obj or obj[key] is None:
        if required:
            raise ValidationError(join_path(path, key), "required")
        return default
    value = obj[key]
    if isinstance(value, str):
        # Allow Kubernetes quantity-ish strings such as "10" or "2.5" written quoted in YAML.
        try:
            value = float(value)
        except ValueError:
            raise ValidationError(join_path(path, key), f"expected a number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(join_path(path, key), f"expected a number, got {type_name(value)}")
    number = as_float(value)
    if not math.isfinite(number) or abs(number) > 1e15:
        raise ValidationError(join_path(path, key), f"{show_value(value)} is not a finite number within ±1e15")
    return number


def as_float(value: int | float) -> float:
    """float(value), with ±inf for an integer too large for a float (a 400-digit YAML literal)
    where float() raises OverflowError: callers then report it as out of range, like 1e400."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def show_value(value: Any, limit: int = 40) -> str:
    """repr(value) for an error message, shortened: a 400-digit literal need not be quoted whole."""
    try:
        text = repr(value)
    except ValueError:  # an int beyond Python's int-to-string digit limit
        return f"an integer of about {int(value.bit_length() * 0.30103)} digits"
    return text if len(text) <= limit else f"{text[: limit - 12]}... ({len(text)} characters)"


def read_string(
    obj: Mapping[str, Any],
    key: str,
    path: str,
    default: str | None = None,
    required: bool = False,
    choices: tuple[str, ...] | None = None,
    max_length: int = 4096,
) -> str | None:
    if key not in obj or obj[key] is None:
        if required:
            raise ValidationError(join_path(path, key), "required")
        return default
    value = obj[key]
    if not isinstance(value, str):
        raise ValidationError(join_path(path, key), f"expected a string, got {type_name(value)}")
    if required and not value:
        raise ValidationError(join_path(path, key), "must not be empty")
    if len(value) > max_length:
        raise ValidationError(join_path(path, key), f"longer than {max_length} characters")
    if choices is not None and value not in choices:
        raise ValidationError(join_path(path, key), f"{value!r} is not one of {', '.join(choices)}")
    return value


def read_duration(
    obj: Mapping[str, Any],
    key: str,
    path: str,
    default: float,
    minimum: float = 0.0,
    maximum: float = 366 * 86400.0,
    parser: Callable[[Any], float] = parse_duration,
) -> float:
    if key not in obj or obj[key] is None:
        return default
    raw = obj[key]
    out_of_range = ValidationError(
        join_path(path, key), f"{show_value(raw)} must be between {minimum:g}s and {maximum:g}s"
    )
    if isinstance(raw, int) and not isinstance(raw, bool) and not minimum <= raw <= maximum:
        raise out_of_range  # compared exactly: an integer too large for a float is out of range too
    try:
        seconds = parser(raw)
    except DurationError as exc:
        raise ValidationError(join_path(path, key), str(exc)) from None
    if not minimum <= seconds <= maximum:  # also NaN
        raise out_of_range
    return seconds


def read_bool(obj: Mapping[str, Any], key: str, path: str, default: bool = False) -> bool:
    if key not in obj or obj[key] is None:
        return default
    if not isinstance(obj[key], bool):
        raise ValidationError(join_path(path, key), f"expected true or false, got {type_name(obj[key])}")
    return bool(obj[key])


def join_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}.get(
        type(value), type(value).__name__
    )
