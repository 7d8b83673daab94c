"""Kubernetes/Go style durations ("15s", "1m", "2m30s", "1h", "500ms") to seconds.

Manifests and flags use Go's `time.ParseDuration` syntax, so we accept exactly that grammar
(plus a bare number, read as seconds, because YAML authors write `interval: 30`).
"""

from __future__ import annotations

import math
import re

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


class DurationError(ValueError):
    """A duration string that Go's time.ParseDuration would also reject."""


def parse_duration(value: object) -> float:
    """Return the duration in seconds. Accepts "1h30m", "-5s", "0", 30, 2.5."""
    if isinstance(value, bool):
        raise DurationError(f"invalid duration {value!r}: expected a string like 30s or 5m")
    if isinstance(value, (int, float)):
        try:
            seconds = float(value)
        except OverflowError:  # an integer literal of hundreds of digits
            raise DurationError(f"invalid duration {_short(value)}: out of range") from None
        if not math.isfinite(seconds):
            raise DurationError(f"invalid duration {value!r}: not finite")
        return seconds
    if not isinstance(value, str):
        raise DurationError(f"invalid duration {value!r}: expected a string like 30s or 5m")
    text = value.strip()
    if not text:
        raise DurationError('invalid duration "": empty')
    sign = 1.0
    if text[0] in "+-":
        sign = -1.0 if text[0] == "-" else 1.0
        text = text[1:]
    if text == "0":
        return 0.0
    return sign * float(text) if re.fullmatch(r"\d+(\.\d+)?", text) else sign * _parse_units(text, value)


def _short(value: float) -> str:
    try:
        text = str(value)
    except ValueError:  # beyond Python's int-to-string digit limit
        return "(an integer of thousands of digits)"
    return f"{text[:12]}... ({len(text.lstrip('-'))} digits)"


def _parse_units(text: str, original: str) -> float:
    pos = 0
    total = 0.0
    while pos < len(text):
        match = _PART.match(text, pos)
        if not match:
            raise DurationError(
                f"invalid duration {original!r}: expected number+unit pairs such as 1h30m, 45s or 500ms"
            )
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    return total


def format_duration(seconds: float) -> str:
    """Inverse of parse_duration for display: 150 -> "2m30s", 0.5 -> "500ms"."""
    if seconds == 0:
        return "0s"
    sign = "-" if seconds < 0 else ""
    rest = abs(seconds)
    if rest < 1:
        return f"{sign}{rest * 1000:g}ms"
    out = []
    hours, rest = divmod(rest, 3600)
    minutes, rest = divmod(rest, 60)
    if hours:
        out.append(f"{int(hours)}h")
    if minutes:
        out.append(f"{int(minutes)}m")
    if rest:
        out.append(f"{rest:g}s")
    return sign + "".join(out)
