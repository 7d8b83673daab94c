"""Exact Kubernetes Quantity parsing for the HPA simulator (wire.md §2.2, hpa.md §4, §11.1).

The HPA controller works in int64 milli-units: every target and every metric value goes through
`Quantity.MilliValue()`. To reproduce its decisions bit for bit we parse quantities exactly (Decimal,
never float) and round the way apimachinery does: up, away from zero.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from adapter import quantity as _quantity

MAX_INT64 = 2**63 - 1
MAX_INT32 = 2**31 - 1

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<int>\d*)(?:\.(?P<frac>\d*))?"
    r"(?:(?P<exp>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?))")


# One Quantity grammar for the project: parsing and MilliValue come from adapter.quantity; this module
# adds what the simulator needs on top (YAML numbers, int64 clamping, AsApproximateFloat64).
QuantityError = _quantity.QuantityError


def _split(text: object) -> tuple[int, int, int, int]:
    """(sign, unscaled integer, power-of-ten exponent, power-of-two exponent) of a quantity."""
    if isinstance(text, bool):
        raise QuantityError(f"invalid quantity {text!r}")
    if isinstance(text, int):
        return (1 if text >= 0 else -1), abs(text), 0, 0
    if isinstance(text, float):
        if not math.isfinite(text):
            raise QuantityError(f"invalid quantity {text!r}: not finite")
        # A YAML number: its shortest repr is what the author wrote (12.5, 0.1).
        text = repr(text)
    if not isinstance(text, str):
        raise QuantityError(f"invalid quantity {text!r}: expected a string such as \"10\", \"500m\" or \"2k\"")
    match = _QUANTITY.fullmatch(text)
    if not match or not (match.group("int") or match.group("frac")):
        raise QuantityError(f"invalid quantity {text!r}: expected a number with an optional suffix "
                            "(m, k, M, G, Ki, Mi, e3, ...)")
    digits = (match.group("int") or "") + (match.group("frac") or "")
    unscaled = int(digits or "0")
    exp10 = -len(match.group("frac") or "")
    exp2 = 0
    if match.group("exp"):
        exp10 += int(match.group("exp")[1:])
    elif match.group("suffix") in _BINARY:
        exp2 = _BINARY[match.group("suffix")]
    else:
        exp10 += _DECIMAL[match.group("suffix") or ""]
    sign = -1 if match.group("sign") == "-" else 1
    return sign, unscaled, exp10, exp2


def parse_quantity(text: object) -> Decimal:
    """The exact value of a Quantity ("10", "500m", "2k", "1.5Gi", "1e3"); YAML numbers are accepted."""
    if isinstance(text, bool):
        raise QuantityError(f"invalid quantity {text!r}")
    if isinstance(text, int):
        return Decimal(text)
    if isinstance(text, float):
        if not math.isfinite(text):
            raise QuantityError(f"invalid quantity {text!r}: not finite")
        text = repr(text)  # a YAML number: its shortest repr is what the author wrote (12.5, 0.1)
    if not isinstance(text, str):
        raise QuantityError(f"invalid quantity {text!r}: expected a string such as \"10\", \"500m\" or \"2k\"")
    return _quantity.parse_quantity(text)


def milli_value(value: Decimal) -> int:
    """`Quantity.MilliValue()`: value × 1000 rounded up away from zero, clamped to int64 (a replay
    value beyond int64 milli-units stands for "as large as the HPA can see")."""
    try:
        return _quantity.milli_value(value)
    except QuantityError:
        return MAX_INT64 if value > 0 else -MAX_INT64 - 1


def to_milli(value: object) -> int:
    """Milli-units of a metric value: a quantity string, an int, or a float read exactly via its repr
    (hpa.md §11.1: `ceil(Decimal(str(x)) * 1000)`, never float `x * 1000`)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"metric value {value!r} is not finite")
        try:
            return milli_value(Decimal(repr(value)))
        except InvalidOperation as exc:  # pragma: no cover - repr of a finite float always parses
            raise QuantityError(str(exc)) from None
    return milli_value(parse_quantity(value))


def approximate_float(text: object) -> float:
    """`Quantity.AsApproximateFloat64()`: unscaled mantissa × 10^exp in float64 (used for tolerances).

    Go multiplies the float mantissa by `math.Pow10(exp)`; for negative exponents Pow10 returns the
    correctly rounded 10^exp, which `1 / 10.0**-exp` also gives for the small exponents quantities use.
    """
    sign, unscaled, exp10, exp2 = _split(text)
    base = float(unscaled) * sign
    if exp2:
        return base * math.pow(2.0, exp2)
    if exp10 == 0:
        return base
    return base * (10.0**exp10 if exp10 > 0 else 1.0 / 10.0**-exp10)
