"""PNG plot of a simulation (matplotlib, Agg).

With traffic: demand against each run's ready capacity (ready pods x capacityPerPod) on the left
axis, the demand a run could not serve shaded in its colour, and each run's replicas on a second
axis. Without traffic (replay scenarios): replicas only. The x axis is UTC wall time. A window
(``start``, ``end``) zooms in on part of the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from adapter.sim.engine import RunResult, SimulationResult

COLORS = {"prescaled": "tab:blue", "hpa": "tab:blue", "reactive": "tab:orange", "oracle": "tab:green"}
DRAW_ORDER = ("oracle", "reactive", "hpa", "prescaled")  # the run that matters most is drawn last (on top)


@dataclass(frozen=True)
class PlotWindow:
    start: float | None = None  # unix seconds; None = the run's start
    end: float | None = None  # unix seconds (exclusive); None = the run's end


def run_label(key: str, result: SimulationResult) -> str:
    """A run's name for people: the HPA as the scenario gives it is 'prescaled' when one of its
    metrics comes from prescaler (else plain 'hpa'); the baselines keep their names."""
    if key != "scenario":
        return key
    uses_prescaler = any(m.kind == "prescaler" for m in result.scenario.metrics.values())
    return "prescaled" if uses_prescaler else "hpa"


def labelled_runs(result: SimulationResult) -> dict[str, RunResult]:
    runs = {run_label(key, result): run for key, run in result.runs.items()}
    order = {name: i for i, name in enumerate(DRAW_ORDER)}
    return dict(sorted(runs.items(), key=lambda kv: order.get(kv[0], -1)))


def window_mask(times: np.ndarray, window: PlotWindow) -> np.ndarray:
    mask = np.ones(times.shape, dtype=bool)
    if window.start is not None:
        mask &= times >= window.start
    if window.end is not None:
        mask &= times < window.end
    if not mask.any():
        raise ValueError(
            f"the plot window [{_iso(window.start)}, {_iso(window.end)}) holds no tick of the run "
            f"[{_iso(float(times[0]))}, {_iso(float(times[-1]))}]"
        )
    return mask


def plot_result(
    result: SimulationResult, path: Path, window: PlotWindow | None = None, unit: str = "trace units"
) -> dict[str, Any]:
    """Write the PNG; returns what was drawn (legend labels, axis labels, time range) for checks."""
    import matplotlib

    matplotlib.use("Agg")  # no display; must be set before pyplot is imported
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    sc = result.scenario
    times = sc.times
    mask = window_mask(times, window or PlotWindow())
    when = np.array([datetime.fromtimestamp(t, UTC) for t in times[mask]])
    runs = labelled_runs(result)
    cap = sc.workload.capacity_per_pod
    fig, load_ax = plt.subplots(figsize=(13, 6))
    handles: list[Any] = []
    if result.demand is not None and cap is not None:
        demand = np.asarray(result.demand)[mask]
        for name, run in runs.items():
            color = COLORS.get(name, "tab:purple")
            capacity = np.asarray(run.ready, dtype=float)[mask] * cap
            handles += load_ax.step(when, capacity, where="post", lw=1.1, color=color, label=f"ready capacity, {name}")
            short = demand > capacity
            if short.any():
                handles.append(
                    load_ax.fill_between(
                        when,
                        capacity,
                        demand,
                        where=short,
                        step="post",
                        color=color,
                        alpha=0.3,
                        lw=0,
                        label=f"unserved demand, {name}",
                    )
                )
        handles += load_ax.step(when, demand, where="post", color="black", lw=1.0, label="demand")
        load_ax.set_ylabel(f"load [{unit}]")
        load_ax.set_ylim(bottom=0)
        replica_ax = load_ax.twinx()
        replica_style: dict[str, Any] = {"lw": 0.9, "ls": "--", "alpha": 0.8}
    else:  # replay: no demand to compare with, replicas are the whole story
        replica_ax = load_ax
        replica_style = {"lw": 1.3}
    top = 1.0
    for name, run in runs.items():
        replicas = np.asarray(run.replicas, dtype=float)[mask]
        top = max(top, float(replicas.max()))
        handles += replica_ax.step(
            when,
            replicas,
            where="post",
            color=COLORS.get(name, "tab:purple"),
            label=f"replicas, {name}",
            **replica_style,
        )
    replica_ax.axhline(sc.hpa.max_replicas, color="grey", lw=0.6, ls=":")
    replica_ax.set_ylabel("replicas [pods]")
    if replica_ax is load_ax:
        replica_ax.set_ylim(bottom=0, top=top * 1.15 + 1)
    else:
        # One pod on the right axis is capacityPerPod on the left: a run's replicas line sits where
        # its capacity will be once the pods are ready, so the start-up lag shows as the gap.
        assert cap is not None
        load_top = max(load_ax.get_ylim()[1], (top * 1.15 + 1) * cap)
        load_ax.set_ylim(0, load_top)
        replica_ax.set_ylim(0, load_top / cap)
    load_ax.set_xlabel("time [UTC]")
    load_ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(load_ax.xaxis.get_major_locator(), tz=UTC))
    load_ax.grid(alpha=0.3)
    load_ax.legend(handles=handles, loc="upper left", fontsize=8, ncol=2, framealpha=0.85)
    summaries = "   ".join(
        f"{run_label(key, result)}: {s.unserved_share:.2%} unserved, {s.pod_hours:.1f} pod-h"
        for key, s in result.summaries.items()
        if s.unserved_share is not None
    )
    fig.suptitle(
        f"HPA {sc.hpa.namespace}/{sc.hpa.name}" + (f"\nwhole run: {summaries}" if summaries else ""), fontsize=10
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return {
        "labels": [h.get_label() for h in handles],
        "axes": [load_ax.get_ylabel(), replica_ax.get_ylabel(), load_ax.get_xlabel()],
        "twin_axes": replica_ax is not load_ax,
        "range": (float(times[mask][0]), float(times[mask][-1])),
    }


def _iso(t: float | None) -> str:
    return "-" if t is None else datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
