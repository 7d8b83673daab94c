"""resource.Quantity parsing and canonical strings (adapter/quantity.py) against docs/api.md §2.2.

Expected strings come from the docs/api.md §2.2 table and from apimachinery's quantity_test.go tables
(TestQuantityParse, TestQuantityString, TestQuantityParseEmit, TestMilliNewSet, TestNewSet).
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_HALF_UP, ROUND_UP, Decimal, localcontext

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.quantity import (
    BINARY_SI,
    DECIMAL_EXPONENT,
    DECIMAL_SI,
    MILLI_CLAMP,
    QuantityError,
    _format_milli_decimal,
    format_milli,
    format_quantity,
    milli_value,
    parse_quantity,
    parse_quantity_with_format,
)

D = Decimal

# ------------------------------------------------------------------------------------------------
# docs/api.md §2.2 table (normative)

WIRE_TABLE = [
    (0, "0"),
    (1.5, "1500m"),
    (1, "1"),
    (1.08, "1080m"),
    (0.001, "1m"),
    (0.08, "80m"),
    (0.0000015, "1500n"),
    (1e-6, "1u"),
    (1000, "1k"),
    (1500, "1500"),
    (300e6, "300M"),
    (1234567e6, "1234567M"),
    (1e9, "1G"),
    (5, "5"),
    (12e18, "12E"),
    (0.033333, "33333u"),
    (-1.5, "-1500m"),
]


@pytest.mark.parametrize(("value", "expected"), WIRE_TABLE)
def test_wire_table_format_quantity(value: float, expected: str) -> None:
    assert format_quantity(value) == expected
    assert format_quantity(D(repr(value))) == expected
    assert parse_quantity(expected) == D(repr(value))


@pytest.mark.parametrize(
    ("value", "expected"),
    [(v, e) for v, e in WIRE_TABLE if abs(v) < MILLI_CLAMP and D(repr(v)) == D(repr(v)).quantize(D("0.001"))],
)
def test_wire_table_format_milli(value: float, expected: str) -> None:
    # the rows that are whole milli values come out the same from the serving path
    assert format_milli(value) == expected
    assert format_milli(float(value)) == expected


def test_wire_table_decimal_exponent_row() -> None:
    assert format_quantity("1e9") == "1e9"
    assert format_quantity(1e9, DECIMAL_EXPONENT) == "1e9"


def test_wire_table_named_examples() -> None:
    # decQuantity(1234567, 6) -> 1234567M; NewMilliQuantity(1234000) -> 1234; NewMilliQuantity(5000) -> 5
    assert format_quantity(D(1234567).scaleb(6)) == "1234567M"
    assert format_quantity(D(1234000) / 1000) == "1234"
    assert format_quantity(D(5000) / 1000) == "5"
    assert format_milli(1234.0) == "1234"


@pytest.mark.parametrize("zero", [0, 0.0, -0.0, D("-0"), D("0E-12"), "0", "-0", "0Ki", "-0.000", "0e9"])
def test_zero_never_has_sign_or_suffix(zero: object) -> None:
    assert format_quantity(zero) == "0"  # type: ignore[arg-type]


@pytest.mark.parametrize("zero", [0, 0.0, -0.0, 0.0004, -0.0004, 1e-300, -1e-300])
def test_format_milli_zero(zero: float) -> None:
    assert format_milli(zero) == "0"


# ------------------------------------------------------------------------------------------------
# Nano precision: round up, away from zero


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (D("0.9e-9"), "1n"),
        (D("3.001e-9"), "4n"),
        (D("0.00000012345"), "124n"),
        (D("0.00000012354"), "124n"),
        (D("-0.9e-9"), "-1n"),
        (D("-3.001e-9"), "-4n"),
        (D("1e-30"), "1n"),
        (1e-300, "1n"),
        (0.1 + 0.2, "300000001n"),  # repr is 0.30000000000000004: upstream-faithful for that float
        (0.1, "100m"),  # repr, not the binary expansion
        (D("10800e-10"), "1080n"),
    ],
)
def test_nano_round_up(value: object, expected: str) -> None:
    assert format_quantity(value) == expected  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------
# TestQuantityString (mantissa, exponent, format) -> canonical, alternate spelling


QUANTITY_STRING = [
    (1024 * 1024 * 1024, 0, BINARY_SI, "1Gi", "1024Mi"),
    (300 * 1024 * 1024, 0, BINARY_SI, "300Mi", "307200Ki"),
    (6 * 1024, 0, BINARY_SI, "6Ki", ""),
    (1001 * 1024 * 1024 * 1024, 0, BINARY_SI, "1001Gi", "1025024Mi"),
    (1024 * 1024 * 1024 * 1024, 0, BINARY_SI, "1Ti", "1024Gi"),
    (5, 0, BINARY_SI, "5", "5000m"),
    (500, -3, BINARY_SI, "500m", "0.5"),
    (1, 9, DECIMAL_SI, "1G", "1000M"),
    (1000, 6, DECIMAL_SI, "1G", "0.001T"),
    (1000000, 3, DECIMAL_SI, "1G", ""),
    (1000000000, 0, DECIMAL_SI, "1G", ""),
    (1, -3, DECIMAL_SI, "1m", "1000u"),
    (80, -3, DECIMAL_SI, "80m", ""),
    (1080, -3, DECIMAL_SI, "1080m", "1.08"),
    (108, -2, DECIMAL_SI, "1080m", "1080000000n"),
    (10800, -4, DECIMAL_SI, "1080m", ""),
    (300, 6, DECIMAL_SI, "300M", ""),
    (1, 12, DECIMAL_SI, "1T", ""),
    (1, 18, DECIMAL_SI, "1E", ""),
    (1, 21, DECIMAL_SI, "1e21", "1000E"),  # no DecimalSI suffix above E: exponent notation
    (5, 21, DECIMAL_SI, "5e21", "5000E"),
    (1, 24, DECIMAL_SI, "1e24", "1000000E"),
    (1234567, 6, DECIMAL_SI, "1234567M", ""),
    (1234567, -3, BINARY_SI, "1234567m", ""),
    (3, 3, DECIMAL_SI, "3k", ""),
    (1025, 0, BINARY_SI, "1025", ""),
    (0, 0, DECIMAL_SI, "0", ""),
    (0, 0, BINARY_SI, "0", ""),
    (1, 9, DECIMAL_EXPONENT, "1e9", ".001e12"),
    (1, -3, DECIMAL_EXPONENT, "1e-3", "0.001e0"),
    (1, -9, DECIMAL_EXPONENT, "1e-9", "1000e-12"),
    (80, -3, DECIMAL_EXPONENT, "80e-3", ""),
    (300, 6, DECIMAL_EXPONENT, "300e6", ""),
    (1, 12, DECIMAL_EXPONENT, "1e12", ""),
    (1, 3, DECIMAL_EXPONENT, "1e3", ""),
    (3, 3, DECIMAL_EXPONENT, "3e3", ""),
    (0, 0, DECIMAL_EXPONENT, "0", "00"),
    (1, -9, DECIMAL_SI, "1n", ""),
    (80, -9, DECIMAL_SI, "80n", ""),
    (1080, -9, DECIMAL_SI, "1080n", ""),
    (108, -8, DECIMAL_SI, "1080n", ""),
    (10800, -10, DECIMAL_SI, "1080n", ""),
    (1, -6, DECIMAL_SI, "1u", ""),
    (80, -6, DECIMAL_SI, "80u", ""),
    (1080, -6, DECIMAL_SI, "1080u", ""),
]


@pytest.mark.parametrize(("mantissa", "exponent", "fmt", "expected", "alternate"), QUANTITY_STRING)
def test_quantity_string(mantissa: int, exponent: int, fmt: str, expected: str, alternate: str) -> None:
    value = D(mantissa).scaleb(exponent)
    assert format_quantity(value, fmt) == expected
    if value:
        assert format_quantity(-value, fmt) == "-" + expected  # never "-0"
    # the canonical string parses back to the same value and prints unchanged
    parsed, _parsed_fmt = parse_quantity_with_format(expected)
    assert parsed == value
    assert format_quantity(expected) == expected
    if alternate:
        assert format_quantity(alternate) == expected
        assert parse_quantity(alternate) == value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1Ki", "1Ki"),
        ("1Mi", "1Mi"),
        ("1Gi", "1Gi"),
        ("1024Mi", "1Gi"),
        ("1000M", "1G"),
        (".001Ki", "1024m"),
        (".000001Ki", "1024u"),
        (".000000001Ki", "1024n"),
        (".000000000001Ki", "2n"),
        ("1.5Gi", "1536Mi"),  # quantity.go doc comment
        ("1.1Ki", "1126400m"),  # binary with a fraction prints as DecimalSI
    ],
)
def test_parse_emit(text: str, expected: str) -> None:
    # TestQuantityParseEmit, including the negative variants
    assert format_quantity(text) == expected
    assert format_quantity("-" + text) == "-" + expected


# ------------------------------------------------------------------------------------------------
# TestQuantityParse: text -> (value, format), and the same with "-" and "+" prefixes

MAX_INT64 = 2**63 - 1

QUANTITY_PARSE = [
    ("0", D(0), DECIMAL_SI),
    ("0n", D(0), DECIMAL_SI),
    ("0u", D(0), DECIMAL_SI),
    ("0m", D(0), DECIMAL_SI),
    ("0Ki", D(0), BINARY_SI),
    ("0k", D(0), DECIMAL_SI),
    ("0Mi", D(0), BINARY_SI),
    ("0M", D(0), DECIMAL_SI),
    ("0Gi", D(0), BINARY_SI),
    ("0G", D(0), DECIMAL_SI),
    ("0Ti", D(0), BINARY_SI),
    ("0T", D(0), DECIMAL_SI),
    ("1", D(1), DECIMAL_SI),
    ("1Ki", D(1024), BINARY_SI),
    ("8Ki", D(8 * 1024), BINARY_SI),
    ("7Mi", D(7 * 1024**2), BINARY_SI),
    ("6Gi", D(6 * 1024**3), BINARY_SI),
    ("5Ti", D(5 * 1024**4), BINARY_SI),
    ("4Pi", D(4 * 1024**5), BINARY_SI),
    ("3Ei", D(3 * 1024**6), BINARY_SI),
    ("10Ti", D(10 * 1024**4), BINARY_SI),
    ("100Ti", D(100 * 1024**4), BINARY_SI),
    ("5n", D("5e-9"), DECIMAL_SI),
    ("4u", D("4e-6"), DECIMAL_SI),
    ("3m", D("3e-3"), DECIMAL_SI),
    ("9", D(9), DECIMAL_SI),
    ("8k", D("8e3"), DECIMAL_SI),
    ("50k", D("5e4"), DECIMAL_SI),
    ("7M", D("7e6"), DECIMAL_SI),
    ("6G", D("6e9"), DECIMAL_SI),
    ("5T", D("5e12"), DECIMAL_SI),
    ("40T", D("4e13"), DECIMAL_SI),
    ("300T", D("3e14"), DECIMAL_SI),
    ("2P", D("2e15"), DECIMAL_SI),
    ("1E", D("1e18"), DECIMAL_SI),
    ("1E-3", D("1e-3"), DECIMAL_EXPONENT),
    ("1e3", D("1e3"), DECIMAL_EXPONENT),
    ("1E6", D("1e6"), DECIMAL_EXPONENT),
    ("1e9", D("1e9"), DECIMAL_EXPONENT),
    ("1E12", D("1e12"), DECIMAL_EXPONENT),
    ("1e15", D("1e15"), DECIMAL_EXPONENT),
    ("1E18", D("1e18"), DECIMAL_EXPONENT),
    ("1e14", D("1e14"), DECIMAL_EXPONENT),
    ("1e13", D("1e13"), DECIMAL_EXPONENT),
    ("100.035k", D(100035), DECIMAL_SI),
    ("0.001", D("1e-3"), DECIMAL_SI),
    ("0.0005k", D("5e-1"), DECIMAL_SI),
    ("0.005", D("5e-3"), DECIMAL_SI),
    ("0.05", D("5e-2"), DECIMAL_SI),
    ("0.5", D("5e-1"), DECIMAL_SI),
    ("0.00050k", D("5e-1"), DECIMAL_SI),
    ("0.00500", D("5e-3"), DECIMAL_SI),
    ("0.05000", D("5e-2"), DECIMAL_SI),
    ("0.50000", D("5e-1"), DECIMAL_SI),
    ("0.5e0", D("5e-1"), DECIMAL_EXPONENT),
    ("0.5e-1", D("5e-2"), DECIMAL_EXPONENT),
    ("0.5e-2", D("5e-3"), DECIMAL_EXPONENT),
    ("10.035M", D("10035e3"), DECIMAL_SI),
    ("1.2e3", D("12e2"), DECIMAL_EXPONENT),
    ("1.3E+6", D("13e5"), DECIMAL_EXPONENT),
    ("1.40e9", D("14e8"), DECIMAL_EXPONENT),
    ("1.53E12", D("153e10"), DECIMAL_EXPONENT),
    ("1.6e15", D("16e14"), DECIMAL_EXPONENT),
    ("1.7E18", D("17e17"), DECIMAL_EXPONENT),
    ("9.01", D("901e-2"), DECIMAL_SI),
    ("8.1k", D("81e2"), DECIMAL_SI),
    ("7.123456M", D(7123456), DECIMAL_SI),
    ("6.987654321G", D(6987654321), DECIMAL_SI),
    ("5.444T", D("5444e9"), DECIMAL_SI),
    ("40.1T", D("401e11"), DECIMAL_SI),
    ("300.2T", D("3002e11"), DECIMAL_SI),
    ("2.5P", D("25e14"), DECIMAL_SI),
    ("1.01E", D("101e16"), DECIMAL_SI),
    ("3.001n", D("4e-9"), DECIMAL_SI),
    ("1.1E-9", D("2e-9"), DECIMAL_EXPONENT),
    ("0.0000000001", D("1e-9"), DECIMAL_SI),
    ("0.0000000005", D("1e-9"), DECIMAL_SI),
    ("0.00000000050", D("1e-9"), DECIMAL_SI),
    ("0.5e-9", D("1e-9"), DECIMAL_EXPONENT),
    ("0.9n", D("1e-9"), DECIMAL_SI),
    ("0.00000012345", D("124e-9"), DECIMAL_SI),
    ("0.00000012354", D("124e-9"), DECIMAL_SI),
    ("9Ei", D(MAX_INT64), BINARY_SI),  # binary values are capped at 2^63-1
    ("9223372036854775807Ki", D(MAX_INT64), BINARY_SI),
    ("12E", D("12e18"), DECIMAL_SI),
    ("100.035Ki", D("10243584e-2"), BINARY_SI),
    ("0.5Mi", D(512 * 1024), BINARY_SI),
    ("0.05Gi", D("536870912e-1"), BINARY_SI),
    ("0.025Ti", D("274877906944e-1"), BINARY_SI),
    ("0.000000000001Ki", D("2e-9"), DECIMAL_SI),  # rounds up, changes format
    (".001", D("1e-3"), DECIMAL_SI),
    (".0001k", D("100e-3"), DECIMAL_SI),
    ("1.", D(1), DECIMAL_SI),
    ("1.G", D("1e9"), DECIMAL_SI),
    # docs/api.md §2.2 grammar examples
    ("+1", D(1), DECIMAL_SI),
    (".5", D("0.5"), DECIMAL_SI),
    ("1.5k", D(1500), DECIMAL_SI),
    ("18446744073709551616", D(2**64), DECIMAL_SI),  # DecimalSI is not capped
]


@pytest.mark.parametrize(("text", "value", "fmt"), QUANTITY_PARSE)
def test_quantity_parse(text: str, value: Decimal, fmt: str) -> None:
    assert parse_quantity_with_format(text) == (value, fmt)
    if text[0] in "+-":
        return
    assert parse_quantity("+" + text) == value
    negative, negative_fmt = parse_quantity_with_format("-" + text)
    assert negative == -value
    assert negative_fmt == fmt


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "regular expression"),
        ("1.1.M", "regular expression"),
        ("1+1.0M", "regular expression"),
        ("0.1mi", "suffix"),
        ("0.1am", "regular expression"),
        ("aoeu", "regular expression"),
        (".5i", "suffix"),
        ("1i", "suffix"),
        ("-3.01i", "suffix"),
        ("-3.01e-", "suffix"),
        (" 1", "regular expression"),  # leading and trailing whitespace is forbidden
        ("1 ", "regular expression"),
        ("1K", "suffix"),  # kilo is lower case
        ("1e", "suffix"),
        ("1e99999999999", "suffix"),  # exponent beyond int32
        ("1,5", "regular expression"),
        ("١", "regular expression"),  # non-ASCII digits are not digits here
        ("nan", "regular expression"),
        ("inf", "regular expression"),
    ],
)
def test_quantity_parse_invalid(text: str, reason: str) -> None:
    with pytest.raises(QuantityError, match=reason) as caught:
        parse_quantity(text)
    assert repr(text) in str(caught.value)  # the message names the bad input
    assert isinstance(caught.value, ValueError)


def test_parse_rejects_non_strings() -> None:
    with pytest.raises(QuantityError):
        parse_quantity(1.5)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", [".", "-.", "-", "+", "00", "-0", "0.0e5"])
def test_degenerate_zero_spellings_parse_as_upstream(text: str) -> None:
    # parseQuantityString scans "." and a lone sign as an empty number, which is zero (TestParseQuantityString)
    assert parse_quantity(text) == 0
    assert not parse_quantity(text).is_signed()


def test_huge_exponents_do_not_hang() -> None:
    assert parse_quantity("1e-2147483647") == D("1e-9")
    assert format_quantity("1e2147483647") == "10e2147483646"
    with pytest.raises(QuantityError):
        milli_value(parse_quantity("1e2147483647"))


# ------------------------------------------------------------------------------------------------
# TestMilliNewSet / TestNewSet


@pytest.mark.parametrize(
    ("milli", "fmt", "expected"),
    [
        (1, DECIMAL_SI, "1m"),
        (1000, DECIMAL_SI, "1"),
        (1234000, DECIMAL_SI, "1234"),
        (1024, BINARY_SI, "1024m"),  # format changes
        (1000000, DECIMAL_EXPONENT, "1e3"),  # upstream: invalid format defaults to exponent
        (1024 * 1024, BINARY_SI, "1048576m"),
    ],
)
def test_milli_new_set(milli: int, fmt: str, expected: str) -> None:
    assert format_quantity(D(milli).scaleb(-3), fmt) == expected
    assert milli_value(parse_quantity(expected)) == milli


@pytest.mark.parametrize(
    ("value", "fmt", "expected"),
    [
        (1, DECIMAL_SI, "1"),
        (1000, DECIMAL_SI, "1k"),
        (1234000, DECIMAL_SI, "1234k"),
        (1024, BINARY_SI, "1Ki"),
        (1000000, DECIMAL_EXPONENT, "1e6"),
        (1024 * 1024, BINARY_SI, "1Mi"),
    ],
)
def test_new_set(value: int, fmt: str, expected: str) -> None:
    assert format_quantity(value, fmt) == expected
    assert parse_quantity(expected) == value


def test_unknown_format_is_rejected() -> None:
    with pytest.raises(QuantityError, match="unknown quantity format"):
        format_quantity(1, "Binary")


# ------------------------------------------------------------------------------------------------
# milli_value


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("1n", 1),  # ceil
        ("-1n", -1),  # away from zero
        ("-1500u", -2),  # docs/api.md §2.2 [derived]
        ("1500u", 2),
        ("1.5", 1500),
        ("-1.5", -1500),
        ("0", 0),
        ("1k", 1_000_000),
        ("9223372036854775807m", MAX_INT64),
        ("-9223372036854775808m", -(2**63)),
        ("9P", 9 * 10**18),
    ],
)
def test_milli_value(text: str, milli: int) -> None:
    assert milli_value(parse_quantity(text)) == milli


@pytest.mark.parametrize("text", ["9223372036854775808m", "9300P", "1e19", "9Ei"])
def test_milli_value_overflow_is_an_error(text: str) -> None:
    with pytest.raises(QuantityError, match="int64"):
        milli_value(parse_quantity(text))


def test_milli_value_rejects_non_finite() -> None:
    with pytest.raises(QuantityError):
        milli_value(D("NaN"))
    with pytest.raises(QuantityError):
        milli_value(D("Infinity"))


# ------------------------------------------------------------------------------------------------
# format_milli (serving path)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.0005, "1m"),  # half up
        (-0.0005, "-1m"),  # half away from zero
        (0.00049, "0"),
        (1.0005, "1001m"),  # repr "1.0005"; float arithmetic would give 1000.4999...
        (2.0004999, "2"),
        (0.033333, "33m"),
        (2.675, "2675m"),
        (123456.7894, "123456789m"),
        (123456.7895, "123456790m"),
        (1e15, "1P"),
        (9e15, "9P"),
        (1e16, "9P"),  # clamped
        (1e300, "9P"),
        (-1e300, "-9P"),
        (10**30, "9P"),
        (-(10**30), "-9P"),
        (5, "5"),
        (True, "1"),
        (D("1.0005"), "1001m"),
        (D("-2.5e20"), "-9P"),
        (np.float64(1.5), "1500m"),
        (np.float32(0.5), "500m"),
        (np.int64(3000), "3k"),
        (1e-5, "0"),
        (-0.0, "0"),
    ],
)
def test_format_milli(value: object, expected: str) -> None:
    assert format_milli(value) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, D("NaN"), D("-Infinity"), np.float64("nan")])
def test_format_milli_rejects_non_finite(bad: object) -> None:
    with pytest.raises(ValueError, match="finite"):
        format_milli(bad)  # type: ignore[arg-type]
    with pytest.raises(QuantityError):
        format_quantity(bad)  # type: ignore[arg-type]


def test_format_quantity_rejects_junk() -> None:
    with pytest.raises(QuantityError):
        format_quantity(object())  # type: ignore[arg-type]
    with pytest.raises(QuantityError):
        format_quantity("1.5 k")


# ------------------------------------------------------------------------------------------------
# Property tests

_floats = (
    st.floats(allow_nan=False, allow_infinity=False)
    | st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)
    | st.integers(min_value=-(10**9), max_value=10**9).map(lambda n: n / 1000)  # exact-milli values
    | st.integers(min_value=-(10**9), max_value=10**9).map(lambda n: (n + 0.5) / 1000)  # ties
    | st.floats(min_value=8.9e15, max_value=9.1e15)
    | st.floats(min_value=-1e-3, max_value=1e-3)
)


@settings(max_examples=1000, deadline=None)
@given(_floats)
def test_format_milli_fast_path_equals_decimal_path(value: float) -> None:
    assert format_milli(value) == _format_milli_decimal(value)


@settings(max_examples=500, deadline=None)
@given(st.integers(min_value=-(10**20), max_value=10**20))
def test_format_milli_integers(value: int) -> None:
    assert format_milli(value) == _format_milli_decimal(value)
    if abs(value) < 2**53:  # exactly representable: the float takes the same route
        assert format_milli(float(value)) == format_milli(value)


@settings(max_examples=1000, deadline=None)
@given(_floats)
def test_format_milli_is_what_the_hpa_reads(value: float) -> None:
    # The HPA parses our string and takes MilliValue(): that must be the half-up milli of the value.
    clamped = max(-D(MILLI_CLAMP), min(D(MILLI_CLAMP), D(repr(value))))
    expected = clamped.quantize(D("0.001"), rounding=ROUND_HALF_UP) * 1000
    assert milli_value(parse_quantity(format_milli(value))) == int(expected)


_CANONICAL_DECIMAL_SI = re.compile(r"-?(0|[1-9][0-9]*)(n|u|m|k|M|G|T|P|E|e[0-9]+)?")


@settings(max_examples=400, deadline=None)
@given(st.decimals(allow_nan=False, allow_infinity=False, min_value=D("-1e25"), max_value=D("1e25"), places=None))
def test_canonical_form_properties(value: Decimal) -> None:
    text = format_quantity(value)
    assert _CANONICAL_DECIMAL_SI.fullmatch(text), text
    assert not text.startswith("-0")
    # exact at nano precision: parses back to the value rounded up (away from zero) to 1n
    with localcontext() as context:
        context.prec = 200  # exact arithmetic for these magnitudes
        rounded = value.scaleb(9).to_integral_value(rounding=ROUND_UP).scaleb(-9)
        assert parse_quantity(text) == rounded
    # largest suffix: the mantissa is not divisible by 1000 unless there is no larger suffix
    match = re.fullmatch(r"-?([0-9]+)(.*)", text)
    assert match is not None
    mantissa, suffix = int(match.group(1)), match.group(2)
    if mantissa and suffix not in ("E",) and not suffix.startswith("e"):
        assert mantissa % 1000 != 0, text
    # idempotent
    assert format_quantity(text) == text


@settings(max_examples=500, deadline=None)
@given(st.integers(min_value=-(2**62), max_value=2**62), st.sampled_from([BINARY_SI, DECIMAL_EXPONENT]))
def test_other_formats_roundtrip(value: int, fmt: str) -> None:
    text = format_quantity(value, fmt)
    parsed, parsed_fmt = parse_quantity_with_format(text)
    assert parsed == value
    # A BinarySI amount with no binary suffix (25000) reads back as DecimalSI, whose canonical form
    # differs ("25k"), exactly as upstream's ParseQuantity("25000").String().
    assert format_quantity(text, fmt) == text
    if fmt == BINARY_SI and value and value % 1024 == 0:  # otherwise there is no binary suffix to print
        assert parsed_fmt == BINARY_SI
        assert text[-1] == "i"
