"""Kubernetes label selectors: parse, match and print them the way apimachinery does.

The HPA sends ``?labelSelector=<text>`` where ``<text>`` is ``labels.Selector.String()`` of the
metric selector in its spec (docs/api.md §4). This module is a Python re-implementation of
k8s.io/apimachinery ``pkg/labels/selector.go`` (its Lexer, Parser and ``NewRequirement``):

* the grammar is the same (``=``, ``==``, ``!=``, ``in (..)``, ``notin (..)``, ``k``, ``!k``, ``k>5``,
  ``k<5``; requirements separated by ``,`` and ANDed; blanks are `` \\t\\r\\n``; ``""`` selects all);
* the quirks are the same, because a selector that Kubernetes accepts must not give a 400 here and
  vice versa: ``k in ()`` means ``k in ("")``, ``k=`` means ``k=""``, the words ``in``/``notin`` are
  ordinary identifiers in key and value position (``in in (in)``), ``(a,,)`` is an error, and a NUL
  character ends the input (Go's lexer reads a 0 byte as end of string);
* error messages copy upstream's wording (``found '%s', expected: ...`` from the parser,
  ``values[0][k]: Invalid value: "...": ...`` from validation) so a 400 reads like kube-apiserver's.

Parsing is memoised (:func:`parse_selector` is an ``lru_cache``): every HPA re-sends the same
selector every 15 s, so the steady-state cost of a GET is one dict lookup.

Size is bounded, because a selector arrives from any client before anything else limits it: at most
MAX_SELECTOR_LENGTH characters, MAX_REQUIREMENTS terms and MAX_VALUES values in all. A larger one is
a :class:`SelectorError` (a 400 ``Status``), not the 1.5 MB answer it would select. (apimachinery
has no such limits; its URLs are bounded by the request size instead. Real HPA selectors are a few
terms.) Only selectors of up to MAX_CACHED_LENGTH characters are memoised, so the cache stays small.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping

__all__ = [
    "EVERYTHING",
    "OPERATORS",
    "Requirement",
    "Selector",
    "SelectorError",
    "parse_query_selector",
    "parse_selector",
]


class SelectorError(ValueError):
    """A label selector that Kubernetes would reject; ``str(err)`` is the upstream-style message."""


MAX_SELECTOR_LENGTH = 8192
MAX_REQUIREMENTS = 64
MAX_VALUES = 256
MAX_CACHED_LENGTH = 1024


# Operator spellings are selection.Operator's string values (AM pkg/selection/operator.go).
EQUALS, DOUBLE_EQUALS, NOT_EQUALS = "=", "==", "!="
IN, NOT_IN = "in", "notin"
EXISTS, DOES_NOT_EXIST = "exists", "!"
GREATER_THAN, LESS_THAN = "gt", "lt"
_BINARY_OPERATORS = (IN, NOT_IN, EQUALS, DOUBLE_EQUALS, NOT_EQUALS, GREATER_THAN, LESS_THAN)
OPERATORS = (*_BINARY_OPERATORS, EXISTS, DOES_NOT_EXIST)
_POSITIVE_SET_OPS = frozenset((EQUALS, DOUBLE_EQUALS, IN))
_NEGATIVE_SET_OPS = frozenset((NOT_EQUALS, NOT_IN))

_MISSING = object()
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_GO_INT_RE = re.compile(r"[+-]?[0-9]+")  # strconv.ParseInt(s, 10, 64) syntax: no '_', no blanks


def _parse_int64(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64), or None where Go returns an error."""
    return None if int64_error(text) else int(text)


def int64_error(text: str) -> str | None:
    """The error strconv.ParseInt(text, 10, 64) gives ("invalid syntax", "value out of range"), or
    None when it parses."""
    if not _GO_INT_RE.fullmatch(text):
        return "invalid syntax"
    return None if _INT64_MIN <= int(text) <= _INT64_MAX else "value out of range"


def is_dns1123_label(value: str) -> bool:
    """A DNS-1123 label (a namespace name): at most 63 characters of [a-z0-9-], alphanumeric at both ends."""
    return len(value) <= _NAME_MAX and _DNS1123_LABEL_RE.fullmatch(value) is not None


# --------------------------------------------------------------------------------------------------
# Validation (AM pkg/util/validation/validation.go), with upstream's messages.

_QNAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QNAME_RE = re.compile(_QNAME_FMT)
_QNAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_LABEL_VALUE_FMT = "(" + _QNAME_FMT + ")?"
_LABEL_VALUE_RE = re.compile(_LABEL_VALUE_FMT)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_RE = re.compile(_DNS1123_SUBDOMAIN_FMT)
_DNS1123_LABEL_RE = re.compile(_DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)
_NAME_MAX, _LABEL_VALUE_MAX, _DNS1123_SUBDOMAIN_MAX = 63, 63, 253


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    # validation.RegexError, including its odd "',  or '" spacing, which users grep for.
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    listed = " or ".join(f"'{example}', " for example in examples)
    return f"{msg} (e.g. {listed}regex used for validation is '{fmt}')"


def _max_len_error(length: int) -> str:
    return f"must be no more than {length} characters"


def _byte_len(text: str) -> int:
    # Go's len() counts UTF-8 bytes; the limits are byte limits.
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _qualified_name_errors(value: str) -> list[str]:
    """validation.IsQualifiedName: ``[prefix/]name``; empty list when valid."""
    errors: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            if _byte_len(prefix) > _DNS1123_SUBDOMAIN_MAX:
                errors.append("prefix part " + _max_len_error(_DNS1123_SUBDOMAIN_MAX))
            if not _DNS1123_SUBDOMAIN_RE.fullmatch(prefix):
                errors.append(
                    "prefix part " + _regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com")
                )
    else:
        return [
            "a qualified name "
            + _regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errors.append("name part must be non-empty")
    elif _byte_len(name) > _NAME_MAX:
        errors.append("name part " + _max_len_error(_NAME_MAX))
    if not _QNAME_RE.fullmatch(name):
        errors.append("name part " + _regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc"))
    return errors


def is_label_value(value: str) -> bool:
    """validation.IsValidLabelValue as a yes or no, in one regex match (the pattern is ASCII only, so
    its length in characters is its length in bytes)."""
    return len(value) <= _LABEL_VALUE_MAX and _LABEL_VALUE_RE.fullmatch(value) is not None


def _label_value_errors(value: str) -> list[str]:
    """validation.IsValidLabelValue; empty list when valid."""
    errors: list[str] = []
    if _byte_len(value) > _LABEL_VALUE_MAX:
        errors.append(_max_len_error(_LABEL_VALUE_MAX))
    if not _LABEL_VALUE_RE.fullmatch(value):
        errors.append(_regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errors


_GO_ESCAPES = {
    "\\": "\\\\",
    '"': '\\"',
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}


def go_quote(text: str) -> str:
    """Approximates Go's %q (strconv.Quote) so messages show odd characters the way Go does."""
    out = ['"']
    for char in text:
        if char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        elif ord(char) < 0x100:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) < 0x10000:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    out.append('"')
    return "".join(out)


def _go_string_slice(values: Iterable[str]) -> str:
    # %#v of a []string, used when the value list as a whole is invalid
    return "[]string{" + ", ".join(go_quote(v) for v in values) + "}"


def _invalid(path: str, shown_value: str, detail: str) -> str:
    # field.Invalid(...).Error(); a nil *field.Path prints as "<nil>"
    return f"{path}: Invalid value: {shown_value}: {detail}"


def _aggregate(messages: list[str]) -> str:
    # utilerrors.NewAggregate(...).Error(): one message as is, several de-duplicated in brackets
    unique = list(dict.fromkeys(messages))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


def _key_error(key: str, path: str) -> str | None:
    errors = _qualified_name_errors(key)
    return _invalid(path, go_quote(key), "; ".join(errors)) if errors else None


# --------------------------------------------------------------------------------------------------
# Requirement and Selector


class Requirement:
    """One ``key <operator> values`` term. Immutable; construction validates like NewRequirement.

    ``values`` is sorted and de-duplicated (upstream's parser collects them in a string set), so two
    requirements with the same meaning compare equal.
    """

    __slots__ = ("_bound", "_value_set", "key", "operator", "values")

    key: str
    operator: str
    values: tuple[str, ...]
    _value_set: frozenset[str]  # for O(1) membership in matches()
    _bound: int | None  # the parsed integer of gt / lt

    def __init__(self, key: str, operator: str, values: Iterable[str] = (), *, _key_checked: bool = False) -> None:
        given = list(values)
        problems = _requirement_errors(key, operator, given, check_key=not _key_checked)
        if problems:
            raise SelectorError(_aggregate(problems))
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "operator", operator)
        object.__setattr__(self, "values", tuple(sorted(set(given))))
        object.__setattr__(self, "_value_set", frozenset(given))
        bound = _parse_int64(given[0]) if operator in (GREATER_THAN, LESS_THAN) else None
        object.__setattr__(self, "_bound", bound)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Requirement is immutable")

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Requirement.Matches (selector.go): ``!=``/``notin`` also match an absent label."""
        op = self.operator
        value = labels.get(self.key, _MISSING)
        if op in _POSITIVE_SET_OPS:
            return value is not _MISSING and value in self._value_set
        if op in _NEGATIVE_SET_OPS:
            return value is _MISSING or value not in self._value_set
        if op == EXISTS:
            return value is not _MISSING
        if op == DOES_NOT_EXIST:
            return value is _MISSING
        # gt / lt: the label must be present and hold an int64
        if value is _MISSING or not isinstance(value, str):
            return False
        number = _parse_int64(value)
        if number is None:
            return False
        assert self._bound is not None  # validated in __init__
        return number > self._bound if op == GREATER_THAN else number < self._bound

    def __str__(self) -> str:
        op = self.operator
        if op == EXISTS:
            return self.key
        if op == DOES_NOT_EXIST:
            return "!" + self.key
        joined = ",".join(self.values)
        if op in (IN, NOT_IN):
            return f"{self.key} {op} ({joined})"
        symbol = {GREATER_THAN: ">", LESS_THAN: "<"}.get(op, op)
        return f"{self.key}{symbol}{joined}"

    def __repr__(self) -> str:
        return f"Requirement({self.key!r}, {self.operator!r}, {self.values!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Requirement):
            return NotImplemented
        return (self.key, self.operator, self.values) == (other.key, other.operator, other.values)

    def __hash__(self) -> int:
        return hash((self.key, self.operator, self.values))


def _requirement_errors(key: str, operator: str, values: list[str], check_key: bool = True) -> list[str]:
    """NewRequirement's checks, in its order, with its field paths (parser path is nil)."""
    problems: list[str] = []
    if not isinstance(key, str) or not all(isinstance(v, str) for v in values):
        return ["key and values must be strings"]
    key_problem = _key_error(key, "key") if check_key else None
    if key_problem:
        problems.append(key_problem)
    if operator in (IN, NOT_IN):
        if not values:
            problems.append(
                _invalid("values", _go_string_slice(values), "for 'in', 'notin' operators, values set can't be empty")
            )
    elif operator in (EQUALS, DOUBLE_EQUALS, NOT_EQUALS):
        if len(values) != 1:
            problems.append(
                _invalid("values", _go_string_slice(values), "exact-match compatibility requires one single value")
            )
    elif operator in (EXISTS, DOES_NOT_EXIST):
        if values:
            problems.append(
                _invalid("values", _go_string_slice(values), "values set must be empty for exists and does not exist")
            )
    elif operator in (GREATER_THAN, LESS_THAN):
        if len(values) != 1:
            problems.append(
                _invalid("values", _go_string_slice(values), "for 'Gt', 'Lt' operators, exactly one value is required")
            )
        for index, value in enumerate(values):
            if _parse_int64(value) is None:
                problems.append(
                    _invalid(
                        f"values[{index}]", go_quote(value), "for 'Gt', 'Lt' operators, the value must be an integer"
                    )
                )
    else:
        supported = ", ".join(go_quote(op) for op in OPERATORS)
        problems.append(f"operator: Unsupported value: {go_quote(str(operator))}: supported values: {supported}")
    for index, value in enumerate(values):
        errors = _label_value_errors(value)
        if errors:
            problems.append(_invalid(f"values[{index}][{key}]", go_quote(value), "; ".join(errors)))
    return problems


class Selector:
    """A conjunction of requirements, kept sorted by key (stable), as upstream's internalSelector."""

    __slots__ = ("requirements",)

    requirements: tuple[Requirement, ...]

    def __init__(self, requirements: Iterable[Requirement] = ()) -> None:
        ordered = tuple(sorted(requirements, key=lambda requirement: requirement.key))
        object.__setattr__(self, "requirements", ordered)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Selector is immutable")

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """True when every requirement matches; ``None`` labels count as an empty label set."""
        if labels is None:
            labels = {}
        for requirement in self.requirements:
            if not requirement.matches(labels):
                return False
        return True

    @property
    def empty(self) -> bool:
        """True when the selector does not restrict anything (Everything(), from ``""``)."""
        return not self.requirements

    def equality_values(self, key: str) -> set[str] | None:
        """The values ``key`` must have in any label set this selector matches.

        ``None`` when no ``=``/``==``/``in`` requirement pins the key. Otherwise the intersection of
        the pinned value sets, minus values that the key's other requirements (``!=``, ``notin``,
        ``!k``, ``>``, ``<``) rule out, so an empty set means no label set can match. The server
        uses it to synthesise targets named in a selector (``resource=service-a``).
        """
        pinned: set[str] | None = None
        for requirement in self.requirements:
            if requirement.key == key and requirement.operator in _POSITIVE_SET_OPS:
                values = set(requirement.values)
                pinned = values if pinned is None else pinned & values
        if pinned is None:
            return None
        return {value for value in pinned if all(r.matches({key: value}) for r in self.requirements if r.key == key)}

    def __str__(self) -> str:
        return ",".join(str(requirement) for requirement in self.requirements)

    def __repr__(self) -> str:
        return f"Selector({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Selector):
            return NotImplemented
        return self.requirements == other.requirements

    def __hash__(self) -> int:
        return hash(self.requirements)


EVERYTHING = Selector()


# --------------------------------------------------------------------------------------------------
# Lexer (selector.go Lexer): tokens are (kind, literal)

_END, _CLOSE_PAR, _COMMA, _NOT, _DOUBLE_EQUALS, _EQUALS, _GT = range(7)
_IDENTIFIER, _IN, _LT, _NOT_EQUALS, _NOT_IN, _OPEN_PAR = range(7, 13)
_LITERAL_TOKENS = {
    ")": _CLOSE_PAR,
    ",": _COMMA,
    "!": _NOT,
    "==": _DOUBLE_EQUALS,
    "=": _EQUALS,
    ">": _GT,
    "in": _IN,
    "<": _LT,
    "!=": _NOT_EQUALS,
    "notin": _NOT_IN,
    "(": _OPEN_PAR,
}
Token = tuple[int, str]


# One token per match: blanks, then either an operator or an identifier (a run of anything else).
# For operators upstream takes the longest run of special characters that is still a known token;
# the only two-character tokens are "!=" and "==", so trying them before the single characters is
# the same thing ("!==" is "!=" then "=").
_TOKEN_RE = re.compile(r"[ \t\r\n]*(?:(!=|==|[=!(),><])|([^=!(),>< \t\r\n]+))?")


def _lex(text: str) -> list[Token]:
    tokens: list[Token] = []
    end = len(text)
    pos = 0
    match = _TOKEN_RE.match
    while True:
        found = match(text, pos)
        assert found is not None  # the pattern can match the empty string
        pos = found.end()
        symbol, word = found.group(1, 2)
        if symbol is not None:
            tokens.append((_LITERAL_TOKENS[symbol], symbol))
        elif word is not None:
            tokens.append((_LITERAL_TOKENS.get(word, _IDENTIFIER), word))
        else:
            assert pos == end  # only blanks were left
            tokens.append((_END, ""))
            return tokens


# --------------------------------------------------------------------------------------------------
# Parser (selector.go Parser): recursive descent over the token list, same error texts.


class _Parser:
    __slots__ = ("position", "tokens", "values")

    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.position = 0
        self.values = 0

    def _peek(self, values_context: bool = True) -> Token:
        kind, literal = self.tokens[self.position]
        # In value (and key) position "in"/"notin" are plain identifiers.
        if values_context and kind in (_IN, _NOT_IN):
            kind = _IDENTIFIER
        return kind, literal

    def _next(self, values_context: bool = True) -> Token:
        token = self._peek(values_context)
        self.position += 1
        return token

    def parse(self) -> list[Requirement]:
        requirements: list[Requirement] = []
        while True:
            kind, literal = self._peek()
            if kind in (_IDENTIFIER, _NOT):
                try:
                    requirement = self._requirement()
                except SelectorError as error:
                    raise SelectorError(f"unable to parse requirement: {error}") from None
                requirements.append(requirement)
                self.values += len(requirement.values)
                if len(requirements) > MAX_REQUIREMENTS:
                    raise SelectorError(f"label selector has more than {MAX_REQUIREMENTS} requirements")
                if self.values > MAX_VALUES:
                    raise SelectorError(f"label selector has more than {MAX_VALUES} values in all")
                kind, literal = self._next()
                if kind == _END:
                    return requirements
                if kind == _COMMA:
                    next_kind, next_literal = self._peek()
                    if next_kind not in (_IDENTIFIER, _NOT):
                        raise SelectorError(f"found '{next_literal}', expected: identifier after ','")
                else:
                    raise SelectorError(f"found '{literal}', expected: ',' or 'end of string'")
            elif kind == _END:
                return requirements
            else:
                raise SelectorError(f"found '{literal}', expected: !, identifier, or 'end of string'")

    def _requirement(self) -> Requirement:
        key, operator = self._key_and_inferred_operator()
        if operator in (EXISTS, DOES_NOT_EXIST):
            return Requirement(key, operator, (), _key_checked=True)
        operator = self._operator()
        values = self._value_set() if operator in (IN, NOT_IN) else self._exact_value()
        return Requirement(key, operator, sorted(values), _key_checked=True)

    def _key_and_inferred_operator(self) -> tuple[str, str | None]:
        operator: str | None = None
        kind, literal = self._next()
        if kind == _NOT:
            operator = DOES_NOT_EXIST
            kind, literal = self._next()
        if kind != _IDENTIFIER:
            raise SelectorError(f"found '{literal}', expected: identifier")
        problem = _key_error(literal, "<nil>")
        if problem:
            raise SelectorError(problem)
        if self._peek()[0] in (_END, _COMMA) and operator is None:
            operator = EXISTS
        # "!k=v": upstream keeps DoesNotExist and then trips over "=" in parse(); so do we.
        return literal, operator

    def _operator(self) -> str:
        kind, literal = self._next(values_context=False)
        operator = {
            _IN: IN,
            _EQUALS: EQUALS,
            _DOUBLE_EQUALS: DOUBLE_EQUALS,
            _GT: GREATER_THAN,
            _LT: LESS_THAN,
            _NOT_IN: NOT_IN,
            _NOT_EQUALS: NOT_EQUALS,
        }.get(kind)
        if operator is None:
            raise SelectorError(f"found '{literal}', expected: {', '.join(_BINARY_OPERATORS)}")
        return operator

    def _value_set(self) -> set[str]:
        kind, literal = self._next()
        if kind != _OPEN_PAR:
            raise SelectorError(f"found '{literal}' expected: '('")  # sic: no colon upstream
        kind, literal = self._peek()
        if kind in (_IDENTIFIER, _COMMA):
            values = self._identifier_list()
            self._next()  # the ')' that _identifier_list saw
            return values
        if kind == _CLOSE_PAR:  # "()" is the set {""}
            self._next()
            return {""}
        raise SelectorError(f"found '{literal}', expected: ',', ')' or identifier")

    def _identifier_list(self) -> set[str]:
        # A list of possibly empty identifiers: "(a,b)", "(,a)", "(a,)" and "(,)" all parse.
        values: set[str] = set()
        while True:
            kind, literal = self._next()
            if kind == _IDENTIFIER:
                values.add(literal)
                next_kind, next_literal = self._peek()
                if next_kind == _COMMA:
                    continue
                if next_kind == _CLOSE_PAR:
                    return values
                raise SelectorError(f"found '{next_literal}', expected: ',' or ')'")
            if kind == _COMMA:
                if not values:
                    values.add("")  # "(,"
                next_kind, _ = self._peek()
                if next_kind == _CLOSE_PAR:
                    values.add("")  # ",)"
                    return values
                if next_kind == _COMMA:
                    self._next()
                    values.add("")  # ",,"
            else:
                raise SelectorError(f"found '{literal}', expected: ',', or identifier")

    def _exact_value(self) -> set[str]:
        if self._peek()[0] in (_END, _COMMA):
            return {""}  # "k=" selects the empty value
        kind, literal = self._next()
        if kind == _IDENTIFIER:
            return {literal}
        raise SelectorError(f"found '{literal}', expected: identifier")


def parse_selector(text: str) -> Selector:
    """labels.Parse: the selector for ``text``; ``""`` (or blanks) selects everything.

    Raises :class:`SelectorError` with upstream's message (or a size limit's). Results for short
    selectors are cached (selectors are immutable), errors are not.
    """
    if not isinstance(text, str):
        raise SelectorError(f"label selector must be a string, not {type(text).__name__}")
    if len(text) > MAX_CACHED_LENGTH:
        return _parse_selector(text)
    return _parse_selector_cached(text)


@functools.lru_cache(maxsize=4096)
def _parse_selector_cached(text: str) -> Selector:
    return _parse_selector(text)


def _parse_selector(text: str) -> Selector:
    if len(text) > MAX_SELECTOR_LENGTH:
        raise SelectorError(f"label selector is longer than {MAX_SELECTOR_LENGTH} characters")
    # Go's lexer reads a 0 byte as end of input, so "a=b\x00junk" is "a=b" upstream too.
    cut = text.find("\x00")
    if cut >= 0:
        text = text[:cut]
    requirements = _Parser(_lex(text)).parse()
    return Selector(requirements) if requirements else EVERYTHING


def parse_query_selector(raw_query_value: str | None) -> Selector:
    """Parse the ``labelSelector`` query parameter after URL decoding (``+`` → space, ``%2F`` → ``/``).

    A missing parameter (``None``) selects everything, as the HPA omits it for an empty selector.
    """
    if raw_query_value is None:
        return EVERYTHING
    return parse_selector(raw_query_value)
