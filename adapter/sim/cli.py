"""`prescaler simulate --scenario FILE.yaml [--output result.json] [--plot result.png]`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from adapter.errors import ValidationError


def add_parsers(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "simulate", help="simulate the HPA controller on a scenario (replay or traffic + prescaler)",
        description="Simulate kube-controller-manager's HPA on a scenario file and report replicas, "
                    "served/unserved demand and pod-hours (with reactive and oracle baselines).")
    parser.add_argument("--scenario", required=True, type=Path, help="scenario YAML file")
    parser.add_argument("--output", type=Path, help="write per-tick results and the summary as JSON")
    parser.add_argument("--plot", type=Path, help="write a PNG plot of demand, capacity and replicas")
    parser.set_defaults(func=run_simulate)


def run_simulate(args: argparse.Namespace) -> int:
    from adapter.sim.engine import run_scenario
    from adapter.sim.scenario import load_scenario

    try:
        scenario = load_scenario(args.scenario)
        result = run_scenario(scenario)
    except ValidationError as exc:
        print(f"prescaler simulate: invalid scenario {args.scenario}: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # e.g. a forecast or expression rejecting the scenario's data
        print(f"prescaler simulate: cannot simulate {args.scenario}: {exc}", file=sys.stderr)
        return 2
    document = result.to_json()
    try:
        if args.output:
            args.output.write_text(json.dumps(document, indent=None, separators=(",", ":")) + "\n")
        if args.plot:
            from adapter.sim.plot import plot_result

            plot_result(result, args.plot)
    except OSError as exc:
        print(f"prescaler simulate: cannot write output: {exc}", file=sys.stderr)
        return 1
    except ImportError as exc:  # --plot without matplotlib installed
        print(f"prescaler simulate: --plot needs matplotlib ({exc})", file=sys.stderr)
        return 1
    _print_summary(result)
    return 0


def _print_summary(result: Any) -> None:
    rows = [("run", "unserved share", "pod-hours", "in band", "max replicas", "changes")]
    for name, s in result.summaries.items():
        rows.append((name, _fmt(s.unserved_share, ".4f"), f"{s.pod_hours:.2f}", _fmt(s.time_in_band, ".3f"),
                     str(s.max_replicas), str(s.scale_changes)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)))
    for note in result.notes:
        print(f"note: {note}")
    for name, lead in getattr(result.scenario, "learned_lead_times", {}).items():
        print(f"note: VirtualMetric/{name} leadTime Auto -> {lead.seconds:g}s (p90 start-up "
              f"{lead.startup or 0:g}s of {len(lead.pods)} pods + sync {lead.sync_period:g}s + ramp {lead.ramp:g}s)")


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)
