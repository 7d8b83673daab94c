"""A VirtualMetric that shadows an upstream metric says so in its status.

`with_shadow_conditions` wraps the engine's desired-status function for the status writer: every
VirtualMetric whose served name the upstream also lists gets condition ``ShadowsUpstream=True``
(prescaler's value is served; the upstream's is hidden). Pure over dicts; the caller supplies the
served name of each VirtualMetric (spec.name, defaulting to metadata.name).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from adapter.upstream.passthrough import Passthrough

CONDITION = "ShadowsUpstream"
KIND_METRIC = "VirtualMetric"

Desired = Mapping[tuple[str, str], tuple[int, Mapping[str, Any]]]


def shadow_condition(metric: str, upstream_url: str) -> dict[str, Any]:
    return {
        "type": CONDITION,
        "status": "True",
        "reason": "UpstreamDefinesMetric",
        "message": f"the upstream adapter {upstream_url} also serves metric {metric}; this VirtualMetric's "
        f"value is served and the upstream's is hidden",
    }


def add_shadow_conditions(
    desired: Desired, shadowed: frozenset[str], served_names: Mapping[str, str], upstream_url: str
) -> dict[tuple[str, str], tuple[int, Mapping[str, Any]]]:
    out = dict(desired)
    if not shadowed:
        return out
    for (kind, name), (generation, status) in desired.items():
        metric = served_names.get(name, name)
        if kind != KIND_METRIC or metric not in shadowed:
            continue
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != CONDITION]
        out[(kind, name)] = (
            generation,
            {**status, "conditions": [*conditions, shadow_condition(metric, upstream_url)]},
        )
    return out


def with_shadow_conditions(
    desired: Callable[[], Desired], upstream: Passthrough, served_names: Callable[[], Mapping[str, str]]
) -> Callable[[], Desired]:
    def combined() -> Desired:
        return add_shadow_conditions(desired(), upstream.shadowed, served_names(), upstream.config.url)

    return combined
