"""Documents -> validated per-object state, and which VirtualMetric serves each metric name.

Pure bookkeeping: parsing, comparing with what is loaded, compiling expressions. Starting and
stopping sources is the engine's business.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from adapter import observability as obs
from adapter.errors import ValidationError
from adapter.items import Item
from adapter.labels import _label_value_errors, is_label_value
from adapter.pipeline.contributions import (
    Contributions,
    EntryLayout,
    EntryPlan,
    EntrySummary,
    Key,
    Partition,
    compile_entries,
    compute_contributions,
)
from adapter.pipeline.publish import EventFeed
from adapter.resources import (
    KIND_EVENT,
    KIND_METRIC,
    VirtualMetric,
    VirtualMetricEvent,
    object_id,
    parse_virtual_metric,
    parse_virtual_metric_event,
)
from adapter.sources.base import Source, SourceContext
from adapter.sources.registry import config_parsers, create_source
from adapter.sources.runner import SourceRunner

log = logging.getLogger("prescaler.engine")


@dataclass
class MetricState:
    name: str
    generation: int = 0
    created: float = math.inf  # metadata.creationTimestamp (unknown: newest)
    metric: VirtualMetric | None = None
    error: str | None = None  # validation error (object rejected)


@dataclass
class EventState:
    name: str
    generation: int = 0
    vme: VirtualMetricEvent | None = None
    error: str | None = None  # validation error, or a source that cannot start
    entries: list[EntryPlan] = field(default_factory=list)
    runner: SourceRunner | None = None
    items: list[Item] = field(default_factory=list)  # the last snapshot
    # Whether the current source has delivered a snapshot yet. Until it has, an onStale: Hold source
    # keeps its targets (and unknown targets of its label-named partitions) on hold.
    delivered: bool = False
    contributions: Contributions = field(default_factory=Contributions)
    # Targets no HPA can query (see unreachable_targets), as "namespace/name: why"
    unreachable: tuple[str, ...] = ()

    # Derived from `entries`, remembered per entries list: status refreshes ask for every event
    # several times a second, and an event can have 1 000 entries.
    _derived: tuple[object, EntrySummary, EntryLayout] | None = field(default=None, repr=False, compare=False)
    _named_problems: tuple[object, dict[str, str], frozenset[tuple[str, str]]] | None = field(
        default=None, repr=False, compare=False
    )

    def holds_version_of(self, doc: Mapping[str, Any]) -> bool:
        """Whether `doc` is the version of the object already loaded, without parsing it again.

        The API server bumps metadata.generation on every change of a custom resource's spec, and not
        on status writes. prescaler writes each event's status every few seconds, and each write comes
        back through the watch as the whole object: parsing 1 000 metric entries again each time took
        25 ms of the event loop. Same uid, same generation and same labels (parse reads nothing else
        of the metadata) -> same spec. Objects without a uid or generation (files) are always parsed."""
        vme = self.vme
        if vme is None or self.error is not None or not vme.uid or vme.generation <= 0:
            return False
        meta = doc.get("metadata")
        if not isinstance(meta, Mapping):
            return False
        return (
            meta.get("uid") == vme.uid
            and generation_of(doc) == vme.generation
            and (meta.get("labels") or {}) == vme.labels
            and doc.get("kind") == KIND_EVENT
        )

    @property
    def summary(self) -> EntrySummary:
        return self._derived_from_entries()[1]

    @property
    def layout(self) -> EntryLayout:
        return self._derived_from_entries()[2]

    def _derived_from_entries(self) -> tuple[object, EntrySummary, EntryLayout]:
        derived = self._derived
        if derived is None or derived[0] is not self.entries:
            summary = EntrySummary.of(self.entries)
            derived = self._derived = (self.entries, summary, EntryLayout.of(self.entries, summary))
        return derived

    @property
    def named_target_problems(self) -> dict[str, str]:
        """The unreachable targets among those the entries name ("namespace/name" -> why), checked
        once per entries list: every snapshot of the event has the same ones."""
        return self._named()[1]

    @property
    def named_targets(self) -> frozenset[tuple[str, str]]:
        """(namespace, name) of every target the entries name, once per entries list."""
        return self._named()[2]

    def _named(self) -> tuple[object, dict[str, str], frozenset[tuple[str, str]]]:
        derived = self._named_problems
        if derived is None or derived[0] is not self.entries:
            named = [(namespace, resource) for _, namespace, resource in self.summary.named]  # entry order
            derived = self._named_problems = (self.entries, target_problems(named, {}), frozenset(named))
        return derived

    @property
    def metric_names(self) -> frozenset[str]:
        return self.summary.metrics

    @property
    def partitions(self) -> set[Partition]:
        return set(self.summary.partitions)


def apply_metric(state: MetricState, doc: Mapping[str, Any]) -> bool:
    """Load `doc` into `state`; False when nothing that matters changed."""
    state.generation = generation_of(doc)
    state.created = created_of(doc)
    try:
        metric = parse_virtual_metric(doc)
    except ValidationError as exc:
        log.warning("rejected %s", exc)
        state.metric, state.error = None, str(exc)
        return True
    if state.metric == metric and state.error is None:
        return False
    state.metric, state.error = metric, None
    log.info(
        "loaded VirtualMetric %s (metric %s, %s, leadTime %gs)",
        state.name,
        metric.metric_name,
        metric.merge_strategy,
        metric.lead_time,
    )
    return True


def parse_event(doc: Mapping[str, Any]) -> tuple[VirtualMetricEvent, list[EntryPlan]]:
    """Parse and compile a VirtualMetricEvent. Raises ValidationError naming the object and field."""
    vme = parse_virtual_metric_event(doc, config_parsers())
    return vme, compile_entries(vme)


@dataclass(frozen=True)
class MetricNames:
    """Which VirtualMetric serves each metric name, and who lost a name to an older object."""

    served: dict[str, VirtualMetric]  # by metric name
    conflicts: dict[str, str]  # VirtualMetric name -> message


def resolve_metric_names(states: Iterable[MetricState], previous: MetricNames | None = None) -> MetricNames:
    """The oldest VirtualMetric (creationTimestamp, then name) keeps a contested metric name.

    With `previous`, conflicts that appear or end are logged (the place to report them further)."""
    served: dict[str, VirtualMetric] = {}
    conflicts: dict[str, str] = {}
    valid = [s for s in states if s.metric is not None and s.error is None]
    for state in sorted(valid, key=lambda s: (s.created, s.name)):
        assert state.metric is not None
        other = served.get(state.metric.metric_name)
        if other is None:
            served[state.metric.metric_name] = state.metric
            continue
        conflicts[state.name] = (
            f"{KIND_METRIC}/{state.name}: spec.name: metric {state.metric.metric_name!r} is "
            f"already served by {KIND_METRIC}/{other.name} (the oldest object keeps a name)"
        )
    if previous is not None:
        for name in conflicts.keys() - previous.conflicts.keys():
            log.warning("MetricNameConflict: %s", conflicts[name])
        for name in previous.conflicts.keys() - conflicts.keys():
            log.info("VirtualMetric %s: its metric name conflict is resolved", name)
    return MetricNames(served, conflicts)


@dataclass
class Change:
    """What an update means for the engine: partitions to rebuild (None: all) and sources to swap."""

    partitions: set[Partition] | None = field(default_factory=set)
    start: list[tuple[EventState, Source]] = field(default_factory=list)  # run a new source for the event
    stop: list[SourceRunner] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)  # event -> contributions dropped just now
    changed: bool = True  # False: nothing at all changed (no rebuild, no status refresh)
    # An item snapshot: only these targets (partition -> resources) of these events changed, so
    # a key-level rebuild (adapter.pipeline.incremental) suffices; `partitions` is then empty.
    targets: dict[Partition, set[str]] = field(default_factory=dict)
    events: set[str] = field(default_factory=set)

    @property
    def rebuild(self) -> bool:
        return self.partitions is None or bool(self.partitions)


def _nothing() -> Change:
    return Change(changed=False)


class ObjectTable:
    """Every loaded VirtualMetric and VirtualMetricEvent, updated from documents and item snapshots."""

    def __init__(self, context: SourceContext | None = None) -> None:
        self.context = context or SourceContext()
        self.metrics: dict[str, MetricState] = {}
        self.events: dict[str, EventState] = {}
        # feeds(), remembered: sorted event names (while the names are the same), each event's feed,
        # and the events changed since (a runner is only ever set on an event just applied).
        self._order: list[str] | None = None
        self._feeds: dict[str, EventFeed] = {}
        self._dirty: set[str] = set()
        self._feed_list: list[EventFeed] | None = None

    def apply(self, doc: Mapping[str, Any]) -> Change:
        kind, name = doc.get("kind") if isinstance(doc, Mapping) else None, name_of(doc)
        if kind not in (KIND_METRIC, KIND_EVENT) or name is None:
            log.warning("ignoring object %s: not a named VirtualMetric or VirtualMetricEvent", object_id(doc))
            return _nothing()
        if kind == KIND_METRIC:
            return Change(None) if apply_metric(self.metrics.setdefault(name, MetricState(name)), doc) else _nothing()
        state = self.events.get(name)
        if state is not None and state.holds_version_of(doc):
            obs.EVENT_VERSIONS.labels(outcome="unchanged").inc()
            return _nothing()  # a status write or a re-list: the spec is the one already loaded
        obs.EVENT_VERSIONS.labels(outcome="parsed").inc()
        if state is None:
            self._order = None
        self._dirty.add(name)
        return self._apply_event(self.events.setdefault(name, EventState(name)), doc)

    def _apply_event(self, state: EventState, doc: Mapping[str, Any]) -> Change:
        state.generation, before = generation_of(doc), state.partitions
        try:
            vme, entries = parse_event(doc)
        except ValidationError as exc:
            log.warning("rejected %s", exc)
            change = Change(before, stop=[state.runner] if state.runner else [])
            state.vme, state.error, state.entries, state.runner = None, str(exc), [], None
            self.set_items(state, [], change)
            return change
        if state.vme == vme and state.error is None:
            return _nothing()  # unchanged (e.g. a re-list): keep the running source and its snapshot
        source_changed = state.vme is None or state.vme.source != vme.source
        state.vme, state.error, state.entries = vme, None, entries
        log.info(
            "loaded VirtualMetricEvent %s (%s source, %d metric entries)", state.name, vme.source.kind, len(entries)
        )
        change = Change(before | state.partitions)
        if source_changed:
            change.stop, state.runner = [state.runner] if state.runner else [], None
            state.delivered = False
            self.set_items(state, [], change)
            try:
                change.start.append(
                    (state, create_source(vme.source.kind, vme.source.config, vme.source.common, self.context))
                )
            except Exception as exc:  # noqa: BLE001 - a source that cannot start is reported, not fatal
                state.error = f"{KIND_EVENT}/{vme.name}: spec.source.{vme.source.kind}: cannot start source: {exc}"
                log.warning(state.error)
        else:
            self.set_items(state, state.items, change)
        return change

    def delete(self, kind: str, name: str) -> Change:
        if kind == KIND_METRIC:
            if self.metrics.pop(name, None) is None:
                return _nothing()
            log.info("deleted VirtualMetric %s", name)
            return Change(None)
        state = self.events.pop(name, None)
        if state is None:
            return _nothing()
        self._order = None
        self._dirty.add(name)
        log.info("deleted VirtualMetricEvent %s", name)
        return Change(state.partitions, stop=[state.runner] if state.runner else [])

    def feeds(self) -> list[EventFeed]:
        """What publishing needs of every loaded event, by name. Only the events changed since the
        last call (`_dirty`: applied, deleted or given items) are looked at again: with 10 000 events,
        building every feed for every publication took 30 ms of the event loop."""
        if self._order is None or len(self._order) != len(self.events):  # (the length: a safety net)
            self._order, self._feeds, self._dirty = sorted(self.events), {}, set(self.events)
            self._feed_list = None
        if self._dirty:
            for name in self._dirty:
                state = self.events.get(name)
                if state is None or state.vme is None:
                    self._feeds.pop(name, None)
                else:
                    fresh = self._feed(state)
                    fresh.reuse_touches(self._feeds.get(name))
                    self._feeds[name] = fresh
            self._dirty.clear()
            self._feed_list = None
        if self._feed_list is None:
            self._feed_list = [feed for name in self._order if (feed := self._feeds.get(name)) is not None]
        return self._feed_list

    def feed_map(self) -> Mapping[str, EventFeed]:
        """feeds() by event name: the same feeds, changed only by the next call of feeds()."""
        self.feeds()
        return self._feeds

    @staticmethod
    def _feed(state: EventState) -> EventFeed:
        assert state.vme is not None
        runner = state.runner
        hold = runner is not None and runner.on_stale == "Hold" and not runner.source.never_stale
        return EventFeed(
            state.name,
            state.vme.labels,
            state.entries,
            state.contributions.by_key,
            runner if hold else None,
            state.summary,
        )

    def names(self, kind: str) -> list[str]:
        return list(self.metrics if kind == KIND_METRIC else self.events)

    def absent(self, kind: str, docs: Iterable[Mapping[str, Any]]) -> list[str]:
        """Loaded objects of `kind` that `docs` (a full list) no longer names."""
        named = {n for n in map(name_of, docs) if n}
        return [n for n in self.names(kind) if n not in named]

    def snapshot(self, name: str, items: list[Item]) -> Change:
        """A source delivered `items` for event `name`."""
        state = self.events.get(name)
        if state is None or state.vme is None or (items == state.items and state.contributions.by_key):
            return _nothing()  # most polls re-announce the same items
        self._dirty.add(name)
        first = not state.delivered
        state.delivered = True
        if first and any(entry.name is None for entry in state.entries):
            # Its first snapshot ends the hold of targets not known yet that its label-named entries
            # may produce (a partition's `waiting`): rebuild its partitions, not just its keys.
            change = Change(set(state.partitions))
            self.set_items(state, items, change)
            return change
        before = state.contributions.by_key.keys()
        change = Change(set(), events={name})
        self.set_items(state, items, change)
        if first:  # ends the hold of the targets it names too, with or without a contribution
            for entry in state.entries:
                change.targets.setdefault(entry.partition, set()).add(entry.name or "")
        for metric, namespace, resource in before | state.contributions.by_key.keys():
            change.targets.setdefault((metric, namespace), set()).add(resource)
        return change

    @staticmethod
    def set_items(state: EventState, items: list[Item], change: Change) -> None:
        state.items = items
        state.contributions = compute_contributions(state.entries, items, state.layout)
        state.unreachable = unreachable_targets(state, state.contributions.by_key)
        if state.contributions.dropped:
            change.dropped[state.name] = state.contributions.dropped
            log.warning(
                "VirtualMetricEvent %s: dropped %d contribution(s): %s",
                state.name,
                state.contributions.dropped,
                "; ".join(state.contributions.reasons),
            )


MAX_UNREACHABLE_LISTED = 20


def unreachable_targets(state: EventState, keys: Iterable[Key]) -> tuple[str, ...]:
    """Targets whose values no HPA could ever read, with the reason (at most MAX_UNREACHABLE_LISTED).

    An HPA queries `resource=<name>` in its own namespace: the namespace must be an RFC 1123 label
    (the object parser already insists) and the name a valid label value -- at most 63 characters,
    alphanumerics, '-', '_' and '.' -- which a Deployment name of 64+ characters or a label value
    taken from an item (`nameFromLabel`) need not be.

    The targets the entries name are checked once per entries list (`named_target_problems`); a
    snapshot adds only the targets its items name through labels. (A snapshot of 1 000 named
    targets runs this on the event loop: checking them all again took most of its time.)"""
    found = state.named_target_problems
    if state.summary.by_label and len(found) < MAX_UNREACHABLE_LISTED:
        named = state.named_targets
        from_labels = ((namespace, resource) for _, namespace, resource in keys if (namespace, resource) not in named)
        found = target_problems(from_labels, found)
    return tuple(f"{target}: {why}" for target, why in sorted(found.items()))


def target_problems(targets: Iterable[tuple[str, str]], found: Mapping[str, str]) -> dict[str, str]:
    """`found` plus the (namespace, name) targets no HPA could query, up to MAX_UNREACHABLE_LISTED."""
    result = dict(found)
    namespace_ok: dict[str, bool] = {}  # namespaces repeat
    for namespace, resource in dict.fromkeys(targets):  # each target once
        ok = namespace_ok.get(namespace)
        if ok is None:
            ok = namespace_ok[namespace] = not namespace or is_label_value(namespace)
        if ok and resource and is_label_value(resource):
            continue  # the usual case, in one match: 100 000 targets' messages were 0.4 s of a start
        if len(result) >= MAX_UNREACHABLE_LISTED:
            break
        if f"{namespace}/{resource}" in result:
            continue
        problems = [f"namespace: {p}" for p in _label_problems(namespace) if namespace]
        problems += [f"name: {p}" for p in _label_problems(resource)]
        if not resource:
            problems.append("name: empty")
        if problems:
            result[f"{namespace}/{resource}"] = "; ".join(problems)
    return result


@functools.lru_cache(maxsize=1 << 16)
def _label_problems(value: str) -> tuple[str, ...]:
    return tuple(_label_value_errors(value))


def name_of(doc: Mapping[str, Any]) -> str | None:
    meta = doc.get("metadata") if isinstance(doc, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) and name else None


def generation_of(doc: Mapping[str, Any]) -> int:
    meta = doc.get("metadata") if isinstance(doc, Mapping) else None
    gen = meta.get("generation", 0) if isinstance(meta, Mapping) else 0
    return gen if isinstance(gen, int) and not isinstance(gen, bool) else 0


def created_of(doc: Mapping[str, Any]) -> float:
    """metadata.creationTimestamp as unix seconds; inf when absent or unreadable (files have none)."""
    meta = doc.get("metadata") if isinstance(doc, Mapping) else None
    text = meta.get("creationTimestamp") if isinstance(meta, Mapping) else None
    if isinstance(text, datetime):
        return text.timestamp()
    if not isinstance(text, str):
        return math.inf
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return math.inf
