"""`leadTime: Auto`: the pipeline's side of it. What is measured (pod start-up, the HPA's ramp) and how
lives in adapter.store.leadtime, at the cluster edge; the pipeline only needs a lead per VirtualMetric
and the status that explains it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, Protocol

from adapter.pipeline.objects import MetricState


class LeadTimes(Protocol):
    def lead_time(self, vm: Any) -> float:
        """The lead to serve an Auto VirtualMetric with (a fixed fallback until something is measured)."""
        ...

    def status(self, vm: Any) -> dict[str, Any] | None:
        """What the VirtualMetric's status shows about its learnt lead, or None."""
        ...


def apply_learned_leads(metric_states: Iterable[MetricState], learner: LeadTimes) -> bool:
    """Give every Auto VirtualMetric its learnt lead; True if one changed (then the timelines must rebuild)."""
    changed = False
    for state in metric_states:
        vm = state.metric
        if vm is not None and vm.lead_time_auto:
            lead = learner.lead_time(vm)
            if vm.lead_time != lead:
                state.metric = dataclasses.replace(vm, lead_time=lead)
                changed = True
    return changed
