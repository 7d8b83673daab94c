"""Writes the engine's status of each VirtualMetric / VirtualMetricEvent through the status subresource.

Input: ``desired() -> {(kind, name): (generation, status)}`` (built by the engine, called from this
writer's thread, so it must be thread-safe) and ``notify()`` when something may have changed.

How a write is decided, per object:

* **Only on change.** The writer knows the status currently on the server (read once with a GET,
  then the result of each write; forgotten every ``resync_interval`` and on leadership change, so
  edits by others are noticed). The desired status is completed first: ``observedGeneration`` (on
  the status and on each condition) defaults to the object's generation, and a condition whose
  ``status`` did not change keeps the ``lastTransitionTime`` already on the server (the
  ``meta.SetStatusCondition`` rule), so an engine stamping "now" on every evaluation causes no
  churn. Equal to the server's status -> no request.
* **Merge patch** (``application/merge-patch+json``) of the status subresource: fields the writer no
  longer wants are sent as ``null``, lists (conditions, targets) are replaced whole. No
  resourceVersion precondition: the status belongs to prescaler alone, the latest desired state is
  always right, so a 409 can only come from a misbehaving server and is retried like any error.
* **Rate limit with coalescing.** At most one write per object per ``min_interval``; changes in
  between are not queued, the next write simply carries the latest desired status.
* **Events.** With an `EventRecorder`, every condition whose status or reason a write changes becomes
  a Kubernetes Event on the object (rate-limited; see `adapter.store.events`).
* **Errors never escape.** A failed write is retried with capped exponential backoff + jitter per
  object; 404 (object deleted meanwhile) drops the object. The server keeps serving.

**Two replicas: a Lease, not idempotent racing.** Idempotent rate-limited writes from every replica
would still fight: each replica has its own fetch times (``lastSuccessfulFetchTime``), its own view
of a flapping source, so their statuses differ and they would overwrite each other every
``min_interval`` and flip conditions back and forth. With a ``coordination.k8s.io`` Lease
(`adapter.store.lease.LeaseElector`) only the holder writes; the others take over within
``lease_duration`` (immediately when the holder releases on shutdown). Every replica keeps serving
values -- the Lease only guards status writes. Without an elector (``elector=None``) the writer
always writes: a single replica, or tests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from adapter import timefmt
from adapter.resources import GROUP, VERSION
from adapter.store.backoff import Backoff
from adapter.store.events import EventRecorder, condition_changes
from adapter.store.kube import PLURALS
from adapter.store.lease import LeaseElector

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (kind, name)
Desired = Mapping[Key, tuple[int, Mapping[str, Any]]]
_UNKNOWN = object()


rfc3339_now = timefmt.rfc3339_now  # kept importable from here for callers of the writer


def complete_status(
    generation: int, desired: Mapping[str, Any], current: Mapping[str, Any] | None, now: str
) -> dict[str, Any]:
    """The status to store: `desired` with observedGeneration filled in and stable lastTransitionTimes."""
    status = dict(desired)
    status.setdefault("observedGeneration", generation)
    if isinstance(status.get("conditions"), list):
        existing = {c.get("type"): c for c in (current or {}).get("conditions") or [] if isinstance(c, Mapping)}
        conditions = []
        for cond in status["conditions"]:
            cond = dict(cond)
            cond.setdefault("observedGeneration", generation)
            old = existing.get(cond.get("type"))
            if old is not None and old.get("status") == cond.get("status") and old.get("lastTransitionTime"):
                cond["lastTransitionTime"] = old["lastTransitionTime"]
            elif not cond.get("lastTransitionTime"):
                cond["lastTransitionTime"] = now
            conditions.append(cond)
        status["conditions"] = conditions
    return status


def status_patch(target: Mapping[str, Any], current: Mapping[str, Any] | None) -> dict[str, Any]:
    """Merge patch turning `current` into `target` (top-level fields of status)."""
    patch: dict[str, Any] = {k: None for k in (current or {}) if k not in target}
    patch.update(target)
    return {"status": patch}


class StatusWriter:
    def __init__(
        self,
        api_client: client.ApiClient,
        desired: Callable[[], Desired],
        *,
        elector: LeaseElector | None = None,
        min_interval: float = 5.0,
        resync_interval: float = 300.0,
        idle_poll: float = 10.0,
        backoff_initial: float = 1.0,
        backoff_max: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], str] = rfc3339_now,
        request_timeout: float = 10.0,
        events: EventRecorder | None = None,
    ):
        self.api = client.CustomObjectsApi(api_client)
        self.events = events  # Kubernetes Events for condition changes (cluster mode)
        self.desired = desired
        self.elector = elector
        if elector is not None and elector.on_change is None:
            elector.on_change = lambda leader: self.notify()  # write at once after winning the Lease
        self.min_interval = min_interval
        self.resync_interval = resync_interval
        self.idle_poll = idle_poll
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.request_timeout = request_timeout
        self._clock = clock
        self._now = now
        self._known: dict[Key, Any] = {}  # status on the server as far as we know
        self._last_write: dict[Key, float] = {}
        self._retry_at: dict[Key, float] = {}
        self._backoff: dict[Key, Backoff] = {}
        self._was_leader = False
        self._last_resync = clock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.writes = 0  # successful status writes (tests, metrics)
        self.errors = 0

    # ---------------------------------------------------------------- public

    def notify(self) -> None:
        """Something may have changed; safe to call from any thread or the event loop."""
        self._wake.set()

    def start(self) -> None:
        if self._thread is None:
            if self.elector is not None:
                self.elector.start()
            self._thread = threading.Thread(target=self._run, name="status-writer", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if self.elector is not None:
            self.elector.stop(release=True)

    def sync_once(self) -> float | None:
        """Write what needs writing now; returns seconds until a rate-limited write is due (or None)."""
        if self.elector is not None and not self.elector.is_leader:
            self._was_leader = False
            return None
        if not self._was_leader or self._clock() - self._last_resync >= self.resync_interval:
            # New leader (the old one wrote meanwhile) or periodic resync: re-read server state.
            self._known.clear()
            self._last_resync = self._clock()
            self._was_leader = True
        try:
            desired = dict(self.desired())
        except Exception:
            log.exception("status: desired() failed")
            return self.backoff_initial
        next_due: float | None = None
        for key, (generation, status) in desired.items():
            wait = self._sync_object(key, generation, status)
            if wait is not None:
                next_due = wait if next_due is None else min(next_due, wait)
        for gone in set(self._known) | set(self._last_write) | set(self._retry_at):
            if gone not in desired:
                self._forget(gone)
        return next_due

    # ---------------------------------------------------------------- one object

    def _sync_object(self, key: Key, generation: int, status: Mapping[str, Any]) -> float | None:
        now = self._clock()
        retry_at = self._retry_at.get(key)
        if retry_at is not None and now < retry_at:
            return retry_at - now
        kind, name = key
        plural = PLURALS.get(kind)
        if plural is None:
            log.warning("status: unknown kind %r for %s", kind, name)
            return None
        try:
            current = self._known.get(key, _UNKNOWN)
            if current is _UNKNOWN:
                # The object itself, not .../status: RBAC grants get on the resource and only
                # update/patch on the status subresource (least privilege), and both carry the status.
                obj: Any = self.api.get_cluster_custom_object(
                    GROUP, VERSION, plural, name, _request_timeout=self.request_timeout
                )
                current = obj.get("status") or {}
                self._known[key] = current
            target = complete_status(generation, status, current, self._now())
            if target == current:
                return None
            due = self._last_write.get(key, float("-inf")) + self.min_interval
            if now < due:
                return due - now  # coalesce: the write at `due` carries whatever is desired then
            result: Any = self.api.patch_cluster_custom_object_status(
                GROUP, VERSION, plural, name, status_patch(target, current), _request_timeout=self.request_timeout
            )
            self._known[key] = (result or {}).get("status") or target
            self._last_write[key] = self._clock()
            if self.events is not None:
                uid = ((result or {}).get("metadata") or {}).get("uid")
                for change in condition_changes(kind, name, current, target):
                    self.events.record(change, uid)
            self._retry_at.pop(key, None)
            self._backoff.pop(key, None)
            self.writes += 1
            return None
        except ApiException as exc:
            if exc.status == 404:
                self._forget(key)  # deleted meanwhile; the watch will tell the engine
                return None
            return self._failed(key, f"API error {exc.status} {exc.reason}")
        except Exception as exc:  # noqa: BLE001 - transport errors, odd responses: retry later
            return self._failed(key, f"{type(exc).__name__}: {exc}")

    def _failed(self, key: Key, why: str) -> float:
        self.errors += 1
        self._known.pop(key, None)  # re-read before the next attempt
        backoff = self._backoff.setdefault(key, Backoff(self.backoff_initial, self.backoff_max))
        delay = backoff.next()
        self._retry_at[key] = self._clock() + delay
        log.warning("status of %s/%s not written (%s); retrying in %.1fs", key[0], key[1], why, delay)
        return delay

    def _forget(self, key: Key) -> None:
        if self.events is not None and key in self._last_write:
            self.events.forget(*key)
        for table in (self._known, self._last_write, self._retry_at, self._backoff):
            table.pop(key, None)  # type: ignore[attr-defined]

    # ---------------------------------------------------------------- thread

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                wait = self.sync_once()
            except Exception:
                log.exception("status writer step failed")
                wait = self.backoff_initial
            limit = self.idle_poll
            if self.elector is not None:
                limit = min(limit, self.elector.renew_interval)  # notice a leadership change soon
            self._wake.wait(limit if wait is None else min(wait, limit))
