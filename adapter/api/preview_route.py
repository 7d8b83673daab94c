"""GET /prescaler/v1/preview: the preview document over HTTP, errors as metav1.Status bodies.

Read-only and outside the aggregated path (reach it with `kubectl port-forward`). The document is
built off the event loop: a large window must not delay the HPA's queries.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi.responses import JSONResponse, Response

from adapter.api import wire
from adapter.api.provider import MetricNotFound, MetricsProvider
from adapter.durations import DurationError, parse_duration
from adapter.pipeline.preview import PreviewRequest, parse_time


def install_preview_routes(api: Any, provider: MetricsProvider) -> None:
    @api.get("/prescaler/v1/preview")
    async def preview_route(
        metric: str | None = None,
        namespace: str | None = None,
        resource: str | None = None,
        start: str | None = None,
        duration: str = "2h",
        step: str = "1m",
    ) -> Response:
        missing = [
            name for name, value in (("metric", metric), ("namespace", namespace), ("resource", resource)) if not value
        ]
        if missing or metric is None or namespace is None or resource is None:
            # A Status like every other error (FastAPI's own 422 body is not one).
            return _status(400, "BadRequest", f"preview: missing query parameter(s): {', '.join(missing)}")
        try:
            try:
                start_at = parse_time(start, provider.clock())
            except ValueError as exc:
                raise ValueError(f"start: {exc}") from None
            req = PreviewRequest(metric, namespace, resource, start_at, parse_duration(duration), parse_duration(step))
            req.check()
            doc = await asyncio.to_thread(provider.preview, req)
        except (ValueError, DurationError, OverflowError) as exc:
            return _status(400, "BadRequest", f"preview: {exc}")
        if isinstance(doc, MetricNotFound):
            return _status(404, "NotFound", doc.message)
        return JSONResponse(doc)


def _status(code: int, reason: str, message: str) -> Response:
    return Response(wire.status(code, reason, message), status_code=code, media_type="application/json")
