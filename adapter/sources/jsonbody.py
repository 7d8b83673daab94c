"""JSON bodies from untrusted endpoints: one strict loader, and a reader for `{"key": [...]}`
documents that stops at a limit while it reads instead of decoding a million elements first.

Both run in a worker thread (see adapter.sources.http.get_document); they hold the GIL while
decoding, but in steps of one element, so the event loop keeps getting its turn.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from adapter.errors import SourceError

_SPACE = re.compile(r"[ \t\n\r]*")


def _parse_int(text: str) -> int | float:
    # Huge integer literals would raise deep inside json (int digit limit); read them as floats
    # so the item checks report "outside ±1e15" for that one value instead.
    return int(text) if len(text) <= 30 else float(text)


_DECODER = json.JSONDecoder(parse_int=_parse_int)


def decode_text(body: bytes, where: str) -> str:
    try:
        return body.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SourceError(f"{where}: response is not UTF-8 text") from None


class _TooManyObjects(Exception):
    pass


def _counting_decoder(limit: int) -> json.JSONDecoder:
    count = 0

    def hook(obj: dict[str, Any]) -> dict[str, Any]:
        nonlocal count
        count += 1
        if count > limit:
            raise _TooManyObjects
        return obj

    return json.JSONDecoder(parse_int=_parse_int, object_hook=hook)


def load_json(body: bytes, where: str, max_objects: int | None = None) -> Any:
    """Parse JSON strictly enough for untrusted input; errors become SourceError naming `where`.

    With `max_objects`, decoding stops as soon as the document has more JSON objects than that (each
    object is counted when the decoder completes it), so a huge answer is refused while it is read.
    """
    text = decode_text(body, where)
    decoder = _DECODER if max_objects is None else _counting_decoder(max_objects)
    try:
        return decoder.decode(text)
    except _TooManyObjects:
        raise SourceError(
            f"{where}: response has more than {max_objects} JSON objects; refused while reading"
        ) from None
    except json.JSONDecodeError as exc:
        raise _not_json(where, text, exc) from None
    except RecursionError:
        raise SourceError(f"{where}: response JSON is nested too deeply") from None
    except ValueError as exc:
        raise SourceError(f"{where}: response is not usable JSON: {exc}") from None


@dataclass(frozen=True)
class MemberArray:
    """`document[key]` of a JSON document, the list read element by element."""

    is_object: bool  # False: `value` is the whole (non-object) document, for the caller's message
    found: bool  # the key is present (its value may still be null or not a list)
    value: Any


def read_member_array(body: bytes, key: str, where: str, limit: int, what: str = "items") -> MemberArray:
    """For a JSON object, its member `key` (a list is decoded one element at a time and refused as
    soon as it has more than `limit` elements); other members are decoded and dropped."""
    text = decode_text(body, where)
    try:
        return _read_member_array(text, key, where, limit, what)
    except json.JSONDecodeError as exc:
        raise _not_json(where, text, exc) from None
    except RecursionError:
        raise SourceError(f"{where}: response JSON is nested too deeply") from None
    except ValueError as exc:
        raise SourceError(f"{where}: response is not usable JSON: {exc}") from None


def _read_member_array(text: str, key: str, where: str, limit: int, what: str) -> MemberArray:
    pos = _skip(text, 0)
    if text[pos : pos + 1] != "{":
        return MemberArray(False, False, _DECODER.decode(text))
    pos = _skip(text, pos + 1)
    result = MemberArray(True, False, None)
    if text[pos : pos + 1] == "}":
        return _end(text, pos + 1, result)
    while True:
        if text[pos : pos + 1] != '"':
            raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, pos)
        name, pos = _DECODER.raw_decode(text, pos)
        pos = _skip(text, pos)
        if text[pos : pos + 1] != ":":
            raise json.JSONDecodeError("Expecting ':' delimiter", text, pos)
        pos = _skip(text, pos + 1)
        if name == key and text[pos : pos + 1] == "[":
            elements, pos = _array(text, pos, where, limit, what)
            result = MemberArray(True, True, elements)
        else:
            value, pos = _DECODER.raw_decode(text, pos)
            if name == key:
                result = MemberArray(True, True, value)
        pos = _skip(text, pos)
        if text[pos : pos + 1] == ",":
            pos = _skip(text, pos + 1)
            continue
        if text[pos : pos + 1] == "}":
            return _end(text, pos + 1, result)
        raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)


def _array(text: str, pos: int, where: str, limit: int, what: str) -> tuple[list[Any], int]:
    elements: list[Any] = []
    pos = _skip(text, pos + 1)
    if text[pos : pos + 1] == "]":
        return elements, pos + 1
    while True:
        value, pos = _DECODER.raw_decode(text, pos)
        elements.append(value)
        if len(elements) > limit:
            raise SourceError(f"{where}: more than the limit of {limit} {what} (stopped reading at {what} {limit + 1})")
        pos = _skip(text, pos)
        if text[pos : pos + 1] == ",":
            pos = _skip(text, pos + 1)
            continue
        if text[pos : pos + 1] == "]":
            return elements, pos + 1
        raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)


def _end(text: str, pos: int, result: MemberArray) -> MemberArray:
    if _skip(text, pos) != len(text):
        raise json.JSONDecodeError("Extra data", text, _skip(text, pos))
    return result


def _skip(text: str, pos: int) -> int:
    match = _SPACE.match(text, pos)
    return match.end() if match else pos


def _not_json(where: str, text: str, exc: json.JSONDecodeError) -> SourceError:
    snippet = " ".join(text[:60].split())
    return SourceError(
        f"{where}: response is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}; starts with {snippet!r})"
    )


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}.get(
        type(value), type(value).__name__
    )
