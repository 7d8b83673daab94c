"""Label selector parsing, matching and printing (adapter/labels.py) against docs/api.md §4 / selector.go."""

from __future__ import annotations

import urllib.parse

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapter.labels import (
    EVERYTHING,
    Requirement,
    Selector,
    SelectorError,
    _label_value_errors,
    is_label_value,
    parse_query_selector,
    parse_selector,
)

NAME_REGEX_HINT = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation "
    "is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


# ------------------------------------------------------------------------------------------------
# Canonical String(): sorted by key, values sorted, operators as upstream prints them


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("", ""),
        ("   ", ""),
        ("a=b", "a=b"),
        ("a==b", "a==b"),  # upstream keeps DoubleEquals as "=="
        ("a!=b", "a!=b"),
        ("a", "a"),
        ("!a", "!a"),
        ("a>5", "a>5"),
        ("a<05", "a<05"),  # the value is kept as text
        ("queue=orders,env in (staging,prod)", "env in (prod,staging),queue=orders"),  # docs/api.md §4
        ("b notin (z,y,x),a", "a,b notin (x,y,z)"),
        ("x in (foo,,baz),y,z notin ()", "x in (,baz,foo),y,z notin ()"),  # selector.go doc example
        ("k in (a,a,b)", "k in (a,b)"),  # values are a set
        ("x=", "x="),
        ("x= ,z= ", "x=,z="),
        ("k in (,)", "k in ()"),
        ("k in (a,)", "k in (,a)"),
        ("k in (,a)", "k in (,a)"),
        ("in in (in)", "in in (in)"),  # keywords are identifiers in key/value position
        ("notin notin (notin,in)", "notin notin (in,notin)"),
        ("scaledobject.keda.sh/name=x", "scaledobject.keda.sh/name=x"),
        (" a  =  b ,\tc\n in\r( x ,y ) ", "a=b,c in (x,y)"),
        ("a=1,a=2", "a=1,a=2"),  # same key twice: kept, in input order (stable sort)
    ],
)
def test_canonical_string(text: str, canonical: str) -> None:
    assert str(parse_selector(text)) == canonical


def test_empty_selector_is_everything() -> None:
    selector = parse_selector("")
    assert selector.empty
    assert selector == EVERYTHING
    assert selector.matches({}) and selector.matches({"any": "thing"}) and selector.matches(None)
    assert not parse_selector("a").empty


# ------------------------------------------------------------------------------------------------
# Matching semantics (docs/api.md §4 table; selector.go Requirement.Matches)


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        ("k=v", {"k": "v"}, True),
        ("k=v", {"k": "w"}, False),
        ("k=v", {}, False),
        ("k==v", {"k": "v"}, True),
        ("k==v", {}, False),
        ("k!=v", {"k": "v"}, False),
        ("k!=v", {"k": "w"}, True),
        ("k!=v", {}, True),  # absent label matches !=
        ("k in (a,b)", {"k": "b"}, True),
        ("k in (a,b)", {"k": "c"}, False),
        ("k in (a,b)", {}, False),
        ("k notin (a,b)", {"k": "a"}, False),
        ("k notin (a,b)", {"k": "c"}, True),
        ("k notin (a,b)", {}, True),  # absent label matches notin
        ("k", {"k": ""}, True),
        ("k", {}, False),
        ("!k", {}, True),
        ("!k", {"k": ""}, False),
        ("k=", {"k": ""}, True),  # empty value
        ("k=", {}, False),
        ("k in ()", {"k": ""}, True),  # "()" is the set {""}
        ("k in ()", {"k": "x"}, False),
        ("k>5", {"k": "6"}, True),
        ("k>5", {"k": "5"}, False),
        ("k>5", {}, False),  # Gt needs the label
        ("k>5", {"k": "six"}, False),  # ... holding an integer
        ("k>5", {"k": "6.0"}, False),
        ("k>5", {"k": " 6"}, False),
        ("k>5", {"k": "1_000"}, False),  # Python int() would accept this, Go does not
        ("k>5", {"k": "9223372036854775808"}, False),  # overflows int64
        ("k>5", {"k": "9223372036854775807"}, True),
        ("k<5", {"k": "-3"}, True),  # label values are not validated, Go parses the sign
        ("k<5", {"k": "+3"}, True),
        ("k<5", {"k": "5"}, False),
        ("k<10", {"k": "09"}, True),
        ("a=1,b=2", {"a": "1", "b": "2", "c": "3"}, True),
        ("a=1,b=2", {"a": "1"}, False),
        ("env in (prod,staging),queue=orders", {"env": "prod", "queue": "orders"}, True),
        ("env in (prod,staging),queue=orders", {"env": "dev", "queue": "orders"}, False),
    ],
)
def test_matches(text: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_selector(text).matches(labels) is expected


# ------------------------------------------------------------------------------------------------
# Errors: wording from selector.go and validation.go


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # docs/api.md §3: the 400 message the apiserver sends for this
        ("k in (a", "unable to parse requirement: found '', expected: ',' or ')'"),
        ("k in (a b)", "unable to parse requirement: found 'b', expected: ',' or ')'"),
        ("k in a", "unable to parse requirement: found 'a' expected: '('"),
        ("k in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier"),
        ("k in (a,,)", "unable to parse requirement: found ')', expected: ',', or identifier"),
        ("k v", "unable to parse requirement: found 'v', expected: in, notin, =, ==, !=, gt, lt"),
        ("k=(", "unable to parse requirement: found '(', expected: identifier"),
        ("!=a", "found '!=', expected: !, identifier, or 'end of string'"),  # "!=" lexes as one token
        ("! ,", "unable to parse requirement: found ',', expected: identifier"),
        ("a,", "found '', expected: identifier after ','"),
        ("a,,b", "found ',', expected: identifier after ','"),
        (",a", "found ',', expected: !, identifier, or 'end of string'"),
        ("=a", "found '=', expected: !, identifier, or 'end of string'"),
        ("x==a==b", "found '==', expected: ',' or 'end of string'"),
        ("!x=a", "found '=', expected: ',' or 'end of string'"),  # "!k" takes no value
        ("a=b c=d", "found 'c', expected: ',' or 'end of string'"),
        ("a=b)", "found ')', expected: ',' or 'end of string'"),
    ],
)
def test_syntax_errors(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as caught:
        parse_selector(text)
    assert str(caught.value) == message


def test_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_selector("k in (")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # Strings seen in upstream tests and real kubectl output (find them by grepping the web).
        (
            "app:monolith",
            'unable to parse requirement: <nil>: Invalid value: "app:monolith": name part ' + NAME_REGEX_HINT,
        ),
        ("*bar", 'unable to parse requirement: <nil>: Invalid value: "*bar": name part ' + NAME_REGEX_HINT),
        (
            "a/b/c ?=? def",
            'unable to parse requirement: <nil>: Invalid value: "a/b/c": a qualified name '
            + NAME_REGEX_HINT
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
        ),
        (
            "app.kubernetes_io/name=x",
            (
                'unable to parse requirement: <nil>: Invalid value: "app.kubernetes_io/name": prefix part a '
                "lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
                "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation "
                "is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ),
        ),
        ("/a", 'unable to parse requirement: <nil>: Invalid value: "/a": prefix part must be non-empty'),
        (
            "a/",
            'unable to parse requirement: <nil>: Invalid value: "a/": name part must be non-empty; '
            "name part " + NAME_REGEX_HINT,
        ),
        (
            "k>a",
            (
                "unable to parse requirement: values[0]: Invalid value: \"a\": for 'Gt', 'Lt' operators, "
                "the value must be an integer"
            ),
        ),
        (
            "k<",
            (
                "unable to parse requirement: values[0]: Invalid value: \"\": for 'Gt', 'Lt' operators, "
                "the value must be an integer"
            ),
        ),
        (
            "k>1.5",
            (
                "unable to parse requirement: values[0]: Invalid value: \"1.5\": for 'Gt', 'Lt' "
                "operators, the value must be an integer"
            ),
        ),
    ],
)
def test_validation_errors(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as caught:
        parse_selector(text)
    assert str(caught.value) == message


def test_value_error_names_the_key_and_index() -> None:
    with pytest.raises(SelectorError) as caught:
        parse_selector("env in (ok,-bad)")
    message = str(caught.value)
    # values are sorted before validation (upstream passes sets.String.List()), "-bad" < "ok"
    assert message.startswith(
        'unable to parse requirement: values[0][env]: Invalid value: "-bad": a valid '
        "label must be an empty string or consist of alphanumeric characters"
    )
    assert "regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?'" in message


def test_several_validation_errors_are_aggregated_in_brackets() -> None:
    with pytest.raises(SelectorError) as caught:
        parse_selector("k>-a")
    message = str(caught.value)
    assert message.startswith("unable to parse requirement: [values[0]: Invalid value: \"-a\": for 'Gt'")
    assert ', values[0][k]: Invalid value: "-a": a valid label' in message
    assert message.endswith("]")


def test_negative_integer_bound_fails_label_value_validation_as_upstream() -> None:
    # ParseInt accepts "-5" but a label value cannot start with '-', so Kubernetes rejects k>-5.
    with pytest.raises(SelectorError, match=r'values\[0\]\[k\]: Invalid value: "-5"'):
        parse_selector("k>-5")


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("a" * 63 + "=x", True),
        ("a" * 64 + "=x", False),
        ("p" * 253 + "/n=x", True),
        ("p" * 254 + "/n=x", False),
        ("k=" + "v" * 63, True),
        ("k=" + "v" * 64, False),
        ("k=v_1.2-3", True),
        ("k=v/1", False),
        ("Ab.c-d_e", True),
        ("-a", False),
        ("a-", False),
        ("example.com/Name", True),
        ("Example.com/name", False),  # prefix must be lower case
        ("k=é", False),
        ("k\v=v", False),  # only space, tab, CR and LF are blanks
    ],
)
def test_length_and_charset_limits(text: str, ok: bool) -> None:
    if ok:
        parse_selector(text)
    else:
        with pytest.raises(SelectorError):
            parse_selector(text)


def test_key_too_long_message() -> None:
    with pytest.raises(SelectorError, match="name part must be no more than 63 characters"):
        parse_selector("a" * 64)
    with pytest.raises(SelectorError, match="prefix part must be no more than 253 characters"):
        parse_selector("p" * 254 + "/n")
    with pytest.raises(
        SelectorError,
        match=r'values\[0\]\[k\]: Invalid value: "v{64}": must be no more '
        r"than 63 characters",
    ):
        parse_selector("k=" + "v" * 64)


def test_nul_ends_input_like_go() -> None:
    # Go's lexer reads byte 0 as end of string, so whatever follows is ignored upstream too.
    assert str(parse_selector("a=b\x00,c=!!")) == "a=b"


# ------------------------------------------------------------------------------------------------
# What arrives over HTTP (docs/api.md §4: KAG re-encodes with url.Values.Encode)


def test_query_string_from_aggregator() -> None:
    query = urllib.parse.parse_qs("labelSelector=env+in+%28prod%2Cstaging%29%2Cqueue%3Dorders")
    selector = parse_query_selector(query["labelSelector"][0])
    assert str(selector) == "env in (prod,staging),queue=orders"
    assert selector.matches({"env": "staging", "queue": "orders", "extra": "1"})
    assert not selector.matches({"env": "staging"})


def test_query_string_keda_prefixed_key() -> None:
    query = urllib.parse.parse_qs("labelSelector=scaledobject.keda.sh%2Fname%3Dx")
    selector = parse_query_selector(query["labelSelector"][0])
    assert selector.requirements == (Requirement("scaledobject.keda.sh/name", "=", ["x"]),)
    assert selector.equality_values("scaledobject.keda.sh/name") == {"x"}


def test_query_roundtrip_through_urlencode() -> None:
    canonical = "a.b/c notin (x,y),env in (prod,staging),queue=orders"
    encoded = urllib.parse.urlencode({"labelSelector": canonical})
    assert "+" in encoded and "%2F" in encoded
    decoded = urllib.parse.parse_qs(encoded)["labelSelector"][0]
    assert str(parse_query_selector(decoded)) == canonical


def test_missing_query_parameter_is_everything() -> None:
    assert parse_query_selector(None) is EVERYTHING


# ------------------------------------------------------------------------------------------------
# equality_values


@pytest.mark.parametrize(
    ("text", "key", "expected"),
    [
        ("resource=service-a", "resource", {"service-a"}),
        ("resource==service-a", "resource", {"service-a"}),
        ("resource in (a,b)", "resource", {"a", "b"}),
        ("resource in (a,b),resource in (b,c)", "resource", {"b"}),
        ("resource in (a,b),resource=c", "resource", set()),  # contradictory: nothing can match
        ("resource in (a,b),resource!=a", "resource", {"b"}),
        ("resource in (a,b,c),resource notin (a,c)", "resource", {"b"}),
        ("resource=a,!resource", "resource", set()),
        ("n in (1,7,x),n>5", "n", {"7"}),
        ("resource=a,other=b", "other", {"b"}),
        ("resource", "resource", None),  # exists does not pin a value
        ("resource!=a", "resource", None),
        ("resource notin (a)", "resource", None),
        ("other=b", "resource", None),
        ("", "resource", None),
    ],
)
def test_equality_values(text: str, key: str, expected: set[str] | None) -> None:
    assert parse_selector(text).equality_values(key) == expected


def test_equality_values_returns_a_fresh_set() -> None:
    selector = parse_selector("r=a")
    values = selector.equality_values("r")
    assert values is not None
    values.add("mutated")
    assert selector.equality_values("r") == {"a"}


# ------------------------------------------------------------------------------------------------
# Requirement / Selector objects


def test_requirement_constructor_validates_like_new_requirement() -> None:
    with pytest.raises(
        SelectorError,
        match=r"values: Invalid value: \[\]string\{\}: for 'in', 'notin' "
        r"operators, values set can't be empty",
    ):
        Requirement("k", "in", [])
    with pytest.raises(SelectorError, match="exact-match compatibility requires one single value"):
        Requirement("k", "=", ["a", "b"])
    with pytest.raises(SelectorError, match="values set must be empty for exists and does not exist"):
        Requirement("k", "exists", ["a"])
    with pytest.raises(SelectorError, match="for 'Gt', 'Lt' operators, exactly one value is required"):
        Requirement("k", "gt", ["1", "2"])
    with pytest.raises(SelectorError, match=r'operator: Unsupported value: "~": supported values: "in"'):
        Requirement("k", "~", ["a"])
    with pytest.raises(SelectorError, match=r'^key: Invalid value: "bad key": name part'):
        Requirement("bad key", "exists")


def test_requirement_is_immutable_and_hashable() -> None:
    requirement = Requirement("k", "in", ["b", "a", "b"])
    assert requirement.values == ("a", "b")
    assert str(requirement) == "k in (a,b)"
    assert requirement == Requirement("k", "in", ("a", "b"))
    assert len({requirement, Requirement("k", "in", ["a", "b"])}) == 1
    with pytest.raises(AttributeError):
        requirement.key = "other"  # type: ignore[misc]


def test_selector_sorts_requirements_by_key() -> None:
    selector = Selector([Requirement("z", "exists"), Requirement("a", "=", ["1"])])
    assert [r.key for r in selector.requirements] == ["a", "z"]
    assert str(selector) == "a=1,z"
    assert selector == parse_selector("z,a=1")
    assert hash(selector) == hash(parse_selector("z,a=1"))


def test_parse_is_cached() -> None:
    assert parse_selector("cache-me=1") is parse_selector("cache-me=1")


def test_non_string_input_is_a_selector_error() -> None:
    with pytest.raises(SelectorError):
        parse_selector(123)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------
# Property tests

_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_name = (
    st.builds(
        lambda first, middle, last: first + middle + last,
        st.sampled_from(_ALNUM),
        st.text(alphabet=_ALNUM + "-_.", max_size=6),
        st.sampled_from(_ALNUM),
    )
    | st.sampled_from(_ALNUM)
    | st.sampled_from(["in", "notin"])
)
_prefix = st.sampled_from(["", "example.com/", "a.b-c/", "keda.sh/"])
_key = st.builds(lambda prefix, name: prefix + name, _prefix, _name)
_value = st.sampled_from(["", "a", "b", "in", "notin", "x.y", "A-1", "5", "12", "007"])
_int_value = st.integers(min_value=0, max_value=20).map(str)


@st.composite
def _requirement_text(draw: st.DrawFn) -> tuple[str, tuple[str, str, frozenset[str]]]:
    """A requirement in some valid surface syntax plus its meaning (key, op, values)."""
    key = draw(_key)
    op = draw(st.sampled_from(["=", "==", "!=", "in", "notin", "exists", "!", "gt", "lt"]))
    pad = draw(st.sampled_from(["", " ", "  ", "\t"]))
    if op in ("=", "==", "!="):
        value = draw(_value)
        return f"{key}{pad}{op}{pad}{value}", (key, op, frozenset([value]))
    if op in ("in", "notin"):
        values = draw(st.lists(_value, min_size=1, max_size=4))
        if values == [""]:
            return f"{key} {op} ()", (key, op, frozenset([""]))
        values = [v for v in values if v] or ["a"]
        return f"{key} {op}{pad}({pad}{(pad + ',' + pad).join(values)}{pad})", (key, op, frozenset(values))
    if op == "exists":
        return key, (key, op, frozenset())
    if op == "!":
        return f"!{pad}{key}", (key, op, frozenset())
    bound = draw(_int_value)
    return f"{key}{pad}{'>' if op == 'gt' else '<'}{pad}{bound}", (key, op, frozenset([bound]))


_selector_text = st.lists(_requirement_text(), max_size=4)


def _go_parse_int64(text: str) -> int | None:
    sign = text[:1] in ("+", "-")
    digits = text[1:] if sign else text
    if not digits or any(c not in "0123456789" for c in digits):
        return None
    number = int(text)
    return number if -(2**63) <= number < 2**63 else None


def _brute_force(meaning: list[tuple[str, str, frozenset[str]]], labels: dict[str, str]) -> bool:
    """docs/api.md §4 table, written independently of adapter.labels."""
    for key, op, values in meaning:
        present = key in labels
        value = labels.get(key)
        if op in ("=", "==", "in"):
            ok = present and value in values
        elif op in ("!=", "notin"):
            ok = not present or value not in values
        elif op == "exists":
            ok = present
        elif op == "!":
            ok = not present
        else:
            (bound,) = values
            number = _go_parse_int64(value) if present and value is not None else None
            ok = number is not None and (number > int(bound) if op == "gt" else number < int(bound))
        if not ok:
            return False
    return True


_labels = st.dictionaries(
    st.sampled_from(["a", "b", "in", "example.com/a", "keda.sh/in", "x1", "A.b_c-d"]),
    st.sampled_from(["", "a", "b", "in", "5", "12", "007", "-3", "+4", "x.y", "9223372036854775808"]),
    max_size=5,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_selector_text)
def test_string_roundtrip(parts: list[tuple[str, tuple[str, str, frozenset[str]]]]) -> None:
    text = ",".join(surface for surface, _ in parts)
    selector = parse_selector(text)
    canonical = str(selector)
    again = parse_selector(canonical)
    assert again == selector
    assert str(again) == canonical
    # canonical keys are sorted
    keys = [r.key for r in selector.requirements]
    assert keys == sorted(keys)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_selector_text, _labels)
def test_matches_agrees_with_brute_force(
    parts: list[tuple[str, tuple[str, str, frozenset[str]]]], labels: dict[str, str]
) -> None:
    selector = parse_selector(",".join(surface for surface, _ in parts))
    meaning = [m for _, m in parts]
    expected = _brute_force(meaning, labels)
    assert selector.matches(labels) is expected
    assert parse_selector(str(selector)).matches(labels) is expected


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab=!(),<> \tin/.-_0\x00é")), max_size=20))
def test_arbitrary_text_parses_or_raises_selector_error(text: str) -> None:
    try:
        selector = parse_selector(text)
    except SelectorError as error:
        assert str(error)
    else:
        assert parse_selector(str(selector)) == selector


@pytest.mark.parametrize(
    "value",
    ["", "a", "svc-1", "My_Value.2", "a" * 63, "a" * 64, "-a", "a-", "a b", "é", "a" * 62 + "é", "x/y", "_a", "a."],
)
def test_the_quick_label_value_check_agrees_with_the_worded_one(value: str) -> None:
    # is_label_value is the one-match path of target checks; it must never disagree with the errors.
    assert is_label_value(value) == (not _label_value_errors(value))


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.sampled_from("aZ09-_.é/ "), max_size=70))
def test_the_quick_label_value_check_agrees_on_random_values(value: str) -> None:
    assert is_label_value(value) == (not _label_value_errors(value))
