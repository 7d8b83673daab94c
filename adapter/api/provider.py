"""What the HTTP layer needs from whatever computes values: a small provider protocol.

In the spirit of custom-metrics-apiserver's provider interface: the API asks for the metric names
and for values, and gets typed outcomes (`Values`, `MetricNotFound`, `SourceOnHold`) that it maps to
HTTP itself. The engine implements this protocol; tests use a fake.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from adapter.labels import Selector
from adapter.pipeline.preview import PreviewRequest
from adapter.pipeline.query import MetricNotFound, Outcome, SourceOnHold, TargetValue, Values


class MetricsProvider(Protocol):
    def clock(self) -> float:
        """Now, in unix seconds (the engine's clock: tests and previews move it)."""
        ...

    def metric_names(self) -> Sequence[str]: ...

    def query(self, metric: str, namespace: str, selector: Selector, now: float | None = None) -> Outcome: ...

    def snapshot(self) -> object:
        """A token that changes whenever an answer may change other than by time passing (the
        response cache keys on its identity)."""
        ...

    def preview(self, request: PreviewRequest) -> dict[str, Any] | MetricNotFound:
        """The preview document; raises ValueError for a request it cannot answer."""
        ...


__all__ = ["MetricNotFound", "MetricsProvider", "Outcome", "SourceOnHold", "TargetValue", "Values"]
