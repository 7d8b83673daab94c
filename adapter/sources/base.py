"""The one small interface every source kind implements.

A source turns its spec into *items* (`adapter.items.Item`). The runner (`adapter.sources.runner`)
owns scheduling, snapshot replacement, staleness and metrics, so a source only knows how to fetch.

To add a kind: subclass `Source[YourConfig]`, set `kind`, implement `parse_config` (validate the spec
with field paths) and `fetch`, and list the class in `adapter.sources.registry`
(docs/adding-a-source.md walks through it).
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from adapter.items import Item
from adapter.resources import CommonSourceSettings

__all__ = ["CommonSourceSettings", "FetchResult", "SecretResolver", "Source", "SourceContext", "no_secrets"]

ConfigT = TypeVar("ConfigT")

MAX_WARNINGS = 20


class SecretResolver(Protocol):
    """Reads one key of a Kubernetes Secret (or its local stand-in in --manifests mode)."""

    def __call__(self, namespace: str, name: str, key: str) -> str: ...


def no_secrets(namespace: str, name: str, key: str) -> str:
    raise LookupError(f"secret {namespace}/{name} key {key!r}: no secret store configured")


class ExpansionBudget:
    """Items that all calendar (schedule) sources of one server may hold at once.

    A calendar's cost is what its current snapshot holds (kept by the engine while a later fetch
    fails) or what its expansion in progress has taken, whichever is larger. An expansion takes from
    the budget as it produces items (from the worker thread, hence the lock) and can always reuse its
    own snapshot's share, so ten thousand `* * * * *` calendars cannot take the server's memory
    between them, and a calendar that fits keeps fitting.
    """

    def __init__(self, total: int):
        self.total = total
        self._held: dict[int, int] = {}  # items in each calendar's current snapshot
        self._pending: dict[int, int] = {}  # items taken by each expansion in progress
        self._sum = 0  # sum over calendars of max(held, pending)
        self._lock = threading.Lock()

    def _cost(self, key: int) -> int:
        return max(self._held.get(key, 0), self._pending.get(key, 0))

    def _after(self, key: int, count: int) -> int:
        """The total if `key`'s expansion took `count` more items."""
        cost = max(self._held.get(key, 0), self._pending.get(key, 0) + count)
        return self._sum - self._cost(key) + cost

    def has_room(self, owner: object, count: int) -> bool:
        with self._lock:
            return self._after(id(owner), count) <= self.total

    def take(self, owner: object, count: int) -> bool:
        """Record `count` more items for `owner`'s expansion; False (nothing recorded) beyond the total."""
        key = id(owner)
        with self._lock:
            after = self._after(key, count)
            if after > self.total:
                return False
            self._pending[key] = self._pending.get(key, 0) + count
            self._sum = after
            return True

    def commit(self, owner: object, count: int) -> None:
        """The expansion became the snapshot, with `count` items: the calendar holds exactly those
        (what its expansion took in steps beyond them goes back). Its next expansion of the same size
        still fits: it reuses its own share, and takes exactly what it needs when a step does not fit."""
        key = id(owner)
        with self._lock:
            before = self._cost(key)
            self._pending.pop(key, None)
            self._held[key] = count
            self._sum += self._cost(key) - before

    def abandon(self, owner: object) -> None:
        """The expansion failed; the previous snapshot (and its share) stays."""
        key = id(owner)
        with self._lock:
            before = self._cost(key)
            self._pending.pop(key, None)
            self._sum += self._cost(key) - before

    def release(self, owner: object) -> None:
        """The calendar is gone (deleted or replaced)."""
        key = id(owner)
        with self._lock:
            self._sum -= self._cost(key)
            self._held.pop(key, None)
            self._pending.pop(key, None)

    @property
    def used(self) -> int:
        return self._sum


# About 80 MB of items; a `* * * * *` window over the default 2-day lookahead is ~4 300 items.
DEFAULT_EXPANSION_BUDGET = 250_000


@dataclass
class SourceContext:
    """What sources may use from outside; injected so tests can replace each part."""

    secrets: SecretResolver = no_secrets
    # Time source for sources that compute windows (schedule, forecast); the runner passes `now` too.
    clock: Callable[[], float] | None = None
    # Addresses a source may reach although they are link-local / metadata (explicit opt-in).
    allow_private_networks: bool = False
    # Shared by the sources created with this context (one per server).
    expansion_budget: ExpansionBudget = field(default_factory=lambda: ExpansionBudget(DEFAULT_EXPANSION_BUDGET))
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FetchResult:
    """What one fetch produced: the complete snapshot plus what status should tell the user."""

    items: Sequence[Item]
    # Problems that did not fail the fetch (a skipped item, a series that could not be forecast).
    warnings: Sequence[str] = ()
    # A short human note for status (e.g. which forecast model was chosen), empty when none.
    note: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "warnings", tuple(self.warnings[:MAX_WARNINGS]))


class Source(abc.ABC, Generic[ConfigT]):
    """A configured source. Instances are created per VirtualMetricEvent and reused across fetches."""

    kind: ClassVar[str]
    # Local sources (schedule) cannot fail to fetch and never go stale.
    never_stale: ClassVar[bool] = False
    default_interval: ClassVar[float] = 30.0

    def __init__(self, config: ConfigT, common: CommonSourceSettings, context: SourceContext):
        self.config = config
        self.common = common
        self.context = context

    @classmethod
    @abc.abstractmethod
    def parse_config(cls, spec: Mapping[str, Any], path: str) -> ConfigT:
        """Validate the kind-specific spec; raise adapter.errors.ValidationError(path + field, msg)."""

    @classmethod
    def value_names(cls, config: ConfigT) -> frozenset[str] | None:
        """The value names every item carries, so expressions naming others fail at load time.

        None (the default) when they depend on the data, as for the `api` kind.
        """
        return None

    @abc.abstractmethod
    async def fetch(self, now: float) -> FetchResult:
        """Return the complete current snapshot of items, or raise adapter.errors.SourceError."""

    def fetch_deadline(self) -> float:
        """Seconds one whole fetch may take before the runner abandons it.

        The HTTP timeout covers one request; kinds that send several requests or compute (forecast)
        override this.
        """
        return self.common.timeout + 1.0

    def describe(self) -> str:
        """A short human description for logs and status (never includes secrets)."""
        return self.kind

    async def close(self) -> None:
        """Release connections; called when the object is deleted or replaced."""
