"""The one small interface every source kind implements.

A source turns its spec into *items* (`adapter.items.Item`). The runner (`adapter.sources.runner`)
owns scheduling, snapshot replacement, staleness and metrics, so a source only knows how to fetch.

To add a kind: subclass `Source`, set `kind`, implement `parse_config` (validate the spec with field
paths) and `fetch`, and register it in `adapter.sources.registry`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from adapter.items import Item


class SecretResolver(Protocol):
    """Reads one key of a Kubernetes Secret (or its local stand-in in --manifests mode)."""

    def __call__(self, namespace: str, name: str, key: str) -> str: ...


def no_secrets(namespace: str, name: str, key: str) -> str:
    raise LookupError(f"secret {namespace}/{name} key {key!r}: no secret store configured")


@dataclass
class SourceContext:
    """What sources may use from outside; injected so tests can replace each part."""

    secrets: SecretResolver = no_secrets
    # Time source for sources that compute windows (schedule, forecast); the runner passes `now` too.
    clock: Callable[[], float] | None = None
    # Addresses a source may reach although they are link-local / metadata (explicit opt-in).
    allow_private_networks: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CommonSourceSettings:
    """Fields every source kind shares (DESIGN §2 extensions, §6)."""

    interval: float = 30.0
    timeout: float = 5.0
    stale_after: float = 150.0
    on_stale: str = "Hold"  # Hold | UseKnown


class Source(abc.ABC):
    """A configured source. Instances are created per VirtualMetricEvent and reused across fetches."""

    kind: ClassVar[str]
    # Local sources (schedule) cannot fail to fetch and never go stale.
    never_stale: ClassVar[bool] = False
    default_interval: ClassVar[float] = 30.0

    def __init__(self, config: Any, common: CommonSourceSettings, context: SourceContext):
        self.config = config
        self.common = common
        self.context = context

    @classmethod
    @abc.abstractmethod
    def parse_config(cls, spec: Mapping[str, Any], path: str) -> Any:
        """Validate the kind-specific spec; raise adapter.errors.ValidationError(path + field, msg)."""

    @abc.abstractmethod
    async def fetch(self, now: float) -> list[Item]:
        """Return the complete current snapshot of items, or raise adapter.errors.SourceError."""

    def describe(self) -> str:
        """A short human description for logs and status (never includes secrets)."""
        return self.kind

    async def close(self) -> None:
        """Release connections; called when the object is deleted or replaced."""
