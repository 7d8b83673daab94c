"""Forward value requests for metrics prescaler does not define to an upstream external-metrics adapter.

Rules (each one tested in tests/upstream/test_upstream*.py):

* **Own identity.** The caller was already authenticated and authorized by prescaler (the auth
  middleware runs before the API). The upstream gets a fresh request carrying only prescaler's own
  credentials (a bearer token read from ``--upstream-token-file``, re-read when the file changes, or
  a client certificate) and a fixed ``Accept``/``User-Agent``: no caller header is ever copied, so a
  caller's token or ``X-Remote-User`` cannot reach the upstream.
* **Same path and query**, raw, as the caller sent them.
* **Unchanged answers.** The upstream's status code, body and content type are returned as they
  are (a 404 or 500 ``Status`` from the upstream stays the upstream's); only the size is limited.
  Redirects are not followed.
* **Bounded failure.** One deadline covers the whole exchange (waiting for a pooled connection,
  connecting, TLS, headers and body); when it passes the caller gets a 504 ``Status``, and an upstream
  that refuses or resets the connection gives a 503 ``Status`` at once. No retries: the HPA asks again
  in 15 s anyway, and a retrying proxy multiplies load on an upstream that is already struggling.
* **Isolation.** Requests for prescaler's own metrics never come here, and nothing here holds a lock
  or blocks the event loop, so a hanging upstream costs only the forwarded requests (bounded by the
  connection-pool limit) and never delays prescaler's own answers.
* **Discovery** is served from a cache refreshed in the background; while the upstream is down the
  last names it listed keep being merged in. A name defined by both sides is served by prescaler
  (its request never reaches the upstream); that is logged once per name and exposed through
  `Passthrough.shadowed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import unquote

import httpx

from adapter import __version__
from adapter.upstream import metrics as m
from adapter.upstream.config import UpstreamConfig

log = logging.getLogger("prescaler.upstream")

DISCOVERY_PATH = "/apis/external.metrics.k8s.io/v1beta1"
_JSON = "application/json"
_MAX_NAMES = 10_000


@dataclass(frozen=True)
class Answer:
    """What to send back to the caller."""

    code: int
    body: bytes
    content_type: str


def status_body(code: int, reason: str, message: str) -> bytes:
    """A metav1.Status failure, field order as the Go type serialises it."""
    return json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        },
        separators=(",", ":"),
    ).encode()


class _TooLarge(Exception):
    pass


class _TokenFile:
    """A bearer token file, re-read when it changes (projected service-account tokens rotate)."""

    def __init__(self, path: str | None):
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._token = ""

    def header(self) -> str | None:
        if not self.path:
            return None
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp != self._stamp:
                with open(self.path, encoding="utf-8") as f:
                    self._token = f.read().strip()
                self._stamp = stamp
        except OSError as exc:
            # Keep the last token: a rotation in progress must not fail requests.
            log.warning("upstream token file %s unreadable (%s); using the last token read", self.path, exc)
        return f"Bearer {self._token}" if self._token else None


class Passthrough:
    """The upstream client: `forward` for value requests, `merged_names` for discovery."""

    def __init__(
        self,
        config: UpstreamConfig,
        *,
        own_names: Callable[[], Iterable[str]] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.config = config
        self._own_names = own_names
        self._transport = transport
        self._token = _TokenFile(config.token_file)
        self._client: httpx.AsyncClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._names: tuple[str, ...] = ()
        self._shadowed: frozenset[str] = frozenset()
        self._reported_shadowed: set[str] = set()
        self._merged: tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]] = ((), (), ())
        self.on_shadowed_change: Callable[[], None] | None = None  # e.g. the status writer's notify
        self.discovery_refreshes = 0  # successful refreshes (tests, logs)
        self.last_discovery_error: str | None = None
        if config.insecure_skip_verify:
            log.warning("upstream %s: TLS verification is OFF (--upstream-insecure-skip-tls-verify)", config.url)

    # ---------------------------------------------------------------- lifecycle

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            limits = httpx.Limits(
                max_connections=self.config.max_connections,
                max_keepalive_connections=self.config.max_connections,
                keepalive_expiry=30.0,
            )
            self._client = httpx.AsyncClient(
                verify=self.config.ssl_context(),
                limits=limits,
                timeout=httpx.Timeout(self.config.timeout),
                follow_redirects=False,
                trust_env=False,
                transport=self._transport,
            )
        return self._client

    async def start(self) -> None:
        """Open the pool and start refreshing discovery in the background (startup never waits for it)."""
        self._http()
        if self._task is None:
            self._task = asyncio.create_task(self._discovery_loop(), name="upstream-discovery")
        log.info(
            "upstream passthrough to %s (timeout %.1fs, pool %d)",
            self.config.url,
            self.config.timeout,
            self.config.max_connections,
        )

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # ---------------------------------------------------------------- value requests

    async def forward(self, method: str, raw_path: bytes | str, query_string: bytes = b"") -> Answer:
        """Send the caller's path and query to the upstream with prescaler's identity; never raises."""
        path = raw_path.decode("latin-1") if isinstance(raw_path, bytes) else raw_path
        if _has_dot_segment(path):
            # The HTTP client would collapse it (`.../ns-1/..` -> `.../namespaces`): never forward a
            # path other than the caller's. The API layer refuses these first; this is the backstop.
            return Answer(404, status_body(404, "NotFound", "the server could not find the requested resource"), _JSON)
        query = query_string.decode("latin-1")
        return await self._exchange(
            "value", method if method in ("GET", "HEAD") else "GET", path + (f"?{query}" if query else "")
        )

    async def _exchange(self, kind: str, method: str, path_and_query: str) -> Answer:
        url = self.config.base_url + path_and_query
        headers = {"Accept": _JSON, "User-Agent": f"prescaler/{__version__} (upstream passthrough)"}
        auth = self._token.header()
        if auth:
            headers["Authorization"] = auth
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.config.timeout):
                async with self._http().stream(method, url, headers=headers) as response:
                    body = await self._read_limited(response)
                    answer = Answer(response.status_code, body, _content_type(response.headers.get("content-type")))
        except _TooLarge:
            answer = self._failure(
                kind,
                "too_large",
                503,
                "ServiceUnavailable",
                f"the upstream metrics adapter's answer exceeds {self.config.max_response_bytes} bytes",
            )
        except (TimeoutError, httpx.TimeoutException):
            answer = self._failure(
                kind,
                "timeout",
                504,
                "Timeout",
                f"the upstream metrics adapter did not answer within {self.config.timeout:g}s",
            )
        except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
            answer = self._failure(
                kind,
                "unavailable",
                503,
                "ServiceUnavailable",
                f"the upstream metrics adapter is unavailable: {type(exc).__name__}",
            )
            log.debug("upstream %s %s failed: %r", method, path_and_query, exc)
        except Exception as exc:  # noqa: BLE001 - a surprise must cost this request only, never a 500
            log.exception("upstream %s %s failed unexpectedly", method, path_and_query)
            answer = self._failure(
                kind,
                "unavailable",
                503,
                "ServiceUnavailable",
                f"the upstream metrics adapter is unavailable: {type(exc).__name__}",
            )
        else:
            m.UPSTREAM_REQUESTS.labels(kind=kind, code=str(answer.code)).inc()
        m.UPSTREAM_SECONDS.labels(kind=kind).observe(time.perf_counter() - started)
        return answer

    async def _read_limited(self, response: httpx.Response) -> bytes:
        limit = self.config.max_response_bytes
        declared = response.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise _TooLarge()
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_raw():
            size += len(chunk)
            if size > limit:
                raise _TooLarge()
            chunks.append(chunk)
        return b"".join(chunks)

    def _failure(self, kind: str, reason: str, code: int, status_reason: str, message: str) -> Answer:
        m.UPSTREAM_REQUESTS.labels(kind=kind, code=reason).inc()
        m.UPSTREAM_ERRORS.labels(kind=kind, reason=reason).inc()
        return Answer(code, status_body(code, status_reason, message), _JSON)

    # ---------------------------------------------------------------- discovery

    @property
    def names(self) -> tuple[str, ...]:
        """The upstream's metric names as last listed (kept while the upstream is down)."""
        return self._names

    async def refresh_discovery(self) -> bool:
        """Fetch the upstream's APIResourceList once; on any failure keep the cached names."""
        answer = await self._exchange("discovery", "GET", DISCOVERY_PATH)
        if answer.code != 200:
            self.last_discovery_error = f"HTTP {answer.code}: {answer.body[:200]!r}"
            log.warning(
                "upstream discovery failed (%s); serving the %d cached names",
                self.last_discovery_error,
                len(self._names),
            )
            return False
        try:
            names = parse_resource_list(answer.body)
        except ValueError as exc:
            m.UPSTREAM_ERRORS.labels(kind="discovery", reason="invalid").inc()
            self.last_discovery_error = str(exc)
            log.warning("upstream discovery answer unusable (%s); serving the %d cached names", exc, len(self._names))
            return False
        if names != self._names:
            log.info("upstream lists %d metric names", len(names))
        self._names = names
        self.last_discovery_error = None
        self.discovery_refreshes += 1
        m.UPSTREAM_METRICS.set(len(names))
        m.UPSTREAM_DISCOVERY_SUCCESS.set(time.time())
        if self._own_names is not None:
            self._note_shadowed(self.shadowed_among(self._own_names()))
        return True

    async def _discovery_loop(self) -> None:
        while True:
            try:
                await self.refresh_discovery()
            except Exception:  # noqa: BLE001 - the loop must outlive any surprise
                log.exception("upstream discovery refresh failed")
            await asyncio.sleep(self.config.discovery_interval)

    def merged_names(self, own: Iterable[str]) -> tuple[str, ...]:
        """prescaler's names plus the upstream's cached ones, sorted; records names defined by both."""
        own_t = tuple(own)
        cached_own, cached_up, merged = self._merged
        if own_t == cached_own and self._names is cached_up:
            return merged
        merged = tuple(sorted(set(own_t) | set(self._names)))
        self._note_shadowed(self.shadowed_among(own_t))
        self._merged = (own_t, self._names, merged)
        return merged

    def shadowed_among(self, own: Iterable[str]) -> frozenset[str]:
        return frozenset(own) & frozenset(self._names)

    @property
    def shadowed(self) -> frozenset[str]:
        """Metric names both sides define, as last seen; prescaler serves them (for status and logs)."""
        return self._shadowed

    def _note_shadowed(self, shadowed: frozenset[str]) -> None:
        changed = shadowed != self._shadowed
        self._shadowed = shadowed
        if changed and self.on_shadowed_change is not None:
            self.on_shadowed_change()
        m.UPSTREAM_SHADOWED.set(len(shadowed))
        for name in sorted(shadowed - self._reported_shadowed):
            log.warning(
                "metric %r is defined by prescaler and by the upstream adapter; prescaler's VirtualMetric "
                "is served and the upstream's is hidden",
                name,
            )
        self._reported_shadowed |= shadowed


def _has_dot_segment(path: str) -> bool:
    """A "." or ".." segment, also percent-encoded (%2E), which URL normalisation would remove."""
    return any(unquote(segment) in (".", "..") for segment in path.split("/"))


def _content_type(value: str | None) -> str:
    """The upstream's Content-Type, unless it is not a plain header value (then JSON, the API's type)."""
    if value and len(value) <= 256 and value.isascii() and value.isprintable():
        return value
    return _JSON


def parse_resource_list(body: bytes) -> tuple[str, ...]:
    """Metric names from an APIResourceList body; ValueError when it is not one."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("kind") != "APIResourceList":
        raise ValueError("not an APIResourceList")
    resources = doc.get("resources")
    if not isinstance(resources, list):
        raise ValueError("APIResourceList without a resources list")
    names = {
        r["name"]
        for r in resources
        if isinstance(r, dict) and isinstance(r.get("name"), str) and r["name"] and "/" not in r["name"]
    }
    if len(names) > _MAX_NAMES:
        raise ValueError(f"more than {_MAX_NAMES} metric names")
    return tuple(sorted(names))
