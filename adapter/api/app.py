"""The HTTP layer: external.metrics.k8s.io/v1beta1 plus health, version, metrics and OpenAPI.

`/apis...` is the hot path (the HPA asks every 15 s per metric and HPA), so it is a plain ASGI
handler in front of FastAPI: a lookup in the provider's published snapshot and a few bytes of JSON.
Everything else (health, version, /metrics, OpenAPI, preview) is ordinary FastAPI routes.
Errors are metav1.Status bodies exactly as an aggregated API server sends them; bad
input never produces a 500.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qs

from fastapi import FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from adapter import observability as obs
from adapter.api import openapi, wire
from adapter.api.preview_route import install_preview_routes
from adapter.api.provider import MetricNotFound, MetricsProvider, Values
from adapter.labels import SelectorError, parse_query_selector
from adapter.upstream import Passthrough
from adapter.version import version_info

log = logging.getLogger("prescaler.api")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_JSON = [(b"content-type", b"application/json")]
MAX_CACHED_RESPONSES = 10_000
MAX_SERVED_RECORDED = 8  # per answer: an HPA's query names one target
# Bytes, not only entries: the HPA's answers are small and repeated; a large one is computed again.
MAX_CACHED_BODY_BYTES = 64 * 1024
MAX_CACHED_TOTAL_BYTES = 32 * 1024 * 1024
_TEXT = [(b"content-type", b"text/plain; charset=utf-8")]
_GROUP_PREFIX = "/apis/" + wire.GROUP
_VERSION_PREFIX = f"{_GROUP_PREFIX}/{wire.VERSION}"

# Static discovery bodies never change; build them once.
_GROUP_LIST = wire.api_group_list()
_GROUP = wire.api_group()


class PrescalerApp:
    """The ASGI application: the hot /apis path in front of a FastAPI app for everything else."""

    def __init__(
        self,
        provider: MetricsProvider,
        lifespan: Callable[[], Any] | None = None,
        ready: Callable[[], bool] | None = None,
        upstream: Passthrough | None = None,
    ):
        self.provider = provider
        self.upstream = upstream  # metrics prescaler does not define go there (adapter/upstream)
        self._own_names: tuple[Any, frozenset[str]] = (None, frozenset())
        self._ready = ready or (lambda: bool(getattr(provider, "synced", True)))
        self._resource_list_cache: tuple[tuple[str, ...], bytes] = ((), wire.api_resource_list(()))
        # (namespace, metric, query) -> (provider snapshot, valid until, status code, body, unknown targets)
        self._responses: dict[tuple[str, str, bytes], tuple[Any, float, int, bytes, int]] = {}
        self._cached_bytes = 0
        self.fastapi = _build_fastapi(self, lifespan)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/apis"):
            started = time.perf_counter()
            route, code = await self._apis(scope, send)
            _latency_child(route, code).observe(time.perf_counter() - started)
            return
        await self.fastapi(scope, receive, send)

    # ---------------------------------------------------------------- /apis (hot path)

    async def _apis(self, scope: Scope, send: Send) -> tuple[str, int]:
        path: str = scope["path"]
        if len(path) > 1 and path.endswith("/"):
            path = path[:-1]
        method = scope["method"]
        if path == "/apis":
            return "discovery", await self._discovery(send, method, _GROUP_LIST)
        if path == _GROUP_PREFIX:
            return "discovery", await self._discovery(send, method, _GROUP)
        if path == _VERSION_PREFIX:
            return "discovery", await self._discovery(send, method, self._resource_list())
        if not path.startswith(_VERSION_PREFIX + "/"):
            # Outside every web service: the generic apiserver answers text/plain.
            await _respond(send, 404, b"404 page not found\n", _TEXT)
            return "other", 404
        parts = path[len(_VERSION_PREFIX) + 1 :].split("/")
        if len(parts) != 3 or parts[0] != "namespaces" or not parts[1] or not parts[2]:
            await _respond(send, 404, wire.not_found_resource(), _JSON)
            return "other", 404
        if method not in ("GET", "HEAD"):
            await _respond(send, 405, wire.method_not_allowed(method), _JSON)
            return "value", 405
        if self.upstream is not None and not self._is_own_metric(parts[2]):
            answer = await self.upstream.forward(method, scope.get("raw_path") or path, scope.get("query_string", b""))
            await _respond(send, answer.code, answer.body, [(b"content-type", answer.content_type.encode("latin-1"))])
            return "upstream", answer.code
        code = await self._value(scope, send, parts[1], parts[2])
        # A metric label only for served names: typos in HPAs cannot grow the series.
        obs.record_query(parts[2], code, self._is_own_metric(parts[2]))
        return "value", code

    async def _discovery(self, send: Send, method: str, body: bytes) -> int:
        if method not in ("GET", "HEAD"):
            await _respond(send, 405, wire.method_not_allowed(method), _JSON)
            return 405
        await _respond(send, 200, body, _JSON)
        return 200

    def _is_own_metric(self, metric: str) -> bool:
        snapshot = self.provider.snapshot()
        if self._own_names[0] is not snapshot:
            self._own_names = (snapshot, frozenset(self.provider.metric_names()))
        return metric in self._own_names[1]

    def _resource_list(self) -> bytes:
        names = tuple(self.provider.metric_names())
        if self.upstream is not None:
            names = self.upstream.merged_names(names)  # cached upstream names, never a live call
        cached_names, body = self._resource_list_cache
        if names != cached_names:
            body = wire.api_resource_list(names)
            self._resource_list_cache = (names, body)
        return body

    async def _value(self, scope: Scope, send: Send, namespace: str, metric: str) -> int:
        # Every HPA asks the same question every 15 s and the answer only changes at known times
        # (a timeline breakpoint, a source turning stale, a new snapshot, the next whole second of
        # the timestamp), so a response is reused until the first of those.
        now = self.provider.clock()
        query_string = scope.get("query_string", b"")
        cache_key = (namespace, metric, query_string)
        cached = self._responses.get(cache_key)
        published = self.provider.snapshot()
        if cached is not None and cached[0] is published and now < cached[1]:
            await _respond(send, cached[2], cached[3], _JSON)
            if cached[4]:
                obs.record_unknown_target(metric)
            return cached[2]
        code, body, valid_until, unknown = self._compute_value(query_string, namespace, metric, now)
        size = len(body) + len(query_string)
        if code != 400 and size <= MAX_CACHED_BODY_BYTES:
            if len(self._responses) >= MAX_CACHED_RESPONSES or self._cached_bytes + size > MAX_CACHED_TOTAL_BYTES:
                self._responses.clear()
                self._cached_bytes = 0
            previous = self._responses.get(cache_key)
            if previous is not None:
                self._cached_bytes -= len(previous[3]) + len(query_string)
            self._responses[cache_key] = (published, min(valid_until, math.floor(now) + 1.0), code, body, unknown)
            self._cached_bytes += size
        await _respond(send, code, body, _JSON)
        if unknown:
            obs.record_unknown_target(metric)
        return code

    def _compute_value(
        self, query_string: bytes, namespace: str, metric: str, now: float
    ) -> tuple[int, bytes, float, int]:
        """(code, body, valid until, number of unknown targets named)."""
        try:
            selector = parse_query_selector(_label_selector(query_string))
        except (SelectorError, UnicodeDecodeError, ValueError) as exc:
            message = str(exc) if isinstance(exc, SelectorError) else f"invalid query string: {exc}"
            return 400, wire.status(400, "BadRequest", message), now, 0
        result = self.provider.query(metric, namespace, selector, now)
        if isinstance(result, Values):
            if namespace != "*":  # what an HPA (always namespaced) now sees, for dashboards (bounded LRU)
                for target in result.values[:MAX_SERVED_RECORDED]:
                    obs.record_served(metric, target.namespace, target.name, target.value)
            return (
                200,
                wire.external_metric_value_list(metric, result.values, now),
                result.valid_until,
                len(result.unknown),
            )
        if isinstance(result, MetricNotFound):
            return 404, wire.status(404, "NotFound", result.message), math.inf, 0
        # SourceOnHold (stale or never fetched, onStale: Hold) lasts until a fetch succeeds, i.e. a new snapshot.
        return 503, wire.status(503, "ServiceUnavailable", result.message), math.inf, 0


@functools.lru_cache(maxsize=256)
def _latency_child(route: str, code: int) -> Any:
    # Resolving labelled children costs a lock and a dict build per call; there are few combinations.
    return obs.REQUEST_SECONDS.labels(route=route, code=str(code))


def _label_selector(query_string: bytes) -> str:
    """The labelSelector parameter (cached when short: the HPA sends the same query every 15 s)."""
    return _label_selector_cached(query_string) if len(query_string) <= 1024 else _parse_label_selector(query_string)


@functools.lru_cache(maxsize=4096)
def _label_selector_cached(query_string: bytes) -> str:
    return _parse_label_selector(query_string)


def _parse_label_selector(query_string: bytes) -> str:
    if not query_string:
        return ""
    params = parse_qs(
        query_string.decode("utf-8", errors="strict"), keep_blank_values=True, errors="strict", max_num_fields=64
    )
    values = params.get("labelSelector")
    return values[0] if values else ""


async def _respond(send: Send, code: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": code,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


# ---------------------------------------------------------------- everything that is not /apis


def _build_fastapi(app: PrescalerApp, lifespan: Callable[[], Any] | None) -> FastAPI:
    @asynccontextmanager
    async def _lifespan(_: FastAPI) -> AsyncIterator[None]:
        if lifespan is None:
            yield
        else:
            async with lifespan():
                yield

    api = FastAPI(title="prescaler", docs_url=None, redoc_url=None, openapi_url=None, lifespan=_lifespan)

    @api.get("/healthz", response_class=PlainTextResponse)
    @api.get("/livez", response_class=PlainTextResponse)
    async def healthz() -> str:
        return "ok"

    @api.get("/readyz", response_class=PlainTextResponse)
    async def readyz() -> Response:
        if app._ready():
            return PlainTextResponse("ok")
        return PlainTextResponse("not ready: objects not loaded yet\n", status_code=503)

    @api.get("/version")
    async def version() -> JSONResponse:
        return JSONResponse(version_info())

    @api.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(obs.REGISTRY), media_type=CONTENT_TYPE_LATEST)

    @api.get("/openapi/v2")
    async def openapi_v2() -> Response:
        return Response(openapi.v2_bytes(), media_type="application/json")

    @api.get("/openapi/v3")
    async def openapi_v3_root() -> Response:
        return Response(json.dumps(openapi.v3_root()), media_type="application/json")

    @api.get(f"/openapi/v3/apis/{wire.GROUP}/{wire.VERSION}")
    async def openapi_v3_gv() -> Response:
        return Response(openapi.v3_bytes(), media_type="application/json")

    install_preview_routes(api, app.provider)  # read-only, outside the aggregated path

    @api.api_route(
        "/{path:path}", methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"], include_in_schema=False
    )
    async def fallback(path: str) -> Response:
        return PlainTextResponse("404 page not found\n", status_code=404)

    return api
