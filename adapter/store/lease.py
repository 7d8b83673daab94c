"""Leader election with a coordination.k8s.io/v1 Lease, the way client-go's leaderelection does it.

Only the holder writes status (`adapter.store.status`); every replica keeps serving metric values.

* A replica acquires the Lease when it does not exist, has no holder, or its record has not changed
  for ``leaseDurationSeconds`` *as measured on this replica's own monotonic clock* since the record
  was first observed. Like client-go we never compare the holder's ``renewTime`` with our wall
  clock, so clock skew between nodes cannot make two replicas leaders.
* The holder renews every ``renew_interval``; followers look every ``retry_interval`` (shorter), so
  after the holder dies the Lease changes hands within lease_duration + 2 x retry_interval
  (15 s + 2 s with the defaults: client-go's 2 s retry would leave 1 s of a 20 s failover goal for
  the API server's latency; a follower's look is one GET a second). Every write is a PUT carrying
  the observed ``resourceVersion``, so two replicas racing for the Lease cannot both win (one gets
  409).
* ``is_leader`` turns false by itself once ``lease_duration`` has passed since our last successful
  renewal, even if the API server is unreachable: by then another replica may have taken over.
* ``stop(release=True)`` clears the holder so another replica takes over at once (rolling updates).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

log = logging.getLogger(__name__)


def micro_time(now: dt.datetime | None = None) -> str:
    """metav1.MicroTime text."""
    now = now or dt.datetime.now(dt.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    # POD_NAME via the downward API when set; the suffix keeps two processes on one host distinct.
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


class LeaseElector:
    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        name: str = "prescaler-status-writer",
        *,
        identity: str | None = None,
        lease_duration: float = 15.0,
        renew_interval: float = 5.0,
        retry_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[bool], None] | None = None,
    ):
        if renew_interval >= lease_duration:
            raise ValueError("renew_interval must be shorter than lease_duration")
        self.api = client.CoordinationV1Api(api_client)
        self.namespace = namespace
        self.name = name
        self.identity = identity or default_identity()
        self.lease_duration = lease_duration
        self.renew_interval = renew_interval
        self.retry_interval = min(retry_interval, renew_interval)
        self.on_change = on_change
        self._clock = clock
        self._leader = False
        self._renewed_at = float("-inf")
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = float("-inf")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def is_leader(self) -> bool:
        return self._leader and self._clock() < self._renewed_at + self.lease_duration

    # ---------------------------------------------------------------- one election step

    def try_acquire_or_renew(self) -> bool:
        """One attempt; returns whether this replica holds the Lease now. Never raises."""
        try:
            won = self._step()
        except Exception as exc:  # noqa: BLE001 - an unreachable API server means "not renewed"
            log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            won = self.is_leader  # keep leading until our own lease time runs out
        self._set_leader(won)
        return won

    def _step(self) -> bool:
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            return self._create()
        spec = lease.spec or client.V1LeaseSpec()
        holder = spec.holder_identity or ""
        record = (holder, spec.renew_time, spec.lease_transitions, spec.lease_duration_seconds)
        if record != self._observed:
            self._observed, self._observed_at = record, self._clock()
        duration = spec.lease_duration_seconds or self.lease_duration
        if holder and holder != self.identity and self._clock() < self._observed_at + duration:
            return False
        now = micro_time()
        transitions = (spec.lease_transitions or 0) + (0 if holder == self.identity else 1)
        # Plain dicts (sanitised as-is by the client) keep the MicroTime text exact.
        body: Any = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "resourceVersion": lease.metadata.resource_version if lease.metadata else None,
            },
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.lease_duration),
                "acquireTime": (
                    micro_time(spec.acquire_time) if holder == self.identity and spec.acquire_time else now
                ),
                "renewTime": now,
                "leaseTransitions": transitions,
            },
        }
        try:
            self.api.replace_namespaced_lease(self.name, self.namespace, body)
        except ApiException as exc:
            if exc.status == 409:  # somebody else wrote first
                return False
            raise
        self._renewed_at = self._clock()
        return True

    def _create(self) -> bool:
        now = micro_time()
        body: Any = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.lease_duration),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        try:
            self.api.create_namespaced_lease(self.namespace, body)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        self._renewed_at = self._clock()
        return True

    def _set_leader(self, leader: bool) -> None:
        changed = leader != self._leader
        self._leader = leader
        if changed:
            log.info(
                "lease %s/%s: %s %s leadership",
                self.namespace,
                self.name,
                self.identity,
                "acquired" if leader else "lost",
            )
            if self.on_change is not None:
                try:
                    self.on_change(leader)
                except Exception:
                    log.exception("leader change callback failed")

    def release(self) -> None:
        """Give the Lease up now (best effort) so another replica need not wait for expiry."""
        if not self._leader:
            return
        self._set_leader(False)
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
            if (lease.spec and lease.spec.holder_identity) != self.identity:
                return
            body = self.api.api_client.sanitize_for_serialization(lease)
            body["spec"]["holderIdentity"] = None
            body["spec"]["leaseDurationSeconds"] = 1
            self.api.replace_namespaced_lease(self.name, self.namespace, body)
        except Exception as exc:  # noqa: BLE001
            log.warning("lease %s/%s: release failed: %s", self.namespace, self.name, exc)

    # ---------------------------------------------------------------- thread

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="lease-elector", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._stop.wait(self.next_attempt_in(self.try_acquire_or_renew()))

    def next_attempt_in(self, leader: bool) -> float:
        """Seconds to the next attempt: the holder renews at its pace; a follower looks more often, since
        it can only take over at its first look after the record has stood still for lease_duration."""
        return self.renew_interval if leader else self.retry_interval

    def stop(self, release: bool = True, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if release:
            self.release()
        else:
            self._set_leader(False)
