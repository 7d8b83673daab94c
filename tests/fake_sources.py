"""Sources for runner tests that need a fetch to fail in a chosen way."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from adapter.sources.base import CommonSourceSettings, FetchResult, Source, SourceContext

Fail = Callable[[float], FetchResult]  # raises, given the fetch's `now`


class Raising(Source[Fail]):
    """Every fetch calls `config(now)`, which raises (a SourceError, or a bug of any type)."""

    kind = "raising"

    @classmethod
    def parse_config(cls, spec: Mapping[str, Any], path: str) -> Fail:  # pragma: no cover - built directly
        raise NotImplementedError

    async def fetch(self, now: float) -> FetchResult:
        return self.config(now)


def raising(fail: Fail, interval: float = 60) -> Raising:
    return Raising(fail, CommonSourceSettings(interval=interval), SourceContext())
