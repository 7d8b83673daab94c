"""Sandboxed expressions that turn an item's values into one contribution (docs/semantics.md §2-§3).

`scheduledMessage * 2`, `ceil(upper * 1.1)`, `max(a, b) / 3`.

Safety model: `simpleeval` is the sandbox (no imports, no attribute access, no comprehensions), and on
top of it we accept only a whitelisted arithmetic subset of the AST, checked once when the object
loads: numbers, names, + - * / // % **, unary +/-, comparisons, `x if c else y`, `and`/`or`/`not`, and
calls of min max abs ceil floor round. Expression length, node count, exponent size and magnitudes are
bounded, so evaluation cost is bounded too.

Evaluation has two paths over the same validated AST:
- `evaluate(values)`: one item, through simpleeval (used for previews and explanations);
- `evaluate_many(columns)`: a whole snapshot at once with numpy, because a source may return
  100 000 items and the timeline must be rebuilt in well under a second.
Property tests check that both agree. A failure (unknown name, division by zero, non-finite result)
drops that one contribution and is reported; it never affects other contributions.
"""

from __future__ import annotations

import ast
import functools
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpleeval

from adapter.errors import ValidationError

MAX_EXPRESSION_LENGTH = 1000
MAX_NODES = 200
MAX_EXPONENT = 64.0
MAX_MAGNITUDE = 1e18  # results beyond this are treated as overflow

FUNCTION_NAMES = ("min", "max", "abs", "ceil", "floor", "round")

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CMPOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_ALLOWED_NODES = (
    ast.Expression,
    ast.BinOp,
    ast.UnaryOp,
    ast.Compare,
    ast.IfExp,
    ast.BoolOp,
    ast.Call,
    ast.Name,
    ast.Load,
    ast.Constant,
    ast.USub,
    ast.UAdd,
    ast.Not,
    ast.And,
    ast.Or,
    *_BINOPS,
    *_CMPOPS,
)


class ExpressionError(ArithmeticError):
    """A runtime failure of one evaluation (the contribution is dropped and reported)."""


def _bounded_pow(base: float, exponent: float) -> float:
    if abs(exponent) > MAX_EXPONENT:
        raise ExpressionError(f"exponent {exponent:g} is larger than {MAX_EXPONENT:g}")
    result = float(base) ** float(exponent)
    if isinstance(result, complex):
        raise ExpressionError("power of a negative number gives no real result")
    return result


def _scalar_round(value: float, ndigits: float | None = None) -> float:
    # Python's round() is half-to-even, as numpy's; keep that so both paths agree.
    return float(round(value, int(ndigits))) if ndigits is not None else float(round(value))


_SCALAR_FUNCTIONS: dict[str, Callable[..., float]] = {
    "min": lambda *a: float(min(a)),
    "max": lambda *a: float(max(a)),
    "abs": lambda x: float(abs(x)),
    "ceil": lambda x: float(math.ceil(x)),
    "floor": lambda x: float(math.floor(x)),
    "round": _scalar_round,
}


@dataclass(frozen=True)
class CompiledExpression:
    text: str
    names: frozenset[str]
    tree: ast.Expression

    def evaluate(self, values: Mapping[str, float]) -> float:
        """One evaluation through the simpleeval sandbox. Raises ExpressionError."""
        missing = self.names.difference(values)
        if missing:
            raise ExpressionError(f"item has no value named {', '.join(sorted(missing))}")
        evaluator = simpleeval.SimpleEval(names=dict(values), functions=_SCALAR_FUNCTIONS)
        evaluator.operators = {**evaluator.operators, ast.Pow: _bounded_pow}
        try:
            return _finite(evaluator.eval(self.text, previously_parsed=self.tree.body))
        except ExpressionError:
            raise
        except simpleeval.InvalidExpression as exc:
            raise ExpressionError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - whatever the type, only this contribution fails
            # OverflowError (int too large for a float, round(x, 10**20)), ZeroDivisionError,
            # ValueError, TypeError, MemoryError, RecursionError...: the caller drops this one value.
            raise ExpressionError(_describe(exc)) from None

    def evaluate_many(self, columns: Mapping[str, np.ndarray], size: int) -> np.ndarray:
        """Vectorised evaluation over `size` items. Missing/failed entries come back as NaN."""
        for name in self.names:
            if name not in columns:
                return np.full(size, np.nan)
        try:
            with np.errstate(all="ignore"):
                values, failed = _vector_eval(self.tree.body, columns)
                result = np.broadcast_to(np.asarray(values, dtype=float), (size,)).astype(float)
                failed = np.broadcast_to(np.asarray(failed, dtype=bool), (size,))
                ok = ~failed & np.isfinite(result) & (np.abs(result) <= MAX_MAGNITUDE)
            return np.where(ok, result, np.nan)
        except Exception:  # noqa: BLE001 - never escapes: fall back to one item at a time
            return self._evaluate_each(columns, size)

    def _evaluate_each(self, columns: Mapping[str, np.ndarray], size: int) -> np.ndarray:
        """The scalar path item by item, each failure dropping only its own item (NaN)."""
        out = np.full(size, np.nan)
        names = sorted(self.names)
        for index in range(size):
            try:
                out[index] = self.evaluate({name: float(columns[name][index]) for name in names})
            except Exception:  # noqa: BLE001, S112 - ExpressionError or a malformed column: drop it
                continue
        return out


def compile_expression(text: str, path: str = "", known_names: frozenset[str] | None = None) -> CompiledExpression:
    """Parse and validate once, at load time. Raises ValidationError(path, message).

    Results are cached by text: a VirtualMetricEvent with 1 000 entries usually repeats a few
    expressions, and a CompiledExpression is immutable."""
    if not isinstance(text, str):
        raise ValidationError(path, f"expression must be a string, got {type(text).__name__}")
    try:
        return _compile_cached(text, known_names)
    except ValidationError as exc:
        raise ValidationError(path, exc.detail) from None


@functools.lru_cache(maxsize=4096)
def _compile_cached(text: str, known_names: frozenset[str] | None) -> CompiledExpression:
    return _compile(text, "", known_names)


def _compile(text: str, path: str, known_names: frozenset[str] | None) -> CompiledExpression:
    if not isinstance(text, str) or not text.strip():
        raise ValidationError(path, "expression is empty")
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise ValidationError(path, f"expression is longer than {MAX_EXPRESSION_LENGTH} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValidationError(path, f"invalid expression {text!r}: {exc.msg} at column {exc.offset}") from None
    except (ValueError, MemoryError, RecursionError) as exc:  # NUL bytes, nesting beyond the parser
        raise ValidationError(path, f"invalid expression: {_describe(exc)}") from None
    nodes = list(ast.walk(tree))
    if len(nodes) > MAX_NODES:
        raise ValidationError(path, f"expression has more than {MAX_NODES} parts")
    names: set[str] = set()
    for node in nodes:
        if not isinstance(node, _ALLOWED_NODES):
            raise ValidationError(
                path,
                f"{_node_text(node)} is not allowed in expressions "
                "(only numbers, value names, + - * / // % **, comparisons, "
                "'x if c else y' and " + ", ".join(FUNCTION_NAMES) + ")",
            )
        if isinstance(node, ast.Constant) and (
            isinstance(node.value, bool) or not isinstance(node.value, (int, float))
        ):
            raise ValidationError(path, f"only numeric constants are allowed, got {node.value!r}")
        if isinstance(node, ast.Constant) and not _literal_in_range(node.value):
            raise ValidationError(
                path,
                f"constant {_short(node.value)} is too large: numbers in expressions "
                f"must be finite and within ±{MAX_MAGNITUDE:g}",
            )
        if isinstance(node, ast.Call):
            _check_call(node, path)
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Pow)
            and isinstance(node.right, ast.Constant)
            and _literal_in_range(node.right.value)
            and abs(node.right.value) > MAX_EXPONENT  # type: ignore[arg-type]
        ):
            raise ValidationError(path, f"exponent {node.right.value!r} is larger than {MAX_EXPONENT:g}")
        if isinstance(node, ast.Name) and not _is_function_position(node, tree):
            if node.id in FUNCTION_NAMES:
                raise ValidationError(path, f"{node.id} is a function; call it like {node.id}(x)")
            names.add(node.id)
    if known_names is not None:
        unknown = names.difference(known_names)
        if unknown:
            raise ValidationError(
                path,
                f"unknown name {', '.join(sorted(unknown))}: this source provides "
                + (", ".join(sorted(known_names)) or "no values"),
            )
    return CompiledExpression(text=text.strip(), names=frozenset(names), tree=tree)


def _literal_in_range(value: object) -> bool:
    """A numeric literal that is finite and within ±MAX_MAGNITUDE. Integers are compared as
    integers: float() of a 309-digit literal raises OverflowError instead of answering."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, int):
        return abs(value) <= MAX_MAGNITUDE
    return math.isfinite(value) and abs(value) <= MAX_MAGNITUDE


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"


def _check_call(node: ast.Call, path: str) -> None:
    if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTION_NAMES:
        raise ValidationError(
            path, f"unknown function {_node_text(node.func)}: allowed are " + ", ".join(FUNCTION_NAMES)
        )
    if node.keywords:
        raise ValidationError(path, f"{node.func.id}() takes no keyword arguments")
    count = len(node.args)
    arity = {"min": (1, 64), "max": (1, 64), "abs": (1, 1), "ceil": (1, 1), "floor": (1, 1), "round": (1, 2)}
    low, high = arity[node.func.id]
    if not low <= count <= high:
        raise ValidationError(
            path,
            f"{node.func.id}() takes {low if low == high else f'{low} to {high}'} "
            f"argument{'s' if high > 1 else ''}, got {count}",
        )
    if node.func.id in ("min", "max") and count == 1:
        raise ValidationError(path, f"{node.func.id}() needs at least two arguments")
    if any(isinstance(arg, ast.Starred) for arg in node.args):
        raise ValidationError(path, "*args are not allowed")


def _is_function_position(name: ast.Name, tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.func is name:
            return True
    return False


def _node_text(node: ast.AST) -> str:
    try:
        return repr(ast.unparse(node))
    except Exception:  # noqa: BLE001 - only for messages
        return type(node).__name__


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ZeroDivisionError):
        return "division by zero"
    if isinstance(exc, OverflowError):
        return "numeric overflow"
    return str(exc) or type(exc).__name__


def _finite(result: Any) -> float:
    if isinstance(result, bool):
        result = float(result)
    if not isinstance(result, (int, float)):
        raise ExpressionError(f"result is not a number: {type(result).__name__}")
    value = float(result)
    if not math.isfinite(value) or abs(value) > MAX_MAGNITUDE:
        raise ExpressionError(f"result {value!r} is not a finite number within ±{MAX_MAGNITUDE:g}")
    return value


# ---------------------------------------------------------------- numpy evaluation of the same AST


def _vector_eval(node: ast.AST, columns: Mapping[str, np.ndarray]) -> tuple[Any, Any]:
    """(values, failed): `failed` marks items whose scalar evaluation would have raised, honouring
    Python's lazy evaluation of `x if c else y`, `and` and `or` (so `a / b if b else 0` is safe)."""
    if isinstance(node, ast.Constant):
        return float(node.value), False  # type: ignore[arg-type]  # numeric: checked at compile time
    if isinstance(node, ast.Name):
        column = columns[node.id]
        return column, ~np.isfinite(column)
    if isinstance(node, ast.UnaryOp):
        operand, bad = _vector_eval(node.operand, columns)
        if isinstance(node.op, ast.USub):
            return -operand, bad
        if isinstance(node.op, ast.UAdd):
            return +operand, bad
        return np.where(np.asarray(operand) != 0, 0.0, 1.0), bad  # not
    if isinstance(node, ast.BinOp):
        (left, bad_l), (right, bad_r) = _vector_eval(node.left, columns), _vector_eval(node.right, columns)
        left_arr, right_arr = np.asarray(left, dtype=float), np.asarray(right, dtype=float)
        bad = bad_l | bad_r
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)):
            bad = bad | (right_arr == 0)  # Python raises ZeroDivisionError
        out = _BINOPS[type(node.op)](left_arr, right_arr)
        if isinstance(node.op, ast.Pow):
            # Python raises for huge exponents (our bound), overflow and negative bases with fractions.
            bad = bad | (np.abs(right_arr) > MAX_EXPONENT) | (np.isfinite(left_arr) & ~np.isfinite(out))
        return out, bad
    if isinstance(node, ast.Compare):
        result: Any = True
        left, bad = _vector_eval(node.left, columns)
        for op, comparator in zip(node.ops, node.comparators):
            right, bad_r = _vector_eval(comparator, columns)
            result = np.logical_and(result, _CMPOPS[type(op)](left, right))
            bad = bad | bad_r
            left = right
        return np.asarray(result, dtype=float), bad
    if isinstance(node, ast.IfExp):
        test, bad_t = _vector_eval(node.test, columns)
        chosen = np.asarray(test) != 0
        body, bad_b = _vector_eval(node.body, columns)
        other, bad_o = _vector_eval(node.orelse, columns)
        return np.where(chosen, body, other), bad_t | np.where(chosen, bad_b, bad_o)
    if isinstance(node, ast.BoolOp):
        # Python returns an operand, not a bool, and stops at the first deciding operand.
        evaluated = [_vector_eval(v, columns) for v in node.values]
        result, bad = evaluated[-1]
        for value, bad_v in reversed(evaluated[:-1]):
            truthy = np.asarray(value) != 0
            decides = ~truthy if isinstance(node.op, ast.And) else truthy
            result = np.where(decides, value, result)
            bad = bad_v | np.where(decides, False, bad)
        return result, bad
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        pairs = [_vector_eval(a, columns) for a in node.args]
        args = [p[0] for p in pairs]
        bad = False
        for _, bad_a in pairs:
            bad = bad | bad_a
        name = node.func.id
        if name == "min":
            return _reduce(np.minimum, args), bad
        if name == "max":
            return _reduce(np.maximum, args), bad
        if name == "abs":
            return np.abs(args[0]), bad
        if name == "ceil":
            return np.ceil(args[0]), bad
        if name == "floor":
            return np.floor(args[0]), bad
        if len(args) == 2:
            out, bad_round = _vector_round(args[0], args[1])
            return out, bad | bad_round
        return np.round(args[0]), bad
    raise ExpressionError(f"unsupported expression part {type(node).__name__}")


# np.round(x, d) multiplies by 10**d; beyond this many digits that overflows where Python's round()
# still answers, so such digit counts go through the scalar rule.
_NUMPY_ROUND_DIGITS = 15


def _vector_round(values: Any, digits: Any) -> tuple[Any, Any]:
    """round(x, d) over arrays: numpy for ordinary digit counts, Python's own rule (and its errors:
    OverflowError for d beyond a C ssize_t, ValueError/OverflowError for a NaN or infinite d, marked
    failed) for the rest."""
    x = np.asarray(values, dtype=float)
    d = np.asarray(digits, dtype=float)
    if d.ndim == 0 and math.isfinite(float(d)) and abs(float(d)) <= _NUMPY_ROUND_DIGITS:
        return np.round(x, int(d)), False
    xs, ds = np.broadcast_arrays(x, d)
    out = np.full(xs.shape, np.nan)
    bad = np.zeros(xs.shape, dtype=bool)
    for index, (value, ndigits) in enumerate(zip(xs.flat, ds.flat)):
        try:
            out.flat[index] = _scalar_round(float(value), float(ndigits))
        except (OverflowError, ValueError):
            bad.flat[index] = True
    return out, bad


def _reduce(func: Callable[[Any, Any], Any], args: list[Any]) -> Any:
    result = args[0]
    for arg in args[1:]:
        result = func(result, arg)
    return result
