"""`prescaler simulate --scenario FILE.yaml [--output result.json] [--plot result.png [--from T --duration D]]`."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from adapter.durations import DurationError, parse_duration
from adapter.errors import ValidationError


def add_parsers(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="simulate the HPA controller on a scenario (replay or traffic + prescaler)",
        description="Simulate kube-controller-manager's HPA on a scenario file and report replicas, "
        "served/unserved demand and pod-hours (with reactive and oracle baselines).",
    )
    parser.add_argument("--scenario", required=True, type=Path, help="scenario YAML file")
    parser.add_argument("--output", type=Path, help="write per-tick results and the summary as JSON")
    parser.add_argument(
        "--plot",
        type=Path,
        help="write a PNG plot: demand vs ready capacity with unserved demand shaded, and replicas, per run",
    )
    parser.add_argument(
        "--from",
        dest="start",
        metavar="TIME",
        help="plot from this time: unix seconds, RFC3339, or a duration after the run's start "
        "such as 36h (default: the run's start)",
    )
    parser.add_argument(
        "--duration", metavar="DURATION", help="plot this long from --from, e.g. 6h (default: to the run's end)"
    )
    parser.add_argument("--for", dest="duration", help=argparse.SUPPRESS)  # same as --duration
    parser.add_argument(
        "--unit", default="trace units", help="unit of the trace's values for the plot's load axis, e.g. requests/min"
    )
    parser.set_defaults(func=run_simulate)


def plot_window(start_text: str | None, duration_text: str | None, run_start: float) -> Any:
    """The zoom window of --from/--duration, in unix seconds."""
    from adapter.sim.plot import PlotWindow

    start = run_start
    if start_text is not None:
        try:
            start = float(start_text)
        except ValueError:
            try:
                start = run_start + parse_duration(start_text)
            except DurationError:
                try:
                    parsed = datetime.fromisoformat(start_text.replace("Z", "+00:00"))
                except ValueError:
                    raise ValueError(
                        f"--from {start_text!r}: use unix seconds, RFC3339 or a duration after the "
                        "run's start such as 36h"
                    ) from None
                start = (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
    end = None
    if duration_text is not None:
        try:
            length = parse_duration(duration_text)
        except DurationError as exc:
            raise ValueError(f"--duration: {exc}") from None
        if length <= 0:
            raise ValueError(f"--duration must be positive, got {duration_text!r}")
        end = start + length
    return PlotWindow(start=start if start_text is not None else None, end=end)


def run_simulate(args: argparse.Namespace) -> int:
    from adapter.sim.engine import run_scenario
    from adapter.sim.scenario import load_scenario

    if (args.start or args.duration) and not args.plot:
        print("prescaler simulate: --from/--duration zoom the plot; give --plot FILE.png too", file=sys.stderr)
        return 2
    try:
        scenario = load_scenario(args.scenario)
        window = plot_window(args.start, args.duration, scenario.start)
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

            plot_result(result, args.plot, window=window, unit=args.unit)
    except OSError as exc:
        print(f"prescaler simulate: cannot write output: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:  # a window outside the run
        print(f"prescaler simulate: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:  # --plot without matplotlib installed
        print(f"prescaler simulate: --plot needs matplotlib ({exc})", file=sys.stderr)
        return 1
    _print_summary(result)
    return 0


def _print_summary(result: Any) -> None:
    from adapter.sim.plot import run_label

    rows = [("run", "unserved share", "pod-hours", "in band", "max replicas", "changes")]
    for key, s in result.summaries.items():
        rows.append(
            (
                run_label(key, result),
                _fmt(s.unserved_share, ".4f"),
                f"{s.pod_hours:.2f}",
                _fmt(s.time_in_band, ".3f"),
                str(s.max_replicas),
                str(s.scale_changes),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)))
    for note in result.notes:
        print(f"note: {note}")
    for name, lead in getattr(result.scenario, "learned_lead_times", {}).items():
        print(
            f"note: VirtualMetric/{name} leadTime Auto -> {lead.seconds:g}s (p90 start-up "
            f"{lead.startup or 0:g}s of {len(lead.pods)} pods + sync {lead.sync_period:g}s + ramp {lead.ramp:g}s)"
        )


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)
