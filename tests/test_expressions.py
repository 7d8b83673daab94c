"""Sandboxed expressions: what loads, what is rejected, runtime failures, and both paths agreeing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.errors import ValidationError
from adapter.expressions import ExpressionError, compile_expression


@pytest.mark.parametrize("text, values, expected", [
    ("scheduledMessage * 2", {"scheduledMessage": 50}, 100),
    ("ceil(upper * 1.1)", {"upper": 20}, 22),
    ("max(a, b) / 4", {"a": 2, "b": 8}, 2),
    ("min(a, b, 3)", {"a": 5, "b": 4}, 3),
    ("floor(a) + abs(-b) + round(2.5)", {"a": 1.7, "b": 2}, 5),  # round is half-to-even
    ("a ** 2 - a % 3 + a // 2", {"a": 7}, 49 - 1 + 3),
    ("a if a > 10 else 10", {"a": 4}, 10),
    ("a > 1 and b or 7", {"a": 2, "b": 0}, 7),
    ("5", {}, 5),
])
def test_evaluates(text: str, values: dict, expected: float) -> None:
    expr = compile_expression(text)
    assert expr.evaluate(values) == expected
    columns = {k: np.array([float(v)]) for k, v in values.items()}
    assert expr.evaluate_many(columns, 1)[0] == expected


@pytest.mark.parametrize("text, fragment", [
    ("__import__('os').system('x')", "unknown function"),
    ("a.__class__", "not allowed"),
    ("[x for x in a]", "not allowed"),
    ("lambda: 1", "not allowed"),
    ("'abc' * 3", "numeric constants"),
    ("open('f')", "unknown function"),
    ("a ** 1000", "exponent"),
    ("min(a)", "at least two"),
    ("ceil(a, b)", "takes 1 argument"),
    ("round(a, ndigits=2)", "keyword"),
    ("a +", "invalid expression"),
    ("", "empty"),
    ("x" * 2000, "longer than"),
    ("+".join(["a"] * 150), "more than"),
    ("1e999", "too large"),
    ("ceil", "is a function"),
])
def test_rejected_at_load_with_clear_message(text: str, fragment: str) -> None:
    with pytest.raises(ValidationError) as info:
        compile_expression(text, "spec.metrics[0].value.expression")
    assert fragment in str(info.value)
    assert "spec.metrics[0].value.expression" in str(info.value)


def test_unknown_names_rejected_when_source_declares_its_values() -> None:
    with pytest.raises(ValidationError, match="unknown name forcast"):
        compile_expression("forcast * 2", "p", frozenset({"forecast", "lower", "upper"}))
    assert compile_expression("upper * 1.1", "p", frozenset({"forecast", "lower", "upper"})).names == {"upper"}


@pytest.mark.parametrize("text, values", [
    ("a / b", {"a": 1, "b": 0}),
    ("a // b", {"a": 1, "b": 0}),
    ("a % b", {"a": 1, "b": 0}),
    ("a ** b", {"a": -8, "b": 0.5}),
    ("a * 1e17 * 1e17", {"a": 1}),
    ("missing + 1", {"a": 1}),
    ("a ** b", {"a": 2, "b": 100}),
])
def test_runtime_failures_raise_and_vectorised_gives_nan(text: str, values: dict) -> None:
    expr = compile_expression(text)
    with pytest.raises(ExpressionError):
        expr.evaluate(values)
    columns = {k: np.array([float(v)]) for k, v in values.items()}
    assert math.isnan(expr.evaluate_many(columns, 1)[0])


_expr = st.recursive(
    st.sampled_from(["a", "b", "2", "0.5", "3"]),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "//", "%"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(["min", "max"]), inner, inner).map(lambda t: f"{t[0]}({t[1]}, {t[2]})"),
        st.tuples(st.sampled_from(["abs", "ceil", "floor", "round"]), inner).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(inner, inner, inner).map(lambda t: f"({t[0]} if {t[1]} > {t[2]} else {t[2]})"),
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(_expr, st.floats(-100, 100, allow_nan=False), st.floats(-100, 100, allow_nan=False))
def test_scalar_and_vectorised_paths_agree(text: str, a: float, b: float) -> None:
    expr = compile_expression(text)
    vector = expr.evaluate_many({"a": np.array([a]), "b": np.array([b])}, 1)[0]
    try:
        scalar = expr.evaluate({"a": a, "b": b})
    except ExpressionError:
        assert math.isnan(vector)
        return
    assert vector == pytest.approx(scalar, rel=1e-12, abs=1e-12)
