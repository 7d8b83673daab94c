"""VirtualMetric / VirtualMetricEvent objects from the Kubernetes API (list + watch), fed to the engine.

One reflector thread per kind does what client-go's reflector does:

1. **List** the collection, hand the complete set to ``sink.resync(kind, docs)`` (the engine deletes
   what is no longer there), remember the list's ``metadata.resourceVersion``.
2. **Watch** from that resourceVersion with ``allowWatchBookmarks=true`` and a server-side
   ``timeoutSeconds``; ADDED/MODIFIED -> ``sink.apply(doc)``, DELETED -> ``sink.delete(kind, name)``,
   BOOKMARK -> only the resourceVersion advances (so a later resume does not replay or hit 410).
3. A stream that ends normally (server timeout, clean close) is resumed from the last
   resourceVersion *without* a re-list. **410 Gone** (ERROR event or HTTP 410: history compacted)
   forces a re-list, whose resync removes objects deleted while we were not watching. Any other
   failure (connection reset, TLS, 5xx, 429) is retried with capped exponential backoff plus jitter,
   resuming from the last resourceVersion.

The blocking kubernetes client runs in daemon threads; the sink is called from those threads (the
engine marshals the calls onto its event loop). A sink that raises is logged and never stops the
watch: one broken object must not affect another (docs/failure-rules.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from adapter import heap
from adapter.resources import API_VERSION, GROUP, KIND_EVENT, KIND_METRIC, VERSION
from adapter.store.backoff import Backoff

log = logging.getLogger(__name__)

PLURALS = {KIND_METRIC: "virtualmetrics", KIND_EVENT: "virtualmetricevents"}


class ObjectSink(Protocol):
    def apply(self, doc: Mapping[str, Any]) -> None: ...

    def delete(self, kind: str, name: str) -> None: ...

    def resync(self, kind: str, docs: list[Mapping[str, Any]]) -> None: ...


class KubeConfigError(RuntimeError):
    """No usable cluster credentials (neither in-cluster nor a kubeconfig)."""


def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """An ApiClient from ``--kubeconfig`` if given, else in-cluster config, else ~/.kube/config."""
    if kubeconfig:
        try:
            return config.new_client_from_config(config_file=kubeconfig, context=context)
        except Exception as exc:  # noqa: BLE001 - YAML, I/O and config errors all mean "unusable"
            raise KubeConfigError(f"cannot load kubeconfig {kubeconfig}: {exc}") from None
    cfg = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=cfg)
        return client.ApiClient(cfg)
    except config.ConfigException as in_cluster_error:
        try:
            return config.new_client_from_config(context=context)
        except Exception as exc:  # noqa: BLE001
            raise KubeConfigError(
                f"not running in a cluster ({in_cluster_error}) and no usable "
                f"kubeconfig ({exc}); pass --kubeconfig or --manifests"
            ) from None


class _Gone(Exception):
    """The resourceVersion we hold is no longer in the API server's history."""


class _Reflector:
    """List + watch of one kind; see the module docstring."""

    def __init__(self, store: KubeStore, kind: str):
        self.store = store
        self.kind = kind
        self.plural = PLURALS[kind]
        self.resource_version: str | None = None
        self.listed = threading.Event()
        self.lists = 0  # how many full lists were done (tests, metrics)
        self._watch: watch.Watch | None = None
        self._backoff = Backoff(store.backoff_initial, store.backoff_max, store.rng)
        self.thread = threading.Thread(target=self._run, name=f"kube-watch-{self.plural}", daemon=True)

    # ---------------------------------------------------------------- loop

    def _run(self) -> None:
        stop = self.store._stop
        while not stop.is_set():
            try:
                if self.resource_version is None:
                    self._list()
                self._watch_once()
            except _Gone:
                log.info("%s: resourceVersion %s expired (410 Gone); re-listing", self.plural, self.resource_version)
                self.resource_version = None
                # A re-list is the normal cure for 410; wait only if 410s repeat back to back.
                if self._backoff.attempts and stop.wait(self._backoff.next()):
                    return
                self._backoff.attempts += 1
            except Exception as exc:  # noqa: BLE001 - any API/transport error: back off, never die
                if stop.is_set():
                    return
                delay = self._backoff.next()
                log.warning("%s: %s; retrying in %.1fs", self.plural, _describe(exc), delay)
                if stop.wait(delay):
                    return

    def _api(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.store.api_client)

    def _list(self) -> None:
        started = time.monotonic()
        try:
            # The answer is parsed inside the call: 100 000 targets' events are 10 MB of JSON, which
            # took 0.45 s to parse with the collector walking the growing result again and again,
            # 0.15 s without (adapter.heap; what the list brings is kept, not garbage).
            with heap.no_collection():
                result: Any = self._api().list_cluster_custom_object(
                    GROUP, VERSION, self.plural, _request_timeout=self.store.request_timeout
                )
        except ApiException as exc:
            if exc.status == 410:
                raise _Gone() from None
            raise
        docs = [self._complete(item) for item in result.get("items") or []]
        log.info("listed %d %s in %.2f s", len(docs), self.plural, time.monotonic() - started)
        self.store._call_sink("resync", self.kind, docs)
        self.resource_version = str((result.get("metadata") or {}).get("resourceVersion") or "") or None
        self.lists += 1
        self.listed.set()

    def _watch_once(self) -> None:
        started = time.monotonic()
        events = 0
        w = watch.Watch()
        self._watch = w
        if self.store._stop.is_set():
            return
        timeout = self.store.watch_timeout
        try:
            stream = w.stream(
                self._list_for_watch(),
                GROUP,
                VERSION,
                self.plural,
                resource_version=self.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=max(1, int(timeout)),
                # A read timeout past the server-side timeout detects dead connections.
                _request_timeout=(self.store.request_timeout, timeout + 30),
            )
            for event in stream:
                events += 1
                self._handle(event)
                if self.store._stop.is_set():
                    break
        except ApiException as exc:
            if exc.status == 410:
                raise _Gone() from None
            raise
        finally:
            self._watch = None
        if events or time.monotonic() - started >= min(5.0, timeout / 2):
            self._backoff.reset()  # a healthy stream: resume at once
        elif not self.store._stop.is_set():
            # A server that closes watches at once would make us spin; treat that as a failure.
            self.store._stop.wait(self._backoff.next())

    def _list_for_watch(self) -> Callable[..., Any]:
        """The list call, in a form whose events the watch hands over as parsed JSON.

        Given the generated method, the watch finds its return type (`object`) and "deserializes"
        every event into it: json.dumps and json.loads of an object it has just parsed, about 4 ms of
        this thread's time (with the GIL) for each 100 KB event. Without a return annotation it does not."""
        api = self._api()

        def list_objects(*args: Any, **kwargs: Any):  # type: ignore[no-untyped-def]  # no annotation: see above
            return api.list_cluster_custom_object(*args, **kwargs)

        return list_objects

    def _handle(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("raw_object") or event.get("object") or {}
        meta = obj.get("metadata") or {} if isinstance(obj, Mapping) else {}
        rv = meta.get("resourceVersion")
        if kind == "BOOKMARK":
            pass
        elif kind in ("ADDED", "MODIFIED"):
            self.store._call_sink("apply", self._complete(obj))
        elif kind == "DELETED":
            if meta.get("name"):
                self.store._call_sink("delete", self.kind, meta["name"])
        else:
            log.warning("%s: ignoring watch event of type %r", self.plural, kind)
        if rv:
            self.resource_version = str(rv)

    def _complete(self, item: Mapping[str, Any]) -> dict[str, Any]:
        # The API server sends kind/apiVersion on custom-resource list items, but the engine routes on
        # doc["kind"], so make sure they are there whatever the server does.
        doc = dict(item)
        doc.setdefault("kind", self.kind)
        doc.setdefault("apiVersion", API_VERSION)
        return doc

    def stop(self) -> None:
        w = self._watch
        if w is not None:
            w.stop()  # shuts the socket down, unblocking the read


class KubeStore:
    """Watches both kinds and feeds `sink`. `ready` turns true after the first list of each kind."""

    def __init__(
        self,
        api_client: client.ApiClient,
        sink: ObjectSink,
        *,
        kinds: tuple[str, ...] = (KIND_METRIC, KIND_EVENT),
        watch_timeout: float = 300.0,
        request_timeout: float = 30.0,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        rng: Any = None,
        on_sink_error: Callable[[Exception], None] | None = None,
    ):
        self.api_client = api_client
        self.sink = sink
        self.watch_timeout = watch_timeout
        self.request_timeout = request_timeout
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.rng = rng
        self.on_sink_error = on_sink_error
        self._stop = threading.Event()
        self._reflectors = {kind: _Reflector(self, kind) for kind in kinds}
        self._started = False

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        for reflector in self._reflectors.values():
            reflector.thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout
        # Repeat the socket shutdown: a watch that was just being opened has no socket to shut yet.
        while time.monotonic() < deadline:
            alive = [r for r in self._reflectors.values() if r.thread.is_alive()]
            if not alive:
                return
            for reflector in alive:
                reflector.stop()
                reflector.thread.join(0.05)
        log.warning("kube store: watch threads still running after %.1fs (daemon threads)", timeout)

    @property
    def ready(self) -> bool:
        return all(r.listed.is_set() for r in self._reflectors.values())

    def wait_ready(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for reflector in self._reflectors.values():
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not reflector.listed.wait(remaining):
                return False
        return True

    def resource_version(self, kind: str) -> str | None:
        return self._reflectors[kind].resource_version

    def list_count(self, kind: str) -> int:
        return self._reflectors[kind].lists

    def _call_sink(self, method: str, *args: Any) -> None:
        try:
            getattr(self.sink, method)(*args)
        except Exception as exc:
            log.exception("object sink %s failed", method)
            if self.on_sink_error is not None:
                self.on_sink_error(exc)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"API error {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"
