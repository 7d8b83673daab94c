"""Source kinds by name. Imports are lazy so a broken or heavy kind never blocks the others."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from adapter.errors import ValidationError
from adapter.sources.base import CommonSourceSettings, Source, SourceContext

_KINDS: dict[str, str] = {
    "api": "adapter.sources.api:ApiSource",
    "schedule": "adapter.sources.schedule:ScheduleSource",
    "prometheus": "adapter.sources.prometheus:PrometheusSource",
    "forecast": "adapter.sources.forecast:ForecastSource",
}


def source_class(kind: str) -> type[Source]:
    target = _KINDS.get(kind)
    if target is None:
        raise KeyError(f"unknown source kind {kind!r}")
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)


def _parse(kind: str, spec: Mapping[str, Any], path: str) -> Any:
    try:
        cls = source_class(kind)
    except (ImportError, AttributeError) as exc:
        raise ValidationError(path, f"source kind {kind!r} is not available: {exc}") from None
    return cls.parse_config(spec, path)


def config_parsers() -> Mapping[str, Any]:
    """`kind -> parser(kind, spec, path)` as adapter.resources.parse_virtual_metric_event expects."""
    parsers: dict[str, Any] = {}
    for kind in _KINDS:
        parsers[kind] = _parse
    return parsers


def default_interval(kind: str) -> float:
    try:
        return float(source_class(kind).default_interval)
    except Exception:  # noqa: BLE001 - a kind that fails to import is reported by _parse
        return 30.0


def create_source(kind: str, config: Any, common: CommonSourceSettings, context: SourceContext) -> Source:
    return source_class(kind)(config, common, context)
