"""Exact Kubernetes Quantity parsing for the HPA simulator (docs/hpa-algorithm.md).

The HPA controller works in int64 milli-units: every target and every metric value goes through
`Quantity.MilliValue()`. To reproduce its decisions bit for bit we parse quantities exactly (Decimal,
never float) and round the way apimachinery does: up, away from zero.
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation

from adapter import quantity as _quantity

MAX_INT64 = 2**63 - 1
MAX_INT32 = 2**31 - 1

# One Quantity grammar for the project: parsing and MilliValue come from adapter.quantity; this module
# adds what the simulator needs on top (YAML numbers, int64 clamping, AsApproximateFloat64).
QuantityError = _quantity.QuantityError


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
        raise QuantityError(f'invalid quantity {text!r}: expected a string such as "10", "500m" or "2k"')
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
    (`ceil(Decimal(str(x)) * 1000)`, never float `x * 1000`)."""
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

    The parsed value keeps the mantissa and exponent the quantity was written with ("1.5k" is 15e2),
    as Go's does. Go multiplies the float mantissa by `math.Pow10(exp)`; for negative exponents Pow10
    returns the correctly rounded 10^exp, which `1 / 10.0**-exp` also gives for the small exponents
    quantities use, and beyond float64's range it is infinite.
    """
    sign, digits, exponent = parse_quantity(text).as_tuple()
    assert isinstance(exponent, int)  # a parsed quantity is always finite
    base = float(int("".join(map(str, digits)) or "0")) * (-1.0 if sign else 1.0)
    if exponent == 0 or base == 0.0:
        return base
    try:
        return base * (10.0**exponent if exponent > 0 else 1.0 / 10.0**-exponent)
    except OverflowError:
        return math.copysign(math.inf, base) if exponent > 0 else 0.0
