"""Kubernetes Events for condition changes of VirtualMetrics / VirtualMetricEvents (core/v1 Events).

The status writer calls `condition_changes` with the status on the server and the status it just
wrote; every condition whose (status, reason) moved becomes one Event, so `kubectl describe` and
event-based alerting see a rejected object, a metric name conflict or a failing source the moment
it happens. Rules:

- A *change* only: a condition already on the server with the same status and reason is silent,
  and a condition appearing for the first time is reported only when it is `False` (a fresh
  install does not emit one "Ready" event per object, a broken object does).
- Rate-limited twice: at most `per_object_burst` Events per (object, condition type) within
  `per_object_interval` (so a problem and its end both show, while a flapping source sends a few;
  the changes dropped meanwhile are still in the status), and at most
  `burst` Events then `rate_per_second` overall (a token bucket), so a flapping source or a thousand
  objects turning stale together cannot flood the API server.
- Cluster-scoped objects have their Events in `namespace` ("default", as for Nodes).
- Best effort: a failed create is logged (once per reason of failure) and never stops status writes.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from adapter import timefmt
from adapter.resources import GROUP, VERSION
from adapter.store.kube_json import create_event

log = logging.getLogger(__name__)

COMPONENT = "prescaler"


@dataclass(frozen=True)
class ConditionChange:
    kind: str
    name: str
    type: str
    status: str
    reason: str
    message: str

    @property
    def warning(self) -> bool:
        return self.status != "True"


def condition_changes(
    kind: str, name: str, before: Mapping[str, Any] | None, after: Mapping[str, Any]
) -> list[ConditionChange]:
    """Conditions of `after` whose (status, reason) differ from `before` (see the module rules)."""
    old = {c.get("type"): c for c in (before or {}).get("conditions") or [] if isinstance(c, Mapping)}
    out = []
    for cond in after.get("conditions") or []:
        if not isinstance(cond, Mapping):
            continue
        previous = old.get(cond.get("type"))
        status, reason = str(cond.get("status", "")), str(cond.get("reason", ""))
        if previous is None:
            if status != "False":  # a fresh object that is fine, or still waiting (Unknown): nothing to say
                continue
        elif previous.get("status") == status and previous.get("reason") == reason:
            continue
        out.append(ConditionChange(kind, name, str(cond.get("type", "")), status, reason, str(cond.get("message", ""))))
    return out


class EventRecorder:
    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str = "default",
        *,
        per_object_interval: float = 60.0,
        per_object_burst: int = 3,
        burst: int = 25,
        rate_per_second: float = 1 / 6,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], str] = timefmt.rfc3339_now,
        request_timeout: float = 10.0,
    ):
        self.api_client = api_client
        self.namespace = namespace
        self.per_object_interval = per_object_interval
        self.per_object_burst = per_object_burst
        self.burst = burst
        self.rate_per_second = rate_per_second
        self.request_timeout = request_timeout
        self._clock = clock
        self._now = now
        self._tokens = float(burst)
        self._refilled = clock()
        self._last: dict[tuple[str, str, str], list[float]] = {}  # (kind, name, condition type) -> times sent
        self._failing: str | None = None
        self.sent = 0
        self.dropped = 0

    def record(self, change: ConditionChange, uid: str | None = None) -> bool:
        """Create the Event for `change` unless rate-limited; True when one was sent."""
        now = self._clock()
        key = (change.kind, change.name, change.type)
        recent = [t for t in self._last.get(key, ()) if now - t < self.per_object_interval]
        self._tokens = min(float(self.burst), self._tokens + (now - self._refilled) * self.rate_per_second)
        self._refilled = now
        if len(recent) >= self.per_object_burst or self._tokens < 1.0:
            self.dropped += 1
            log.debug(
                "event for %s/%s %s=%s (%s) rate-limited",
                change.kind,
                change.name,
                change.type,
                change.status,
                change.reason,
            )
            return False
        self._tokens -= 1.0
        self._last[key] = [*recent, now]
        if len(self._last) > 100_000:  # objects come and go; the memory does not need to be exact
            self._last.clear()
        try:
            create_event(self.api_client, self.namespace, self._body(change, uid), self.request_timeout)
        except Exception as exc:  # noqa: BLE001 - best effort: status writes go on
            why = getattr(exc, "reason", None) or type(exc).__name__
            if why != self._failing:
                log.warning(
                    "cannot create Kubernetes Events in namespace %s (%s); conditions are still written to status",
                    self.namespace,
                    why,
                )
                self._failing = str(why)
            return False
        self._failing = None
        self.sent += 1
        return True

    def forget(self, kind: str, name: str) -> None:
        for key in [k for k in self._last if k[0] == kind and k[1] == name]:
            del self._last[key]

    def _body(self, change: ConditionChange, uid: str | None) -> dict[str, Any]:
        stamp = self._now()
        involved: dict[str, Any] = {"apiVersion": f"{GROUP}/{VERSION}", "kind": change.kind, "name": change.name}
        if uid:
            involved["uid"] = uid
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{change.name}.{uuid.uuid4().hex[:16]}", "namespace": self.namespace},
            "involvedObject": involved,
            "reason": change.reason or change.type,
            "message": f"{change.type}={change.status}: {change.message}"[:1024],
            "type": "Warning" if change.warning else "Normal",
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
