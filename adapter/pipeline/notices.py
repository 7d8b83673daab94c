"""Things worth saying that are not errors: said once in the logs, and kept for the status.

- A VirtualMetricEvent naming a metric no VirtualMetric defines, or a target no HPA could query:
  logged once per problem (not per status refresh); the conditions themselves come from
  adapter.pipeline.status.
- A query for a target nothing feeds (a typo in an HPA's selector): served the default by
  adapter.pipeline.query, logged once per target here (at most UNKNOWN_LOG_BURST new ones per
  UNKNOWN_LOG_WINDOW, then one line with how many were left out) and listed, the most recent
  MAX_UNKNOWN_TARGETS per metric, in the VirtualMetric's `status.unknownTargets`.
- Readiness at startup: every source's first fetch finished (StartupGate).

Bookkeeping and logs only; the engine decides when to call it.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping

from adapter.pipeline.objects import EventState
from adapter.pipeline.publish import Published
from adapter.pipeline.query import Outcome, Values

log = logging.getLogger("prescaler.engine")

MAX_UNKNOWN_TARGETS = 20  # listed per VirtualMetric status (the most recently queried)
MAX_LOGGED_UNKNOWN = 10_000  # targets remembered as already logged (then the memory starts over)
# A selector may name thousands of targets (`resource in (...)`), and any client may send one: the
# log says at most this many new unknown targets per window, then one line with how many it left out.
UNKNOWN_LOG_BURST = 10
UNKNOWN_LOG_WINDOW = 60.0  # seconds


class Notices:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        # metric -> "namespace/name" queried that nothing feeds, least recently queried first
        self.unknown_targets: dict[str, OrderedDict[str, None]] = {}
        self._logged_unknown: set[tuple[str, str]] = set()
        self._clock = clock
        self._window_start = -float("inf")
        self._logged_in_window = 0
        self._left_out = 0  # new unknown targets not logged in the current window
        self._warned: dict[str, frozenset[str]] = {}  # event -> warnings already logged

    def observe(self, result: Outcome, metric: str, namespace: str, on_new: Callable[[], None]) -> None:
        """After a query: note the targets it named that nothing feeds; `on_new` when the list grew."""
        if type(result) is Values and result.unknown and self.note_unknown(metric, namespace, result.unknown):
            on_new()

    def note_unknown(self, metric: str, namespace: str, resources: Iterable[str]) -> bool:
        """A query named targets nothing feeds; True when the listed set changed (a status to write)."""
        targets = self.unknown_targets.setdefault(metric, OrderedDict())
        added = False
        for resource in resources:
            target = f"{namespace}/{resource}"
            if target in targets:
                targets.move_to_end(target)
            else:
                targets[target] = None
                added = True
                while len(targets) > MAX_UNKNOWN_TARGETS:
                    targets.popitem(last=False)
            if (metric, target) not in self._logged_unknown:
                if len(self._logged_unknown) >= MAX_LOGGED_UNKNOWN:
                    self._logged_unknown.clear()
                self._logged_unknown.add((metric, target))
                self._log_unknown(metric, target)
        return added

    def _log_unknown(self, metric: str, target: str) -> None:
        now = self._clock()
        if now - self._window_start >= UNKNOWN_LOG_WINDOW:
            if self._left_out:
                log.warning(
                    "%d more queried targets that no VirtualMetricEvent feeds were not logged one by one "
                    "(at most %d per %.0f s; all are counted in prescaler_unknown_target_queries_total)",
                    self._left_out,
                    UNKNOWN_LOG_BURST,
                    UNKNOWN_LOG_WINDOW,
                )
            self._window_start, self._logged_in_window, self._left_out = now, 0, 0
        if self._logged_in_window >= UNKNOWN_LOG_BURST:
            self._left_out += 1
            return
        self._logged_in_window += 1
        log.warning(
            "query for metric %s target %s: no VirtualMetricEvent feeds it, serving the "
            "defaultValue (a typo in the HPA's selector or namespace?)",
            metric,
            target,
        )

    def unknown_targets_now(self, published: Published) -> dict[str, list[str]]:
        """Queried targets still unknown (one that an object feeds by now leaves the list)."""
        out: dict[str, list[str]] = {}
        for metric, targets in self.unknown_targets.items():
            for target in list(targets):
                namespace, _, resource = target.partition("/")
                part = published.partitions.get((metric, namespace))
                if part is not None and resource in part.by_resource:
                    del targets[target]
            if targets:
                out[metric] = list(targets)
        return out

    def warn_once(self, events: Mapping[str, EventState], defined: Collection[str]) -> None:
        """Log each event's non-fatal problems once (nothing is rejected for them). `defined`: the
        metric names loaded VirtualMetrics serve now (not the published snapshot's: before the
        first publication ends it has none, and every event was warned about its metric)."""
        for name, state in events.items():
            new = event_warnings(state, defined)
            for text in sorted(new - self._warned.get(name, frozenset())):
                log.warning("VirtualMetricEvent %s: %s", name, text)
            self._warned[name] = new

    def forget_gone(self, names: Iterable[str]) -> None:
        """After warn_once has seen every event (in pieces): forget the events that are gone."""
        for gone in self._warned.keys() - set(names):
            del self._warned[gone]


def event_warnings(state: EventState, defined: Collection[str]) -> frozenset[str]:
    """An accepted event's non-fatal problems: metrics no VirtualMetric defines, targets no HPA can
    query. The server logs them once; `preview` prints them with its table."""
    if state.vme is None or state.error is not None:
        return frozenset()
    warnings = {
        f"names metric {metric!r}, which no VirtualMetric defines: it contributes nothing"
        for metric in state.metric_names.difference(defined)
    }
    warnings.update(f"no HPA can query target {t}" for t in state.unreachable)
    return frozenset(warnings)


STARTUP_GRACE_SECONDS = 30.0  # longest the first fetches may delay readiness


class StartupGate:
    """Ready once every source's first fetch has finished (succeeded or failed) and it is published.

    With onStale: Hold a source that never succeeded answers 503, so a replica joins the Service only
    once it knows what its peers know; bounded by STARTUP_GRACE_SECONDS so a hanging source cannot
    keep it out. Once open, it stays open (a new object later never makes a replica unready)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._started = clock()  # the engine is created when the process starts
        self._open = False

    def passed(self, events: Mapping[str, EventState], busy: bool) -> bool:
        if not self._open:
            waiting = sorted(
                name
                for name, s in events.items()
                if s.runner is not None
                and s.runner.health.last_success is None
                and s.runner.health.consecutive_failures == 0
            )
            if not (waiting or busy) or self._clock() - self._started > STARTUP_GRACE_SECONDS:
                if waiting:
                    log.warning("ready although the first fetch of %s has not finished", ", ".join(waiting[:10]))
                self._open = True
        return self._open
