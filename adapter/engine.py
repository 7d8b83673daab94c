"""The engine: objects in, served values out.

    store (files or Kubernetes) --apply/delete/resync--> Engine
        VirtualMetricEvent -> SourceRunner (fetch loop) -> items
        items x metric entries -> expressions -> contributions (per event, cached)
        all contributions -> timelines (one vectorised build) -> Published snapshot
    API --query(metric, namespace, selector, now)--> Published snapshot (a lookup, never a rebuild)

One broken object never affects another: validation errors, fetch failures and expression failures
are recorded per object (status, logs, metrics) and everything else keeps working.
Calls from other threads (the Kubernetes watch threads) are marshalled onto the engine's loop.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from adapter import observability as obs
from adapter.errors import ValidationError
from adapter.expressions import CompiledExpression, ExpressionError, compile_expression
from adapter.items import Item
from adapter.labels import Selector
from adapter.resources import (
    KIND_EVENT,
    KIND_METRIC,
    VirtualMetric,
    VirtualMetricEvent,
    object_id,
    parse_virtual_metric,
    parse_virtual_metric_event,
)
from adapter.sources.base import SourceContext
from adapter.sources.registry import config_parsers, create_source, source_class
from adapter.sources.runner import SourceRunner
from adapter.timefmt import rfc3339
from adapter.timeline import ContributionArrays, TimelineSet, build_timelines

log = logging.getLogger("prescaler.engine")

Key = tuple[str, str, str]  # (metric name, namespace, resource name)

# Large rebuilds split across threads (numpy releases the GIL); the machines have 2 cores.
REBUILD_WORKERS = min(2, os.cpu_count() or 1)
STATUS_COALESCE_SECONDS = 0.2


# ---------------------------------------------------------------- query results


@dataclass(frozen=True)
class TargetValue:
    name: str
    namespace: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True)
class QueryResult:
    """Either values, or an error the HTTP layer turns into a Status (code 404 or 503)."""

    values: tuple[TargetValue, ...] = ()
    error_code: int = 0
    error_message: str = ""
    # The answer stays the same until this time, as long as the published snapshot is the same
    # (lets the HTTP layer reuse the response body; see adapter.api.app).
    valid_until: float = math.inf


# ---------------------------------------------------------------- per-object state


@dataclass
class EntryPlan:
    index: int
    metric: str
    namespace: str
    name: str | None
    name_from_label: str | None
    expression: CompiledExpression


@dataclass
class EventState:
    name: str
    generation: int = 0
    vme: VirtualMetricEvent | None = None
    error: str | None = None  # validation error (object rejected)
    entries: list[EntryPlan] = field(default_factory=list)
    metric_names: frozenset[str] = frozenset()
    runner: SourceRunner | None = None
    # Contributions of the last snapshot: key -> (start, end, value) arrays.
    contributions: dict[Key, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)
    dropped: int = 0
    drop_reasons: list[str] = field(default_factory=list)
    items: list[Item] = field(default_factory=list)


@dataclass
class MetricState:
    name: str
    generation: int = 0
    metric: VirtualMetric | None = None
    error: str | None = None


@dataclass(frozen=True)
class Published:
    """An immutable view for queries; replaced atomically after each rebuild."""

    timelines: TimelineSet
    metrics: Mapping[str, VirtualMetric]  # by served metric name
    targets: Mapping[tuple[str, str], tuple[tuple[str, int], ...]]  # (metric, ns) -> ((resource, key idx), ...)
    labels: tuple[Mapping[str, str], ...]  # per key index
    holders: tuple[tuple[SourceRunner, ...], ...]  # per key index: runners with onStale Hold
    holder_names: tuple[tuple[str, ...], ...]
    built_at: float = 0.0


def _empty_published() -> Published:
    return Published(build_timelines([], [], ContributionArrays.empty()), {}, {}, (), (), ())


# ---------------------------------------------------------------- the engine


class Engine:
    def __init__(self, context: SourceContext | None = None, clock: Callable[[], float] = time.time,
                 rebuild_delay: float = 0.05, start_sources: bool = True):
        self.context = context or SourceContext()
        self.clock = clock
        self.rebuild_delay = rebuild_delay
        self.start_sources = start_sources
        self.events: dict[str, EventState] = {}
        self.metrics: dict[str, MetricState] = {}
        self.published: Published = _empty_published()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._pending: list[Callable[[], None]] = []
        self._rebuild_handle: asyncio.TimerHandle | None = None
        self._rebuilding = False
        self._dirty = False
        self._status_listeners: list[Callable[[], None]] = []
        self._status_snapshot: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}
        self._status_handle: asyncio.TimerHandle | None = None
        self._synced_kinds: set[str] = set()
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        with self._lock:
            pending, self._pending = self._pending, []
        for call in pending:
            call()
        self._schedule_rebuild(0.0)

    async def stop(self) -> None:
        for state in list(self.events.values()):
            if state.runner:
                await state.runner.stop()
        if self._rebuild_handle:
            self._rebuild_handle.cancel()
        if self._status_handle:
            self._status_handle.cancel()

    @property
    def synced(self) -> bool:
        return {KIND_METRIC, KIND_EVENT} <= self._synced_kinds

    def mark_synced(self, kind: str) -> None:
        self._synced_kinds.add(kind)

    def on_status_change(self, callback: Callable[[], None]) -> None:
        self._status_listeners.append(callback)

    # ---------------------------------------------------------------- ObjectSink (thread-safe)

    def apply(self, doc: Mapping[str, Any]) -> None:
        self._call(lambda: self._apply(doc))

    def delete(self, kind: str, name: str) -> None:
        self._call(lambda: self._delete(kind, name))

    def resync(self, kind: str, docs: list[Mapping[str, Any]]) -> None:
        def run() -> None:
            names = set()
            for doc in docs:
                self._apply(doc)
                meta = doc.get("metadata") if isinstance(doc, Mapping) else None
                if isinstance(meta, Mapping) and isinstance(meta.get("name"), str):
                    names.add(meta["name"])
            existing = self.metrics if kind == KIND_METRIC else self.events
            for name in [n for n in existing if n not in names]:
                self._delete(kind, name)
            self._synced_kinds.add(kind)
        self._call(run)

    def _call(self, func: Callable[[], None]) -> None:
        if self._loop is None:
            with self._lock:
                self._pending.append(func)
        elif threading.get_ident() == self._loop_thread:
            func()
        else:
            self._loop.call_soon_threadsafe(func)

    # ---------------------------------------------------------------- object handling (loop thread)

    def _apply(self, doc: Mapping[str, Any]) -> None:
        kind = doc.get("kind") if isinstance(doc, Mapping) else None
        if kind == KIND_METRIC:
            self._apply_metric(doc)
        elif kind == KIND_EVENT:
            self._apply_event(doc)
        else:
            log.warning("ignoring object %s: not a VirtualMetric or VirtualMetricEvent", object_id(doc))

    def _apply_metric(self, doc: Mapping[str, Any]) -> None:
        name = _name_of(doc)
        if name is None:
            log.warning("ignoring VirtualMetric without metadata.name")
            return
        state = self.metrics.setdefault(name, MetricState(name))
        state.generation = _generation_of(doc)
        try:
            metric = parse_virtual_metric(doc)
        except ValidationError as exc:
            log.warning("rejected %s", exc)
            state.metric, state.error = None, str(exc)
        else:
            if state.metric == metric and state.error is None:
                return
            state.metric, state.error = metric, None
            log.info("loaded VirtualMetric %s (metric %s, %s, leadTime %gs)", name, metric.metric_name,
                     metric.merge_strategy, metric.lead_time)
        self._schedule_rebuild()

    def _apply_event(self, doc: Mapping[str, Any]) -> None:
        name = _name_of(doc)
        if name is None:
            log.warning("ignoring VirtualMetricEvent without metadata.name")
            return
        state = self.events.get(name) or EventState(name)
        self.events[name] = state
        state.generation = _generation_of(doc)
        try:
            vme = parse_virtual_metric_event(doc, config_parsers())
            entries = self._compile_entries(vme)
        except ValidationError as exc:
            log.warning("rejected %s", exc)
            self._replace_runner(state, None)
            state.vme, state.error, state.entries, state.contributions = None, str(exc), [], {}
            self._schedule_rebuild()
            return
        if state.vme == vme and state.error is None:
            return  # unchanged (e.g. a re-list); keep the running source and its snapshot
        source_changed = state.vme is None or state.vme.source != vme.source
        state.vme, state.error, state.entries = vme, None, entries
        state.metric_names = frozenset(e.metric for e in entries)
        log.info("loaded VirtualMetricEvent %s (%s source, %d metric entries)", name, vme.source.kind,
                 len(entries))
        if source_changed:
            self._replace_runner(state, vme)
        else:
            self._recompute_contributions(state)
        self._schedule_rebuild()

    def _compile_entries(self, vme: VirtualMetricEvent) -> list[EntryPlan]:
        known = _value_names(vme)
        plans = []
        for i, entry in enumerate(vme.metrics):
            path = f"spec.metrics[{i}].value.expression"
            try:
                expression = compile_expression(entry.expression, path, known)
            except ValidationError as exc:
                raise exc.for_object(f"{KIND_EVENT}/{vme.name}") from None
            plans.append(EntryPlan(i, entry.metric, entry.resource.namespace, entry.resource.name,
                                   entry.resource.name_from_label, expression))
        return plans

    def _replace_runner(self, state: EventState, vme: VirtualMetricEvent | None) -> None:
        old = state.runner
        state.runner = None
        state.contributions, state.items = {}, []
        if old is not None and self._loop is not None:
            self._loop.create_task(old.stop())
        if vme is None:
            return
        try:
            source = create_source(vme.source.kind, vme.source.config, vme.source.common, self.context)
        except Exception as exc:  # noqa: BLE001 - a source that cannot start is reported, not fatal
            state.error = f"{KIND_EVENT}/{vme.name}: spec.source.{vme.source.kind}: cannot start source: {exc}"
            log.warning(state.error)
            return
        runner = SourceRunner(vme.name, source, self._on_snapshot, clock=self.clock,
                              on_health=lambda _name: self._notify_status())
        state.runner = runner
        if self.start_sources and self._loop is not None:
            runner.start()

    def _delete(self, kind: str, name: str) -> None:
        if kind == KIND_METRIC:
            if self.metrics.pop(name, None) is not None:
                log.info("deleted VirtualMetric %s", name)
        else:
            state = self.events.pop(name, None)
            if state is None:
                return
            log.info("deleted VirtualMetricEvent %s", name)
            obs.forget_event(name)  # no stale series (and alerts) for an object that is gone
            if state.runner is not None and self._loop is not None:
                self._loop.create_task(state.runner.stop())
        self._schedule_rebuild()

    # ---------------------------------------------------------------- items -> contributions

    def _on_snapshot(self, name: str, items: list[Item]) -> None:
        state = self.events.get(name)
        if state is None or state.vme is None:
            return
        if items == state.items and state.contributions:
            # Most polls re-announce the same items: nothing to recompute. Staleness is read live from
            # the runner, so the successful fetch still counts.
            return
        state.items = items
        self._recompute_contributions(state)
        self._schedule_rebuild()

    def _recompute_contributions(self, state: EventState) -> None:
        items = state.items
        contributions: dict[Key, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
        dropped = 0
        reasons: list[str] = []
        if items:
            starts = np.fromiter((i.start for i in items), float, len(items))
            ends = np.fromiter((i.end for i in items), float, len(items))
            names = set().union(*(e.expression.names for e in state.entries)) if state.entries else set()
            columns = {n: np.fromiter((i.values.get(n, math.nan) for i in items), float, len(items))
                       for n in names}
            evaluated: dict[str, np.ndarray] = {}  # entries often share an expression
            for entry in state.entries:
                values = evaluated.get(entry.expression.text)
                if values is None:
                    values = evaluated[entry.expression.text] = entry.expression.evaluate_many(columns, len(items))
                ok = np.isfinite(values)
                if not ok.all():
                    bad = np.flatnonzero(~ok)
                    dropped += len(bad)
                    reasons.append(_failure_reason(entry, items[int(bad[0])], len(bad)))
                if entry.name is not None:
                    key = (entry.metric, entry.namespace, entry.name)
                    contributions.setdefault(key, []).append((starts[ok], ends[ok], values[ok]))
                    continue
                label = entry.name_from_label or ""
                groups: dict[str, list[int]] = {}
                missing = 0
                for idx in np.flatnonzero(ok):
                    target = items[idx].labels.get(label)
                    if target:
                        groups.setdefault(target, []).append(int(idx))
                    else:
                        missing += 1
                if missing:
                    dropped += missing
                    reasons.append(f"spec.metrics[{entry.index}]: {missing} item(s) have no label {label!r}")
                for target, idxs in groups.items():
                    sel = np.array(idxs, dtype=np.int64)
                    key = (entry.metric, entry.namespace, target)
                    contributions.setdefault(key, []).append((starts[sel], ends[sel], values[sel]))
        state.contributions = {
            key: tuple(np.concatenate([p[i] for p in parts]) for i in range(3))  # type: ignore[misc]
            for key, parts in contributions.items()
        }
        state.dropped, state.drop_reasons = dropped, reasons
        if dropped:
            obs.record_expression_failures(state.name, dropped)
            log.warning("VirtualMetricEvent %s: dropped %d contribution(s): %s", state.name, dropped,
                        "; ".join(reasons))

    # ---------------------------------------------------------------- rebuild

    def _schedule_rebuild(self, delay: float | None = None) -> None:
        self._dirty = True
        if self._loop is None or self._rebuild_handle is not None or self._rebuilding:
            return
        self._rebuild_handle = self._loop.call_later(self.rebuild_delay if delay is None else delay,
                                                     self._start_rebuild)

    def _start_rebuild(self) -> None:
        self._rebuild_handle = None
        assert self._loop is not None
        self._loop.create_task(self.rebuild_now())

    async def rebuild_now(self) -> None:
        """Rebuild the published snapshot from the current state (coalesces concurrent requests)."""
        if self._rebuilding:
            self._dirty = True
            return
        self._rebuilding = True
        try:
            while self._dirty:
                self._dirty = False
                inputs = self._collect()
                started = time.perf_counter()
                # The numpy work runs off the loop so queries keep being answered meanwhile.
                published = await asyncio.to_thread(_build_published, *inputs, self.clock())
                self.published = published
                obs.TIMELINE_REBUILDS.inc()
                obs.TIMELINE_REBUILD_SECONDS.observe(time.perf_counter() - started)
                obs.TIMELINE_KEYS.set(len(published.timelines))
                self._notify_status()
        finally:
            self._rebuilding = False

    async def settle(self) -> None:
        """Wait until every pending change is published (tests and local tooling)."""
        for _ in range(100):
            if self._rebuild_handle is not None:
                self._rebuild_handle.cancel()
                self._rebuild_handle = None
            await self.rebuild_now()
            if not self._dirty and not self._rebuilding:
                return
            await asyncio.sleep(0.01)

    def _collect(self) -> tuple[dict[str, VirtualMetric], list[EventState]]:
        metrics: dict[str, VirtualMetric] = {}
        invalid = 0
        for name in sorted(self.metrics):
            state = self.metrics[name]
            if state.metric is None:
                invalid += 1
                continue
            other = metrics.get(state.metric.metric_name)
            if other is not None:
                state.error = (f"{KIND_METRIC}/{name}: spec.name: metric {state.metric.metric_name!r} is already "
                               f"defined by {KIND_METRIC}/{other.name}")
                invalid += 1
                continue
            metrics[state.metric.metric_name] = state.metric
        obs.OBJECTS_INVALID.labels(kind=KIND_METRIC).set(invalid)
        obs.OBJECTS_INVALID.labels(kind=KIND_EVENT).set(sum(1 for e in self.events.values() if e.error))
        events = [self.events[n] for n in sorted(self.events) if self.events[n].vme is not None]
        return metrics, events

    def desired_status(self) -> dict[tuple[str, str], tuple[int, dict[str, Any]]]:
        """The latest status of every object; safe to call from any thread (the status writer's).

        Computed on the loop thread whenever something changed, so readers never iterate state that
        the loop is mutating."""
        return self._status_snapshot

    def _notify_status(self) -> None:
        """Something that status reflects changed: refresh the snapshot soon (coalesced, so a burst
        of fetches costs one recomputation) and tell the listeners (the status writer)."""
        if self._loop is None:
            self._refresh_status()
            return
        if self._status_handle is None:
            self._status_handle = self._loop.call_later(STATUS_COALESCE_SECONDS, self._refresh_status)

    def _refresh_status(self) -> None:
        self._status_handle = None
        self._status_snapshot = self.statuses()
        for callback in self._status_listeners:
            try:
                callback()
            except Exception:
                log.exception("status listener failed")

    # ---------------------------------------------------------------- queries (hot path)

    def metric_names(self) -> list[str]:
        return sorted(self.published.metrics)

    def query(self, metric: str, namespace: str, selector: Selector, now: float | None = None) -> QueryResult:
        pub = self.published
        vm = pub.metrics.get(metric)
        if vm is None:
            return QueryResult(error_code=404, error_message=f"the server could not find the metric {metric} "
                                                             f"for namespaces")
        now = self.clock() if now is None else now
        pinned = selector.equality_values("resource")
        if namespace == "*":
            candidates = [(ns, t) for (m, ns), ts in pub.targets.items() if m == metric for t in ts]
        elif pinned is not None:
            # The HPA's usual query (resource=<name>): direct lookups, whatever the number of targets.
            index = pub.timelines.index
            candidates = [(namespace, (r, index[(metric, namespace, r)])) for r in sorted(pinned)
                          if (metric, namespace, r) in index]
        else:
            candidates = [(namespace, t) for t in pub.targets.get((metric, namespace), ())]
        values: list[TargetValue] = []
        seen: set[str] = set()
        valid_until = math.inf
        for ns, (resource, k) in candidates:
            labels = pub.labels[k]
            if not selector.matches(labels):
                continue
            for runner, owner in zip(pub.holders[k], pub.holder_names[k]):
                if runner.is_stale(now):
                    # Stays stale until a fetch succeeds, which publishes a new snapshot.
                    return QueryResult(error_code=503, error_message=_stale_message(metric, ns, resource, owner,
                                                                                    runner, now))
                valid_until = min(valid_until, runner.stale_at())
            found = pub.timelines.value_and_next_change((metric, ns, resource), now)
            if found is None:
                value = vm.clamp(vm.default_value)
            else:
                value, next_change = found
                valid_until = min(valid_until, next_change)
            values.append(TargetValue(resource, ns, labels, value))
            seen.add(resource)
        # A selector that names a resource always gets an item: an empty list would make the HPA treat
        # the metric as failed and stop scaling down (DESIGN §4).
        if namespace != "*":
            for resource in sorted(pinned or ()):
                labels = {"resource": resource}
                if resource not in seen and selector.matches(labels):
                    values.append(TargetValue(resource, namespace, labels, vm.clamp(vm.default_value)))
        values.sort(key=lambda v: (v.namespace, v.name))
        return QueryResult(values=tuple(values), valid_until=valid_until)

    # ---------------------------------------------------------------- status

    def event_status(self, name: str, now: float | None = None) -> dict[str, Any] | None:
        state = self.events.get(name)
        if state is None:
            return None
        now = self.clock() if now is None else now
        return _event_status(state, self.published, now)

    def metric_status(self, name: str) -> dict[str, Any] | None:
        state = self.metrics.get(name)
        if state is None:
            return None
        status: dict[str, Any] = {"observedGeneration": state.generation}
        if state.metric is not None and state.error is None:
            metric = state.metric.metric_name
            status["metricName"] = metric  # the CRD's Metric column: spec.name may have defaulted
            status["targets"] = sum(len(t) for (m, _), t in self.published.targets.items() if m == metric)
            status["conditions"] = [_condition("Ready", True, "Valid", "metric is served", state.generation)]
        else:
            status["targets"] = 0
            status["conditions"] = [_condition("Ready", False, "InvalidSpec", state.error or "", state.generation)]
        return status

    def statuses(self) -> dict[tuple[str, str], tuple[int, dict[str, Any]]]:
        now = self.clock()
        out: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}
        for name, metric_state in self.metrics.items():
            out[(KIND_METRIC, name)] = (metric_state.generation, self.metric_status(name) or {})
        for name, event_state in self.events.items():
            out[(KIND_EVENT, name)] = (event_state.generation, _event_status(event_state, self.published, now))
        return out


# ---------------------------------------------------------------- pure helpers


def _build_published(metrics: dict[str, VirtualMetric], events: list[EventState], now: float) -> Published:
    keys: list[Key] = []
    index: dict[Key, int] = {}
    labels: list[dict[str, str]] = []
    holders: list[list[SourceRunner]] = []
    holder_names: list[list[str]] = []
    parts: list[ContributionArrays] = []

    def key_index(key: Key) -> int:
        k = index.get(key)
        if k is None:
            k = index[key] = len(keys)
            keys.append(key)
            labels.append({"resource": key[2]})
            holders.append([])
            holder_names.append([])
        return k

    for state in events:
        vme = state.vme
        assert vme is not None
        runner = state.runner
        hold = runner is not None and runner.on_stale == "Hold" and not runner.source.never_stale
        touched: set[int] = set()
        for entry in state.entries:
            if entry.metric in metrics and entry.name is not None:
                touched.add(key_index((entry.metric, entry.namespace, entry.name)))
        for key, (start, end, value) in state.contributions.items():
            if key[0] not in metrics:
                continue
            k = key_index(key)
            touched.add(k)
            parts.append(ContributionArrays(np.full(len(start), k, np.int64), start, end, value))
        for k in touched:
            for label, text in vme.labels.items():
                labels[k].setdefault(label, text)
            if hold and runner is not None:
                holders[k].append(runner)
                holder_names[k].append(vme.name)
    names = sorted(metrics)
    position = {name: i for i, name in enumerate(names)}
    table = [metrics[n].policy for n in names]
    policy_index = np.fromiter((position[metric] for metric, _, _ in keys), np.int64, len(keys))
    timelines = build_timelines(list(keys), table, ContributionArrays.concat(parts), policy_index=policy_index,
                                workers=REBUILD_WORKERS)
    targets: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for k, (metric, ns, resource) in enumerate(keys):
        targets.setdefault((metric, ns), []).append((resource, k))
    return Published(
        timelines=timelines,
        metrics=dict(metrics),
        targets={key: tuple(sorted(v)) for key, v in targets.items()},
        labels=tuple(labels),
        holders=tuple(tuple(h) for h in holders),
        holder_names=tuple(tuple(h) for h in holder_names),
        built_at=now,
    )


def _value_names(vme: VirtualMetricEvent) -> frozenset[str] | None:
    """Names a source kind is known to provide, so unknown names fail at load time."""
    try:
        cls: Any = source_class(vme.source.kind)
    except Exception:  # noqa: BLE001
        return None
    provider = getattr(cls, "value_names", None)
    if provider is None:
        return None
    try:
        names = provider(vme.source.config)
    except Exception:  # noqa: BLE001
        return None
    return frozenset(names) if names is not None else None


def _failure_reason(entry: EntryPlan, item: Item, count: int) -> str:
    try:
        entry.expression.evaluate(item.values)
        detail = "result is not a finite number"
    except ExpressionError as exc:
        detail = str(exc)
    return (f"spec.metrics[{entry.index}] ({entry.expression.text}): {count} item(s) dropped, e.g. "
            f"[{item.start:g}, {item.end:g}): {detail}")


def _stale_message(metric: str, ns: str, resource: str, owner: str, runner: SourceRunner, now: float) -> str:
    last = runner.health.last_success
    since = f"last successful fetch {now - last:.0f}s ago" if last is not None else "no successful fetch yet"
    error = f"; last error: {runner.health.last_error}" if runner.health.last_error else ""
    return (f"metric {metric} for {ns}/{resource} is on hold: the source of VirtualMetricEvent {owner} is "
            f"stale ({since}, staleAfter {runner.source.common.stale_after:g}s, onStale: Hold){error}")


def _rfc3339(ts: float | None) -> str | None:
    return None if ts is None else rfc3339(ts)


def _condition(kind: str, ok: bool | None, reason: str, message: str, generation: int) -> dict[str, Any]:
    return {"type": kind, "status": "Unknown" if ok is None else ("True" if ok else "False"),
            "reason": reason, "message": message[:32768], "observedGeneration": generation}


def _event_status(state: EventState, pub: Published, now: float) -> dict[str, Any]:
    gen = state.generation
    if state.error is not None or state.vme is None:
        message = state.error or "not loaded"
        return {
            "observedGeneration": gen, "itemCount": 0, "stale": False,
            "conditions": [
                _condition("Ready", False, "InvalidSpec", message, gen),
                _condition("SourceHealthy", None, "NotStarted", "the object is invalid", gen),
                _condition("ExpressionsValid", False, "InvalidSpec", message, gen),
            ],
        }
    runner = state.runner
    health = runner.health if runner else None
    stale = bool(runner and runner.is_stale(now))
    obs.SOURCE_STALE.labels(event=state.name).set(1 if stale else 0)
    if health is None or health.last_attempt is None:
        source = _condition("SourceHealthy", None, "Pending", "waiting for the first fetch", gen)
    elif stale:
        source = _condition("SourceHealthy", False, "Stale",
                            f"no successful fetch within staleAfter: {health.last_error or 'no data'}", gen)
    elif health.last_error:
        source = _condition("SourceHealthy", False, "FetchFailed", health.last_error, gen)
    else:
        warn = f"; {len(health.warnings)} warning(s): " + "; ".join(health.warnings[:3]) if health.warnings else ""
        source = _condition("SourceHealthy", True, "FetchSucceeded", f"{health.item_count} item(s){warn}", gen)
    unknown_metrics = sorted(m for m in state.metric_names if m not in pub.metrics)
    if state.dropped:
        exprs = _condition("ExpressionsValid", False, "EvaluationFailed", "; ".join(state.drop_reasons), gen)
    else:
        exprs = _condition("ExpressionsValid", True, "Valid", "all expressions compile and evaluate", gen)
    ready_ok = source["status"] == "True" and not unknown_metrics
    if unknown_metrics:
        ready = _condition("Ready", False, "UnknownMetric",
                           f"no VirtualMetric defines {', '.join(unknown_metrics)}", gen)
    elif ready_ok:
        ready = _condition("Ready", True, "Serving", "values are served from this object", gen)
    else:
        ready = _condition("Ready", False, source["reason"], source["message"], gen)
    status: dict[str, Any] = {
        "observedGeneration": gen,
        "sourceKind": state.vme.source.kind,
        "itemCount": health.item_count if health else 0,
        "stale": stale,
        "conditions": [ready, source, exprs],
    }
    last = _rfc3339(health.last_success if health else None)
    if last:
        status["lastSuccessfulFetchTime"] = last
    return status


def _name_of(doc: Mapping[str, Any]) -> str | None:
    meta = doc.get("metadata") if isinstance(doc, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) and name else None


def _generation_of(doc: Mapping[str, Any]) -> int:
    meta = doc.get("metadata") if isinstance(doc, Mapping) else None
    gen = meta.get("generation", 0) if isinstance(meta, Mapping) else 0
    return gen if isinstance(gen, int) and not isinstance(gen, bool) else 0


__all__ = ["Engine", "Key", "Published", "QueryResult", "TargetValue"]
