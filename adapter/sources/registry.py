"""The source kinds by name: the one list of them in the code base.

The resource parser, the CRD generator, the CLI and the simulator ask this module which kinds exist;
adding a kind is one module under adapter/sources/ plus one line in `_CLASSES` (see
docs/adding-a-source.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapter.resources import CommonSourceSettings
from adapter.sources.api import ApiSource
from adapter.sources.base import Source, SourceContext
from adapter.sources.forecast import ForecastSource
from adapter.sources.prometheus import PrometheusSource
from adapter.sources.schedule import ScheduleSource

_CLASSES: tuple[type[Source[Any]], ...] = (ApiSource, ScheduleSource, PrometheusSource, ForecastSource)
_BY_KIND: dict[str, type[Source[Any]]] = {cls.kind: cls for cls in _CLASSES}

# The kinds in the order messages and schemas list them.
KINDS: tuple[str, ...] = tuple(_BY_KIND)


def source_class(kind: str) -> type[Source[Any]]:
    cls = _BY_KIND.get(kind)
    if cls is None:
        raise KeyError(f"unknown source kind {kind!r}")
    return cls


@dataclass(frozen=True)
class KindParser:
    """One kind as the resource parser sees it (adapter.resources.SourceKindParser)."""

    cls: type[Source[Any]]

    @property
    def default_interval(self) -> float:
        return float(self.cls.default_interval)

    def __call__(self, kind: str, spec: Mapping[str, Any], path: str) -> Any:
        return self.cls.parse_config(spec, path)


def config_parsers() -> Mapping[str, KindParser]:
    """`kind -> parser(kind, spec, path)` as adapter.resources.parse_virtual_metric_event expects."""
    return {kind: KindParser(cls) for kind, cls in _BY_KIND.items()}


def default_interval(kind: str) -> float:
    return float(source_class(kind).default_interval)


def value_names(kind: str, config: Any) -> frozenset[str] | None:
    """The value names every item of this source carries, or None when they depend on the data."""
    return source_class(kind).value_names(config)


def create_source(kind: str, config: Any, common: CommonSourceSettings, context: SourceContext) -> Source[Any]:
    return source_class(kind)(config, common, context)
