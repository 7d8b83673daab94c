"""PNG plot of a simulation: demand vs ready capacity, and replicas over time (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from adapter.sim.engine import SimulationResult

_COLORS = {"scenario": "tab:blue", "reactive": "tab:orange", "oracle": "tab:green"}


def plot_result(result: SimulationResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display; must be set before pyplot is imported
    import matplotlib.pyplot as plt

    sc = result.scenario
    cap = sc.workload.capacity_per_pod
    hours = (sc.times - sc.start) / 3600.0
    show_load = result.demand is not None and cap is not None
    fig, axes = plt.subplots(2 if show_load else 1, 1, figsize=(12, 7 if show_load else 4), sharex=True,
                             squeeze=False)
    row = 0
    if show_load:
        ax = axes[0][0]
        ax.plot(hours, result.demand, color="black", lw=1.0, label="demand")
        for name, run in result.runs.items():
            ax.step(hours, run.ready * cap, where="post", lw=1.0, color=_COLORS.get(name),
                    label=f"ready capacity ({name})")
        ax.set_ylabel("load")
        ax.legend(loc="upper left", fontsize=8)
        ax.grid(alpha=0.3)
        row = 1
    ax = axes[row][0]
    for name, run in result.runs.items():
        color = _COLORS.get(name)
        ax.step(hours, run.replicas, where="post", lw=1.2, color=color, label=f"spec.replicas ({name})")
        ax.step(hours, run.ready, where="post", lw=0.8, ls="--", color=color, label=f"ready ({name})")
    ax.axhline(sc.hpa.max_replicas, color="grey", lw=0.6, ls=":")
    ax.set_ylabel("replicas")
    ax.set_xlabel("hours since start")
    ax.set_ylim(bottom=0, top=max(float(np.max(result.runs["scenario"].replicas)), 1.0) * 1.15 + 1)
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    fig.suptitle(f"HPA {sc.hpa.namespace}/{sc.hpa.name}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
