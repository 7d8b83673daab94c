"""Cluster mode for HorizontalPodPrescalers: watch them and the HPAs, write condition ``HPAConfigured``.

prescaler reads HPAs and never writes them (RBAC: get/list/watch on horizontalpodautoscalers only).
For every HPP it writes one status condition through the HPP's status subresource:

* ``HPAConfigured=True`` when the HPA named by ``spec.scaleTargetRef`` has every External metric entry;
* ``False`` (reason HPANotFound, MetricMissing or TargetDiffers) with the exact ``kubectl patch``
  command in the message otherwise; ``False``/InvalidSpec for an HPP that cannot be understood.

Two watch threads (HPPs, HPAs in all namespaces) only say "something changed"; a reconcile thread
then lists both and writes the statuses that differ from what is stored (a full list per change is
cheap at HPP counts and can never miss or misorder an event). A periodic resync covers a missed
event and a change of status-writer leadership: like the other statuses, only the Lease holder
writes. A cluster without the HPP CRD installed is logged once and re-checked slowly; it never
affects serving.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from adapter import timefmt
from adapter.resources import GROUP, VERSION
from adapter.store.backoff import Backoff
from adapter.store.hpp import CONDITION, PLURAL_HPP, HPPError, check_hpa, condition, parse_hpp
from adapter.store.status import complete_status, status_patch

log = logging.getLogger("prescaler.hpp")

Key = tuple[str, str]  # (namespace, name)


def desired_status(hpp_doc: Mapping[str, Any], hpas: Mapping[Key, Mapping[str, Any]]) -> dict[str, Any]:
    """The status an HPP should have, given the HPAs by (namespace, name)."""
    try:
        hpp = parse_hpp(hpp_doc)
    except HPPError as exc:
        return {"conditions": [{"type": CONDITION, "status": "False", "reason": "InvalidSpec", "message": str(exc)}]}
    return {"conditions": [condition(check_hpa(hpp, hpas.get((hpp.namespace, hpp.hpa_name))))]}


class HPPStatusController:
    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        is_leader: Callable[[], bool] = lambda: True,
        resync_interval: float = 60.0,
        watch_timeout: float = 300.0,
        request_timeout: float = 30.0,
        debounce: float = 0.2,
        now: Callable[[], str] = timefmt.rfc3339_now,
    ):
        self.api_client = api_client
        self.custom = client.CustomObjectsApi(api_client)
        self.autoscaling = client.AutoscalingV2Api(api_client)
        self.is_leader = is_leader
        self.resync_interval = resync_interval
        self.watch_timeout = watch_timeout
        self.request_timeout = request_timeout
        self.debounce = debounce
        self._now = now
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._watches: list[watch.Watch] = []
        self._crd_missing_logged = False
        self._waiting_for_lease = False
        self.lease_poll = 5.0  # how soon a replica that is not the status writer looks again
        self.writes = 0
        self.reconciles = 0

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        if self._threads:
            return
        targets: list[tuple[str, Callable[[], None]]] = [
            ("hpp-reconcile", self._reconcile_loop),
            (
                "hpp-watch-hpps",
                lambda: self._watch_loop(self.custom.list_cluster_custom_object, GROUP, VERSION, PLURAL_HPP),
            ),
            (
                "hpp-watch-hpas",
                lambda: self._watch_loop(self.autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces),
            ),
        ]
        for name, target in targets:
            thread = threading.Thread(target=target, name=name, daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(t.is_alive() for t in self._threads):
            for w in list(self._watches):
                w.stop()
            for thread in self._threads:
                thread.join(0.05)

    def notify(self) -> None:
        self._wake.set()

    # ---------------------------------------------------------------- reconcile

    def reconcile_once(self) -> int:
        """List HPPs and HPAs, write the statuses that changed; returns the number of writes."""
        try:
            hpp_list: Any = self.custom.list_cluster_custom_object(
                GROUP, VERSION, PLURAL_HPP, _request_timeout=self.request_timeout
            )
        except ApiException as exc:
            if exc.status == 404:
                if not self._crd_missing_logged:
                    log.warning(
                        "HorizontalPodPrescaler CRD not installed; HPP status is off until it is "
                        "(deploy/crds/prescaler.pingpong.ai_horizontalpodprescalers.yaml)"
                    )
                    self._crd_missing_logged = True
                return 0
            raise
        self._crd_missing_logged = False
        hpps = [d for d in hpp_list.get("items") or [] if isinstance(d, Mapping)]
        self.reconciles += 1
        self._waiting_for_lease = not self.is_leader()
        if not hpps or self._waiting_for_lease:
            return 0
        response: Any = self.autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces(
            _preload_content=False, _request_timeout=self.request_timeout
        )
        hpas: dict[Key, Mapping[str, Any]] = {}
        for item in json.loads(response.data).get("items") or []:
            meta = item.get("metadata") or {}
            item.setdefault("apiVersion", "autoscaling/v2")
            hpas[(meta.get("namespace", ""), meta.get("name", ""))] = item
        writes = 0
        for doc in hpps:
            meta = doc.get("metadata") or {}
            namespace, name = meta.get("namespace", ""), meta.get("name", "")
            raw_generation = meta.get("generation")
            generation = raw_generation if isinstance(raw_generation, int) else 0
            current = doc.get("status") if isinstance(doc.get("status"), Mapping) else {}
            target = complete_status(generation, desired_status(doc, hpas), current, self._now())
            if target == current:
                continue
            try:
                self.custom.patch_namespaced_custom_object_status(
                    GROUP,
                    VERSION,
                    namespace,
                    PLURAL_HPP,
                    name,
                    status_patch(target, current),
                    _request_timeout=self.request_timeout,
                )
                writes += 1
                log.info(
                    "HorizontalPodPrescaler %s/%s: %s=%s", namespace, name, CONDITION, target["conditions"][0]["status"]
                )
            except ApiException as exc:
                if exc.status != 404:  # deleted meanwhile: nothing to do
                    log.warning(
                        "status of HorizontalPodPrescaler %s/%s not written: API error %s %s",
                        namespace,
                        name,
                        exc.status,
                        exc.reason,
                    )
                    self._wake.set()  # retry on the next round
        self.writes += writes
        return writes

    def _reconcile_loop(self) -> None:
        backoff = Backoff(1.0, 60.0)
        wait = 0.0
        while not self._stop.is_set():
            self._wake.wait(wait or self.resync_interval)
            if self._stop.is_set():
                return
            self._stop.wait(self.debounce)  # a burst of watch events costs one round
            self._wake.clear()
            try:
                self.reconcile_once()
                backoff.reset()
                wait = self.resync_interval if not self._crd_missing_logged else max(self.resync_interval, 300.0)
                if self._waiting_for_lease:
                    wait = min(wait, self.lease_poll)  # write soon after winning the Lease
            except Exception as exc:  # noqa: BLE001 - API/transport errors: retry, never die
                wait = backoff.next()
                log.warning("HorizontalPodPrescaler status round failed (%s); retrying in %.1fs", exc, wait)

    # ---------------------------------------------------------------- watches (change signals only)

    def _watch_loop(self, list_func: Callable[..., Any], *args: Any) -> None:
        backoff = Backoff(1.0, 300.0)
        while not self._stop.is_set():
            w = watch.Watch()
            self._watches.append(w)
            started = time.monotonic()
            try:
                for _event in w.stream(
                    list_func,
                    *args,
                    timeout_seconds=max(1, int(self.watch_timeout)),
                    _request_timeout=(self.request_timeout, self.watch_timeout + 30),
                ):
                    self._wake.set()
                    if self._stop.is_set():
                        return
                if time.monotonic() - started > 5:
                    backoff.reset()
            except Exception as exc:  # noqa: BLE001
                if self._stop.is_set():
                    return
                delay = backoff.next()
                log.debug("watch %s failed (%s); retrying in %.1fs", getattr(list_func, "__name__", "?"), exc, delay)
                self._stop.wait(delay)
            finally:
                self._watches.remove(w)
            if time.monotonic() - started < 1:
                self._stop.wait(backoff.next())  # a watch that ends at once must not spin
