"""Kubernetes ``resource.Quantity``: exact parsing and canonical strings (docs/api.md).

Every metric value we serve is a Quantity string, and the HPA reads it back with
``ParseQuantity(...).MilliValue()``. Getting the canonical form right matters because clients diff
and log these strings, and getting the *value* right matters because the HPA scales on it.

Semantics follow k8s.io/apimachinery ``pkg/api/resource`` (quantity.go, suffix.go):

* grammar ``<signedNumber><suffix>``; suffix is ``n u m "" k M G T P E`` (DecimalSI),
  ``Ki Mi Gi Ti Pi Ei`` (BinarySI) or ``e<int>``/``E<int>`` (DecimalExponent);
* values are kept down to nano (1e-9); anything finer is rounded **up, away from zero**
  (``0.9n`` → ``1n``, ``-0.9n`` → ``-1n``);
* the canonical string is an integer mantissa with the largest suffix that loses nothing (decimal
  exponent a multiple of 3), sign only when negative, never ``-0``. DecimalSI has no suffix above
  ``E``, so larger values print as ``<n>e<exp>`` (current upstream; older releases dropped the
  exponent). BinarySI prints as DecimalSI when ``|x| < 1024`` or when it is not an integer.

Floats are converted with ``Decimal(repr(x))``, i.e. the shortest decimal that round-trips to the
same double, so ``0.1`` is 1/10 and not 0.1000000000000000055511151231257827. A float that really is
``0.30000000000000004`` (``0.1 + 0.2``) therefore becomes ``300000001n`` after the nano round-up,
which is what Go's ParseQuantity does with that exact text.
"""

from __future__ import annotations

import math
import operator
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

__all__ = [
    "BINARY_SI",
    "DECIMAL_EXPONENT",
    "DECIMAL_SI",
    "MILLI_CLAMP",
    "QuantityError",
    "format_milli",
    "format_quantity",
    "milli_value",
    "parse_quantity",
    "parse_quantity_with_format",
]

DECIMAL_SI, BINARY_SI, DECIMAL_EXPONENT = "DecimalSI", "BinarySI", "DecimalExponent"
_FORMATS = (DECIMAL_SI, BINARY_SI, DECIMAL_EXPONENT)

# Largest magnitude format_milli emits. MilliValue() is int64 milli, which overflows above
# ~9.22e15 (KEDA scaler.go:151); 9e15 keeps a safety margin and prints as the tidy "9P".
MILLI_CLAMP = 9_000_000_000_000_000

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_NANO_EXPONENT = -9
_DECIMAL_SUFFIXES = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_SUFFIX_TO_DECIMAL_EXPONENT = {suffix: exp for exp, suffix in _DECIMAL_SUFFIXES.items()}
_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_SUFFIX_TO_BINARY_EXPONENT = {suffix: 10 * i for i, suffix in enumerate(_BINARY_SUFFIXES) if suffix}
_UPWARD_SUFFIXES = ("", "k", "M", "G", "T", "P", "E")  # for integers, thousands at a time
_DIGITS = frozenset("0123456789")
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")

# Upstream's error texts (quantity.go ErrFormatWrong / ErrNumeric / ErrSuffix).
_SPLIT_RE = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_ERR_FORMAT = f"quantities must match the regular expression '{_SPLIT_RE}'"
_ERR_NUMERIC = "unable to parse numeric part of quantity"
_ERR_SUFFIX = "unable to parse quantity's suffix"


class QuantityError(ValueError):
    """Text that is not a Kubernetes quantity, or a value that cannot be one (NaN, inf)."""


# --------------------------------------------------------------------------------------------------
# Parsing


def _scan(text: str) -> tuple[bool, str, str, str]:
    """parseQuantityString: split into (positive, integer digits, fraction digits, suffix).

    Mirrors upstream's permissive scanner: "1.", ".5", "." and a lone sign all scan (the last two as
    zero), and the suffix is any run of suffix letters, an optional sign and digits, checked later.
    """
    end = len(text)
    pos = 0
    positive = True
    if pos < end and text[0] in "+-":
        positive = text[0] == "+"
        pos = 1
    while pos < end and text[pos] == "0":
        pos += 1
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    integer = text[start:pos] or "0"
    fraction = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        fraction = text[start:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos != end:
        raise QuantityError(f"invalid quantity {text!r}: {_ERR_FORMAT}")
    return positive, integer, fraction, text[suffix_start:]


def _interpret_suffix(text: str, suffix: str) -> tuple[int, int, str]:
    """suffixHandler.interpret: (base, exponent, format) for a suffix."""
    if suffix in _SUFFIX_TO_DECIMAL_EXPONENT:
        return 10, _SUFFIX_TO_DECIMAL_EXPONENT[suffix], DECIMAL_SI
    if suffix in _SUFFIX_TO_BINARY_EXPONENT:
        return 2, _SUFFIX_TO_BINARY_EXPONENT[suffix], BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        digits = suffix[1:]
        body = digits[1:] if digits[0] in "+-" else digits
        # Go parses the exponent as int64 and keeps it as int32; reject what would wrap.
        if body and all(c in _DIGITS for c in body) and -(1 << 31) <= int(digits) < (1 << 31):
            return 10, int(digits), DECIMAL_EXPONENT
    raise QuantityError(f"invalid quantity {text!r}: {_ERR_SUFFIX}")


def _round_to_nano(negative: bool, unscaled: int, exponent: int) -> Decimal:
    """Decimal for ±unscaled·10^exponent, rounded up away from zero to a multiple of 1e-9."""
    if exponent < _NANO_EXPONENT and unscaled:
        shift = _NANO_EXPONENT - exponent
        if shift > unscaled.bit_length():  # 10**shift > unscaled: all of it is below 1n
            unscaled = 1
        else:
            quotient, remainder = divmod(unscaled, 10**shift)
            unscaled = quotient + (1 if remainder else 0)
        exponent = _NANO_EXPONENT
    return Decimal(f"{'-' if negative else ''}{unscaled}E{exponent}")


def parse_quantity_with_format(text: str) -> tuple[Decimal, str]:
    """ParseQuantity: the exact value and the format the text was written in.

    The format matters only for printing it back (``1Ki`` stays ``1Ki``). Binary values are capped at
    2^63-1 in magnitude, and a binary value between -1 and 1 is reported as DecimalSI, as upstream.
    """
    if not isinstance(text, str):
        raise QuantityError(f"quantity must be a string, not {type(text).__name__}")
    if not text:
        raise QuantityError(f"invalid quantity '': {_ERR_FORMAT}")
    if text == "0":
        return Decimal(0), DECIMAL_SI
    positive, integer, fraction, suffix = _scan(text)
    base, exponent, fmt = _interpret_suffix(text, suffix)
    try:
        unscaled = int(integer + fraction)
    except ValueError:  # more digits than int() converts (sys.int_info.default_max_str_digits)
        raise QuantityError(f"invalid quantity {text!r}: {_ERR_NUMERIC} (too many digits)") from None
    if base == 2:
        unscaled <<= exponent
        decimal_exponent = -len(fraction)
    else:
        decimal_exponent = exponent - len(fraction)
    amount = _round_to_nano(not positive, unscaled, decimal_exponent)
    if fmt == BINARY_SI:
        if abs(amount) > _INT64_MAX:
            amount = Decimal(_INT64_MAX).copy_sign(amount)
        if 0 < abs(amount) < 1:
            fmt = DECIMAL_SI
    if amount.is_zero():
        amount = Decimal(0)  # no "-0"
    return amount, fmt


def parse_quantity(text: str) -> Decimal:
    """ParseQuantity(text) as an exact Decimal. Raises :class:`QuantityError` on bad input.

    Accepts what Kubernetes accepts: ``"0"``, ``"+1"``, ``"1."``, ``".5"``, ``"1.5k"``, ``"2Gi"``,
    ``"1e3"``; rejects blanks around the number, unknown suffixes (``"1K"``) and ``""``.
    """
    return parse_quantity_with_format(text)[0]


# --------------------------------------------------------------------------------------------------
# Formatting


def _canonical(amount: Decimal, fmt: str) -> str:
    """Quantity.String() for an amount that is already rounded to nano (or coarser)."""
    if amount.is_zero():
        return "0"
    sign = "-" if amount.is_signed() else ""
    if fmt == BINARY_SI:
        magnitude = abs(amount)
        if magnitude >= 1024 and magnitude == magnitude.to_integral_value():
            number = int(magnitude)
            times = 0
            while number % 1024 == 0 and times < len(_BINARY_SUFFIXES) - 1:
                number //= 1024
                times += 1
            return f"{sign}{number}{_BINARY_SUFFIXES[times]}"
        fmt = DECIMAL_SI  # too small for a binary suffix, or would need rounding
    _, digit_tuple, exponent = amount.as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple))
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    pad = exponent % 3  # lower the exponent to a multiple of 3 (Python's % floors)
    mantissa = stripped + "0" * pad
    exponent -= pad
    if fmt == DECIMAL_SI and exponent in _DECIMAL_SUFFIXES:
        suffix = _DECIMAL_SUFFIXES[exponent]
    else:  # DecimalExponent, or DecimalSI beyond "E"
        suffix = f"e{exponent}" if exponent else ""
    return f"{sign}{mantissa}{suffix}"


def _to_decimal(value: object) -> Decimal:
    if isinstance(value, Decimal):
        result = value
    elif isinstance(value, float):
        # float.__repr__, not repr(): numpy 2's float64 (a float subclass) reprs as "np.float64(..)"
        result = Decimal(float.__repr__(value)) if math.isfinite(value) else Decimal(value)
    elif isinstance(value, int):
        result = Decimal(value)
    else:  # numpy scalars and friends
        try:
            result = Decimal(operator.index(value))  # type: ignore[arg-type]
        except TypeError:
            try:
                number = float(value)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                raise QuantityError(f"not a number: {value!r}") from None
            result = Decimal(float.__repr__(number)) if math.isfinite(number) else Decimal(number)
    if not result.is_finite():
        raise QuantityError(f"a quantity must be a finite number, got {value!r}")
    return result


def format_quantity(value: float | Decimal | str, fmt: str | None = None) -> str:
    """The canonical Quantity string for ``value``.

    Numbers print as DecimalSI (``1.5`` → ``"1500m"``, ``1000`` → ``"1k"``, ``1500`` → ``"1500"``),
    after rounding up away from zero to nano. A string is parsed as a quantity and keeps the format
    it was written in, as ``MustParse(s).String()`` does (``"1024Mi"`` → ``"1Gi"``,
    ``"1e9"`` → ``"1e9"``). ``fmt`` (``"DecimalSI"``, ``"BinarySI"``, ``"DecimalExponent"``)
    overrides the format. Raises :class:`QuantityError` for NaN, infinities and bad strings.
    """
    if fmt is not None and fmt not in _FORMATS:
        raise QuantityError(f"unknown quantity format {fmt!r}; expected one of {', '.join(_FORMATS)}")
    if isinstance(value, str):
        amount, parsed_fmt = parse_quantity_with_format(value)
        return _canonical(amount, fmt or parsed_fmt)
    amount = _to_decimal(value)
    _, digit_tuple, exponent = amount.as_tuple()
    assert isinstance(exponent, int)
    unscaled = int("".join(map(str, digit_tuple)))
    return _canonical(_round_to_nano(amount.is_signed(), unscaled, exponent), fmt or DECIMAL_SI)


def _format_milli_int(milli: int) -> str:
    """Canonical DecimalSI string for ``milli`` thousandths (|milli| well inside int64)."""
    if milli % 1000:
        return f"{milli}m"
    whole = milli // 1000
    if whole == 0:
        return "0"
    magnitude = -whole if whole < 0 else whole
    times = 0
    while magnitude % 1000 == 0 and times < 6:
        magnitude //= 1000
        times += 1
    return f"{'-' if whole < 0 else ''}{magnitude}{_UPWARD_SUFFIXES[times]}"


_MILLI = Decimal("0.001")
_CLAMP_FLOAT = float(MILLI_CLAMP)


def _format_milli_decimal(value: float | Decimal) -> str:
    """Reference implementation of format_milli, all in Decimal (slow, obviously right)."""
    amount = _to_decimal(value)
    amount = max(-Decimal(MILLI_CLAMP), min(Decimal(MILLI_CLAMP), amount))
    return format_quantity(amount.quantize(_MILLI, rounding=ROUND_HALF_UP))


def format_milli(value: float | Decimal) -> str:
    """The serving-path encoder: round to milli (half up, away from zero), clamp, canonicalise.

    ``|value|`` is clamped to 9e15 so the HPA's int64 MilliValue cannot overflow, and the result is
    rounded to 1m because the HPA only works in milli units anyway. NaN/inf raise
    :class:`QuantityError` (a ValueError). The common float case avoids Decimal: it rounds on the
    digits of ``repr(value)``, which is exactly what ``Decimal(repr(value)).quantize(...)`` does.
    """
    if isinstance(value, int):  # bool and int: exact integer arithmetic
        return _format_milli_int(max(-MILLI_CLAMP, min(MILLI_CLAMP, int(value))) * 1000)
    if not isinstance(value, float):
        return _format_milli_decimal(value)  # type: ignore[arg-type]
    if not math.isfinite(value):
        raise QuantityError(f"a quantity must be a finite number, got {value!r}")
    if value > _CLAMP_FLOAT:
        value = _CLAMP_FLOAT
    elif value < -_CLAMP_FLOAT:
        value = -_CLAMP_FLOAT
    if value.is_integer():  # |value| <= 9e15 < 2^53, so int() is exact
        return _format_milli_int(int(value) * 1000)
    text = float.__repr__(value)  # shortest round-trip digits (and no "np.float64(...)" wrapper)
    if "e" in text:  # |value| < 1e-4 (large values were clamped to integers above)
        return _format_milli_decimal(value)
    negative = text[0] == "-"
    integer, _, fraction = text.lstrip("-").partition(".")
    milli = int(integer) * 1000 + int((fraction + "00")[:3])
    if len(fraction) > 3 and fraction[3] >= "5":  # half up on the dropped digits
        milli += 1
    return _format_milli_int(-milli if negative else milli)


# --------------------------------------------------------------------------------------------------
# Reading values back


def milli_value(q: Decimal) -> int:
    """Quantity.MilliValue(): ``q*1000`` as an integer, rounding a remainder away from zero.

    Upstream calls this ceil, and for positive values it is; its int64 path rounds negatives away
    from zero too (``"-1500u"`` → -2). Raises :class:`QuantityError` where the int64
    result would overflow (upstream silently wraps).
    """
    try:
        amount = q if isinstance(q, Decimal) else Decimal(q)
    except (InvalidOperation, TypeError, ValueError):
        raise QuantityError(f"not a quantity value: {q!r}") from None
    if not amount.is_finite():
        raise QuantityError(f"a quantity must be a finite number, got {q!r}")
    if amount.is_zero():
        return 0
    if amount.adjusted() > 18:  # |q| >= 1e19 > int64 even before the *1000
        raise QuantityError(f"quantity {amount} is too large for an int64 milli value")
    if amount.adjusted() < -3:  # 0 < |q| < 1m: rounds away from zero to one milli
        return -1 if amount.is_signed() else 1
    sign, digit_tuple, exponent = amount.as_tuple()
    assert isinstance(exponent, int)
    unscaled = int("".join(map(str, digit_tuple)))
    exponent += 3
    if exponent >= 0:
        milli = unscaled * 10**exponent
    else:
        quotient, remainder = divmod(unscaled, 10**-exponent)
        milli = quotient + (1 if remainder else 0)
    milli = -milli if sign else milli
    if not _INT64_MIN <= milli <= _INT64_MAX:
        raise QuantityError(f"quantity {amount} is too large for an int64 milli value")
    return milli
