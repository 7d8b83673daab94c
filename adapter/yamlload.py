"""The YAML loaders for manifests and other user files: PyYAML's safe subset, with every scalar
that PyYAML would turn into a plain Python exception reported as a YAML error with its line.

PyYAML's constructors raise `ValueError` for an unquoted date that does not exist
(`exclude: [2023-02-30]`: "day is out of range for month") and for an integer literal longer than
Python's int-to-string digit limit. Such an error has no mark, is no `yaml.YAMLError`, and so
escaped every "invalid YAML: file, line" report as a traceback or a whole file dropped with
`ValueError`. Here they are `yaml.constructor.ConstructorError`s (a `yaml.MarkedYAMLError`) whose
`problem_mark` is the scalar's position, reported like a syntax error.

`SafeLoader` is the pure-Python loader (node-by-node reading, as `prescaler validate` does);
`FastSafeLoader` is libyaml's when PyYAML was built with it (many times faster), else the same.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError

_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_INT = "tag:yaml.org,2002:int"


def _scalar_text(node: Any, limit: int = 40) -> str:
    text = str(getattr(node, "value", ""))
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


class _CheckedScalars:
    """Mixin for a SafeConstructor: bad timestamp and integer scalars raise marked YAML errors."""

    def construct_yaml_timestamp(self, node: Any) -> Any:
        try:
            return super().construct_yaml_timestamp(node)  # type: ignore[misc]
        except (ValueError, OverflowError) as exc:
            raise ConstructorError(
                None,
                None,
                f"invalid date or time {_scalar_text(node)}: {exc} (quote it to keep it a string)",
                node.start_mark,
            ) from None

    def construct_yaml_int(self, node: Any) -> Any:
        try:
            return super().construct_yaml_int(node)  # type: ignore[misc]
        except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
            raise ConstructorError(
                None, None, f"integer {_scalar_text(node)} has too many digits", node.start_mark
            ) from None


class SafeLoader(_CheckedScalars, yaml.SafeLoader):
    pass


_Fast: Any = getattr(yaml, "CSafeLoader", None)


if _Fast is not None:

    class FastSafeLoader(_CheckedScalars, _Fast):  # type: ignore[misc, valid-type]
        pass

else:  # pragma: no cover - PyYAML without libyaml

    class FastSafeLoader(SafeLoader):  # type: ignore[no-redef]
        pass


for _loader in (SafeLoader, FastSafeLoader):
    # The constructor tables hold the base class's functions: register the checked ones.
    _loader.add_constructor(_TIMESTAMP, _loader.construct_yaml_timestamp)
    _loader.add_constructor(_INT, _loader.construct_yaml_int)
