"""The HTTP layer: external.metrics.k8s.io/v1beta1 plus health, version, metrics and OpenAPI.

`/apis...` is the hot path (the HPA asks every 15 s per metric and HPA), so it is a plain ASGI
handler in front of FastAPI: a lookup in the provider's published snapshot and a few bytes of JSON.
Everything else (health, version, /metrics, OpenAPI, preview) is ordinary FastAPI routes, GET
only: HEAD and the other methods are settled in front of them (HEAD mirrors GET, the rest is a 405).
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

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from adapter import observability as obs
from adapter.api import openapi, wire
from adapter.api.preview_route import install_preview_routes
from adapter.api.provider import MetricNotFound, MetricsProvider, Values
from adapter.labels import Selector, SelectorError, go_quote, int64_error, is_dns1123_label, parse_query_selector
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
_NOT_FOUND_TEXT = b"404 page not found\n"

# A namespace path segment must be a DNS-1123 label (or "*"): it becomes a metric label value and
# is stored in VirtualMetric status, so an arbitrary string must never get that far.
_NAMESPACE_RULE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character, at most 63 characters (regex used for validation "
    "is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_QUOTED_MAX = 64  # characters of a refused value quoted back in a message
_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed"}


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
        # path -> methods of every fixed-path FastAPI route (health, version, /metrics, OpenAPI, preview)
        self._route_methods: dict[str, frozenset[str]] = _route_methods(self.fastapi)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if scope["path"].startswith("/apis"):
                started = time.perf_counter()
                route, code = await self._apis(scope, send)
                _latency_child(route, code).observe(time.perf_counter() - started)
                return
            method = scope["method"]
            if method != "GET":
                # The FastAPI routes answer GET only; settle every other method here, so that HEAD
                # mirrors GET and nothing answers with FastAPI's own {"detail": ...} bodies.
                allowed = self._route_methods.get(scope["path"])
                if allowed is None:
                    await _respond(_without_body(send) if method == "HEAD" else send, 404, _NOT_FOUND_TEXT, _TEXT)
                    return
                if method not in allowed:
                    if method != "HEAD" or "GET" not in allowed:
                        await _respond(send, 405, wire.method_not_allowed(method), _JSON)
                        return
                    scope = {**scope, "method": "GET"}
                    send = _without_body(send)
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
            await _respond(send, 404, _NOT_FOUND_TEXT, _TEXT)
            return "other", 404
        parts = path[len(_VERSION_PREFIX) + 1 :].split("/")
        if len(parts) != 3 or parts[0] != "namespaces" or not parts[1] or not parts[2]:
            await _respond(send, 404, wire.not_found_resource(), _JSON)
            return "other", 404
        if method not in ("GET", "HEAD"):
            await _respond(send, 405, wire.method_not_allowed(method), _JSON)
            return "value", 405
        namespace, metric = parts[1], parts[2]
        if namespace != "*" and not is_dns1123_label(namespace):
            # Before any lookup, forwarding or metric: the namespace becomes a label value and status.
            await _respond(send, 400, _invalid_namespace(namespace), _JSON)
            return "value", 400
        if metric in (".", "..") or "%" in metric:
            # Not a valid path segment (IsValidPathSegmentName; a decoded "/" already split the path
            # above): an HPA cannot name it, and forwarded, the upstream client would collapse the
            # dot segments into another path.
            await _respond(send, 404, _metric_not_found(metric), _JSON)
            return "value", 404
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
            selector, watch = _list_options(query_string)
        except _QueryRefused as exc:
            return exc.code, exc.body, now, 0
        except (SelectorError, UnicodeDecodeError, ValueError) as exc:
            message = str(exc) if isinstance(exc, SelectorError) else f"invalid query string: {exc}"
            return 400, wire.status(400, "BadRequest", message), now, 0
        if watch:
            # What kube-apiserver answers a list-only resource asked to watch (NewMethodNotSupported).
            body = wire.status(
                405,
                "MethodNotAllowed",
                f'watch is not supported on resources of kind "{metric}.{wire.GROUP}"',
                {"group": wire.GROUP, "kind": metric},
            )
            return 405, body, math.inf, 0
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


def _list_options(query_string: bytes) -> tuple[Selector, bool]:
    """The query decoded as ListOptions: (label selector, watch). Raises for a query kube-apiserver
    refuses. Cached when short: the HPA sends the same query every 15 s, so its steady state costs
    one dictionary lookup."""
    if len(query_string) <= 1024:
        return _list_options_cached(query_string)
    return _parse_list_options(query_string)


@functools.lru_cache(maxsize=4096)
def _list_options_cached(query_string: bytes) -> tuple[Selector, bool]:
    return _parse_list_options(query_string)  # exceptions are not cached (refused queries are rare)


class _QueryRefused(Exception):
    """A query string refused before any lookup, with its Status body."""

    def __init__(self, code: int, body: bytes):
        super().__init__(code)
        self.code = code
        self.body = body


def _parse_list_options(query_string: bytes) -> tuple[Selector, bool]:
    """Decode the query as kube-apiserver decodes ListOptions for a list (docs/api.md §1.4).

    In kube's order: the typed fields (an int64 that does not parse is a 400), the label and field
    selectors (400), the list validation (422 Invalid), the field selector's labels (400); a watch
    is refused by the caller (405). Only labelSelector changes the answer.
    """
    if not query_string:
        return parse_query_selector(""), False
    params = parse_qs(
        query_string.decode("utf-8", errors="strict"), keep_blank_values=True, errors="strict", max_num_fields=64
    )
    # A repeated parameter counts with its first value, as in url.Values.
    first = {key: values[0] for key, values in params.items()}
    for key in ("timeoutSeconds", "limit"):
        if key in first:
            _parse_int64(first[key])
    selector = parse_query_selector(first.get("labelSelector", ""))
    field_terms = _parse_field_selector(first.get("fieldSelector", ""))
    watch = "watch" in first and _kube_bool(first["watch"])
    if not watch:
        _validate_list(first)
    for field, _value in field_terms:
        if field not in ("metadata.name", "metadata.namespace"):
            raise _bad_request(
                f'{_go_quote(field)} is not a known field selector: only "metadata.name", "metadata.namespace"'
            )
    return selector, watch


def _bad_request(message: str) -> _QueryRefused:
    return _QueryRefused(400, wire.status(400, "BadRequest", message))


def _go_quote(value: str) -> str:
    """Go's %q, cut to a bounded length (a refused value is never echoed in full)."""
    if len(value) > _QUOTED_MAX:
        return go_quote(value[:_QUOTED_MAX])[:-1] + '..."'
    return go_quote(value)


def _parse_int64(value: str) -> None:
    """strconv.ParseInt(value, 10, 64) as kube decodes an integer parameter: a 400 with Go's error."""
    error = int64_error(value)
    if error:
        raise _bad_request(f"strconv.ParseInt: parsing {_go_quote(value)}: {error}")


def _kube_bool(value: str) -> bool:
    """runtime.Convert_Slice_string_To_bool: only "0" and "false" (any case) are false; anything
    else, even an empty value or "no", is true. It never fails to decode."""
    return not (value == "0" or value.lower() == "false")


def _parse_field_selector(selector: str) -> list[tuple[str, str]]:
    """fields.ParseSelector: comma-separated `k=v`, `k==v`, `k!=v` terms; a backslash
    escapes a backslash, comma or equals sign within a value. The (field, value) terms, sorted as kube sorts them."""
    if not selector:
        return []
    parts: list[str] = []
    start, escaped = 0, False
    for i, c in enumerate(selector):
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif c == ",":
            parts.append(selector[start:i])
            start = i + 1
    parts.append(selector[start:])
    terms: list[tuple[str, str]] = []
    for part in sorted(parts):
        if not part:
            continue
        split = _split_field_term(part)
        if split is None:
            raise _bad_request(f"invalid selector: '{_cut(selector)}'; can't understand '{_cut(part)}'")
        terms.append((split[0], _unescape_field_value(split[1])))
    return terms


def _split_field_term(term: str) -> tuple[str, str] | None:
    for i in range(len(term)):
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], term[i + len(op) :]
    return None


def _unescape_field_value(value: str) -> str:
    out: list[str] = []
    escaped = False
    for c in value:
        if escaped:
            if c not in "\\,=":
                raise _bad_request(f"invalid field selector: invalid escape sequence: \\{c}")
            out.append(c)
            escaped = False
        elif c == "\\":
            escaped = True
        elif c in ",=":
            # Go prints the rune with %v: its code point.
            raise _bad_request(f"invalid field selector: unescaped character in value: {ord(c)}")
        else:
            out.append(c)
    if escaped:
        raise _bad_request("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def _cut(value: str) -> str:
    return value if len(value) <= _QUOTED_MAX else value[:_QUOTED_MAX] + "..."


def _validate_list(first: dict[str, str]) -> None:
    """metainternalversion validation.ValidateListOptions for a list (not a watch): 422 Invalid."""
    errors: list[tuple[str, str, str]] = []  # (field, cause reason, body)
    match = first.get("resourceVersionMatch", "")
    if match:
        if not first.get("resourceVersion", ""):
            errors.append(
                (
                    "resourceVersionMatch",
                    "FieldValueForbidden",
                    "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
                )
            )
        if first.get("continue", ""):
            errors.append(
                (
                    "resourceVersionMatch",
                    "FieldValueForbidden",
                    "Forbidden: resourceVersionMatch is forbidden when continue is provided",
                )
            )
        if match not in ("Exact", "NotOlderThan"):
            errors.append(
                (
                    "resourceVersionMatch",
                    "FieldValueNotSupported",
                    f'Unsupported value: {_go_quote(match)}: supported values: "Exact", "NotOlderThan", ""',
                )
            )
        if match == "Exact" and first.get("resourceVersion") == "0":
            errors.append(
                (
                    "resourceVersionMatch",
                    "FieldValueForbidden",
                    'Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
                )
            )
    if "sendInitialEvents" in first:
        errors.append(
            ("sendInitialEvents", "FieldValueForbidden", "Forbidden: sendInitialEvents is forbidden for list")
        )
    if not errors:
        return
    texts = [f"{field}: {body}" for field, _, body in errors]
    listed = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details = {
        "group": "meta.k8s.io",
        "kind": "ListOptions",
        "causes": [{"reason": reason, "message": body, "field": field} for field, reason, body in errors],
    }
    raise _QueryRefused(422, wire.status(422, "Invalid", f'ListOptions.meta.k8s.io "" is invalid: {listed}', details))


def _invalid_namespace(namespace: str) -> bytes:
    return wire.status(400, "BadRequest", f"invalid namespace {_go_quote(namespace)}: {_NAMESPACE_RULE}")


def _metric_not_found(metric: str) -> bytes:
    # The same Status a metric prescaler does not define gets (adapter.pipeline.query).
    return wire.status(404, "NotFound", f"the server could not find the metric {_cut(metric)} for namespaces")


async def _respond(send: Send, code: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": code,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _without_body(send: Send) -> Send:
    """HEAD: the GET answer's status and headers (Content-Length included), no body."""

    async def send_head(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.body":
            message = {**message, "body": b""}
        await send(message)

    return send_head


def _route_methods(api: FastAPI) -> dict[str, frozenset[str]]:
    """Fixed paths of the FastAPI app and their methods (the catch-all fallback has a parameter)."""
    routes: dict[str, frozenset[str]] = {}
    for route in api.routes:
        path = getattr(route, "path", None)
        methods = getattr(route, "methods", None)
        if isinstance(path, str) and methods and "{" not in path:
            routes[path] = routes.get(path, frozenset()) | frozenset(methods)
    return routes


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

    # Never FastAPI's {"detail": ...}: every error is a metav1.Status (PrescalerApp settles methods
    # before FastAPI sees them; these cover whatever still gets here).
    @api.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 405 and request.scope["path"] in app._route_methods:
            body = wire.method_not_allowed(request.method)
        elif exc.status_code in (404, 405):  # 405 from the catch-all: an unknown path
            return Response(_NOT_FOUND_TEXT, status_code=404, media_type="text/plain; charset=utf-8")
        else:
            body = wire.status(exc.status_code, _REASONS.get(exc.status_code, "BadRequest"), str(exc.detail))
        return Response(body, status_code=exc.status_code, media_type="application/json")

    @api.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> Response:
        body = wire.status(400, "BadRequest", f"invalid request: {len(exc.errors())} invalid parameter(s)")
        return Response(body, status_code=400, media_type="application/json")

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
    async def fallback(request: Request) -> Response:
        if request.scope["path"] in app._route_methods:  # a fixed route asked with another method
            return Response(wire.method_not_allowed(request.method), status_code=405, media_type="application/json")
        return Response(_NOT_FOUND_TEXT, status_code=404, media_type="text/plain; charset=utf-8")

    return api
