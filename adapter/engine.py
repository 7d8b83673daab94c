"""The engine: lifecycle and scheduling around the pure pipeline (adapter.pipeline).

    store --apply/delete/resync--> Engine (marshalled onto its event loop)
        VirtualMetricEvent -> SourceRunner (fetch loop) -> items -> pipeline.contributions
        changes -> Publisher (adapter.publisher) -> pipeline.publish -> self.published
    API --MetricsProvider.query--> pipeline.query(self.published, ...)

Side effects live here: runners, timers, threads, Prometheus gauges, status listeners.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from adapter import heap
from adapter import observability as obs
from adapter.handoff import LoopHandOff, RequestActivity
from adapter.items import Item
from adapter.labels import Selector
from adapter.pipeline import objects
from adapter.pipeline.deadband import ToleranceSteps
from adapter.pipeline.leadtime import LeadTimes, apply_learned_leads
from adapter.pipeline.notices import Notices, StartupGate
from adapter.pipeline.objects import MetricNames, resolve_metric_names
from adapter.pipeline.preview import PreviewRequest, preview_document
from adapter.pipeline.publish import Published
from adapter.pipeline.query import MetricNotFound, Outcome, Values, query
from adapter.pipeline.status import EventStatusMemo, Statuses, metric_statuses
from adapter.publisher import Publisher
from adapter.resources import KIND_EVENT, KIND_METRIC
from adapter.sources.base import SourceContext
from adapter.sources.runner import SourceRunner
from adapter.status_board import StatusBoard

log = logging.getLogger("prescaler.engine")
STATUS_PIECE = 20  # events per piece of a status refresh (about 0.6 ms of the loop each at 1 000 targets an event)


class Engine:
    def __init__(
        self,
        context: SourceContext | None = None,
        clock: Callable[[], float] = time.time,
        rebuild_delay: float = 0.05,
        start_sources: bool = True,
        snapshot_delay: float = 0.005,
    ):
        self.context, self.clock = context or SourceContext(), clock
        self.start_sources = start_sources
        self.table = objects.ObjectTable(self.context)
        self.events, self.metrics = self.table.events, self.table.metrics  # read-only views for tools
        # Store and watcher threads call in; state changes on the loop only. Long jobs pause for the
        # requests being answered (counted by the server, adapter.serving.inflight), and barely when
        # there are none.
        self.requests = RequestActivity()
        self._handoff = LoopHandOff(answering=self.requests.recent)
        self.status = StatusBoard(self.statuses, pieces=self.status_pieces)
        self.publisher = Publisher(self.table, clock, self._handoff, self.status.changed, rebuild_delay, snapshot_delay)
        self._synced_kinds: set[str] = set()
        self.lead_times: LeadTimes | None = None  # leadTime: Auto, measured at the edge (adapter.store.leadtime)
        # stepPastTolerance; cluster mode gives it the HPAs' targets and replicas (adapter.store.hpa_bands)
        self.tolerance_steps = ToleranceSteps()
        self.notices, self._gate = Notices(), StartupGate()  # said once: typos, unreachable targets; readiness
        self._event_statuses = EventStatusMemo()
        self._checked_for: frozenset[str] | None = None  # the served metric names events were last checked against

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        self.status.attach(asyncio.get_running_loop())
        self._handoff.attach(asyncio.get_running_loop())
        self.publisher.everything(0.0)

    async def stop(self) -> None:
        for runner in [state.runner for state in self.events.values() if state.runner]:
            await runner.stop()
        self.publisher.cancel()
        self.status.close()

    @property
    def synced(self) -> bool:  # objects loaded and the first fetches done (see StartupGate)
        return {KIND_METRIC, KIND_EVENT} <= self._synced_kinds and self._gate.passed(
            self.events if self.start_sources else {}, self.busy
        )

    def mark_synced(self, kind: str) -> None:
        self._synced_kinds.add(kind)

    def on_status_change(self, callback: Callable[[], None]) -> None:
        self.status.listen(callback)

    @property
    def busy(self) -> bool:  # a change is waiting to be published
        return self.publisher.busy or self._handoff.pending

    @property
    def published(self) -> Published:
        return self.publisher.published

    @property
    def names(self) -> MetricNames:
        return self.publisher.names

    async def rebuild_now(self) -> None:
        await self.publisher.publish_now()

    # ---------------------------------------------------------------- ObjectSink (thread-safe)

    def apply(self, doc: Mapping[str, Any]) -> None:
        self._handoff.call(functools.partial(self._apply_now, doc))

    def delete(self, kind: str, name: str) -> None:
        self._handoff.call(lambda: self._delete(kind, name))

    def resync(self, kind: str, docs: list[Mapping[str, Any]]) -> None:
        # An object a step, in pieces of a few ms of the loop (10 000 objects take seconds).
        def remove_the_rest() -> None:
            for name in self.table.absent(kind, docs):
                self._delete(kind, name)
            self._synced_kinds.add(kind)

        steps = [functools.partial(self._apply_now, doc) for doc in docs]
        self._handoff.call_in_pieces([*steps, remove_the_rest], around=heap.no_collection)

    def _apply_now(self, doc: Mapping[str, Any]) -> None:
        self._handle(self.table.apply(doc))

    def _delete(self, kind: str, name: str) -> None:
        if kind == KIND_EVENT:
            obs.forget_event(name)  # no stale series (and alerts) for an object that is gone
        self._handle(self.table.delete(kind, name))

    def _on_snapshot(self, name: str, items: list[Item]) -> None:
        self._handle(self.table.snapshot(name, items))

    def _handle(self, change: objects.Change) -> None:
        """Carry out a change's side effects: sources stopped and started, counters, a rebuild."""
        for runner in change.stop:
            if self._handoff.loop is not None:
                self._handoff.loop.create_task(runner.stop())
        for state, source in change.start:
            state.runner = SourceRunner(
                state.name, source, self._on_snapshot, clock=self.clock, on_health=lambda _name: self.status.changed()
            )
            if self.start_sources and self._handoff.loop is not None:
                state.runner.start()
        for event, count in change.dropped.items():
            obs.record_expression_failures(event, count)
        self._apply_learned_leads()  # a reloaded Auto VirtualMetric keeps its learnt lead
        if change.targets:
            self.publisher.targets(change.targets, change.events)
        elif change.rebuild:
            self.publisher.partitions(change.partitions)
        elif change.changed:
            self.status.changed()  # e.g. a new object rejected: nothing to publish, a status to write

    def lead_times_changed(self) -> None:
        """The learnt leads changed (loop thread): serve with them and show them in status."""
        self._apply_learned_leads()
        self.status.changed()

    def _apply_learned_leads(self) -> None:
        if self.lead_times is not None and apply_learned_leads(self.metrics.values(), self.lead_times):
            self.publisher.everything()

    # ---------------------------------------------------------------- status

    def statuses(self) -> Statuses:
        return {key: value for piece in self.status_pieces() for key, value in piece.items()}

    def status_pieces(self) -> Iterator[Statuses]:
        """Every object's status, STATUS_PIECE events at a time: the status board refreshes in pieces
        with requests answered in between. An event whose status inputs did not change since the last
        refresh keeps its status (EventStatusMemo), and only then is it checked for new warnings and
        its staleness gauge set; when the served metric names change, every event is checked."""
        now, events, published = self.clock(), list(self.events.items()), self.published
        obs.record_invalid_objects(
            sum(1 for m in self.metrics.values() if m.error) + len(self.names.conflicts),
            sum(1 for _, e in events if e.error),
        )
        unknown = self.notices.unknown_targets_now(published)
        defined = frozenset(resolve_metric_names(self.metrics.values()).served)
        check_all = defined != self._checked_for
        yield metric_statuses(self.metrics, published, self.lead_times, unknown, self.tolerance_steps)
        for start in range(0, len(events), STATUS_PIECE):
            piece: Statuses = {}
            check: dict[str, objects.EventState] = {}
            for name, state in events[start : start + STATUS_PIECE]:
                inputs, status, made = self._event_statuses.status(name, state, published, now)
                piece[(KIND_EVENT, name)] = (state.generation, status)
                if made or check_all:
                    check[name] = state
                    obs.SOURCE_STALE.labels(event=name).set(1 if inputs.stale else 0)
            self.notices.warn_once(check, defined)  # logs new problems once
            yield piece
        self._checked_for = defined  # only once every piece has been checked against it
        self.notices.forget_gone(self.events.keys())
        self._event_statuses.forget_gone(self.events.keys())

    # ---------------------------------------------------------------- MetricsProvider (adapter.api)

    def metric_names(self) -> list[str]:
        return sorted(self.published.metrics)

    def query(self, metric: str, namespace: str, selector: Selector, now: float | None = None) -> Outcome:
        published = self.published
        result = query(published, metric, namespace, selector, self.clock() if now is None else now)
        if isinstance(result, Values) and result.values:
            items, changed = self.tolerance_steps.apply(result.values, published.metrics.get(metric))
            if items is not result.values:
                result = dataclasses.replace(result, values=items)
            if changed:
                self._handoff.call(self.status.changed)
        if self.synced and not self.busy:
            # Before every object is loaded and published, a target nothing feeds yet may be fed by
            # an event still on its way (in cluster mode the VirtualMetrics' list comes first): not a
            # typo to report. A later query reports it if it still is.
            self.notices.observe(result, metric, namespace, on_new=lambda: self._handoff.call(self.status.changed))
        return result

    def snapshot(self) -> object:
        """Changes whenever an answer may change other than by time passing."""
        return self.published

    def preview(self, request: PreviewRequest) -> dict[str, Any] | MetricNotFound:
        return preview_document(self.published, dict(self.events), request)  # may run off the loop
