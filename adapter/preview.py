"""Explain a served value: V(t) over a coming window with the contributions behind each step.

- `prescaler preview --manifests PATH --metric rps --namespace service-a --resource service-a
   [--from TIME] [--for 2h] [--step 1m] [--plot FILE.png]` fetches every source once (live) and
   prints, per step, the value and which objects and items contributed.
- The running server offers the same read-only JSON at `/prescaler/v1/preview?...` (outside the
  aggregated path: reach it with `kubectl port-forward`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from adapter.durations import DurationError, parse_duration
from adapter.items import Item
from adapter.pipeline.objects import ObjectTable, resolve_metric_names
from adapter.pipeline.preview import PreviewRequest, parse_time, preview_document
from adapter.pipeline.publish import build_published
from adapter.pipeline.query import MetricNotFound
from adapter.sources.base import Source
from adapter.sources.runner import SourceRunner
from adapter.timefmt import rfc3339

_iso = rfc3339

# ---------------------------------------------------------------- CLI


def add_parsers(subparsers: Any) -> None:
    parser = subparsers.add_parser("preview", help="show and explain a metric's values over a coming window")
    parser.add_argument("--manifests", nargs="+", required=True, metavar="PATH")
    parser.add_argument("--metric", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--resource", required=True)
    parser.add_argument("--from", dest="start", default=None, help="start time: unix, RFC3339 or now (default: now)")
    parser.add_argument("--duration", default="2h", help="window length, as the route's duration=")
    parser.add_argument("--for", dest="duration", help=argparse.SUPPRESS)  # the flag's old name
    parser.add_argument("--step", default="1m", help="step (default 1m)")
    parser.add_argument("--plot", default=None, help="write a PNG plot of the values")
    parser.add_argument("--json", action="store_true", help="print the full JSON document")
    parser.add_argument("--allow-private-networks", action="store_true")
    parser.set_defaults(func=run_preview)


def run_preview(args: argparse.Namespace) -> int:
    try:
        doc = asyncio.run(_preview_from_manifests(args))
    except (LookupError, ValueError, DurationError, OSError) as exc:
        print(f"prescaler preview: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _print_table(doc)
    if args.plot:
        _plot(doc, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0


class _Collector:
    """The object sink the manifest store feeds: documents straight into an ObjectTable."""

    def __init__(self, table: ObjectTable):
        self.table = table
        self.sources: dict[str, Source] = {}  # event name -> its source, not started

    def apply(self, doc: Mapping[str, Any]) -> None:
        for state, source in self.table.apply(doc).start:
            self.sources[state.name] = source

    def delete(self, kind: str, name: str) -> None:
        self.table.delete(kind, name)
        self.sources.pop(name, None)

    def resync(self, kind: str, docs: list[Mapping[str, Any]]) -> None:
        for doc in docs:
            self.apply(doc)

    def mark_synced(self, kind: str) -> None:
        pass


async def _preview_from_manifests(args: argparse.Namespace) -> dict[str, Any]:
    """Load the manifests, fetch every source once as of the start, and run the pipeline."""
    from adapter.sources.base import SourceContext
    from adapter.store.manifests import ManifestError, ManifestStore

    context = SourceContext(allow_private_networks=args.allow_private_networks)
    start = parse_time(args.start, time.time())
    # Sources are fetched as of the preview's start, so a calendar is expanded around that time.
    context.clock = lambda: start
    table = ObjectTable(context)
    collector = _Collector(table)
    try:
        store = ManifestStore(collector, args.manifests)
    except ManifestError as exc:
        raise ValueError(str(exc)) from None
    context.secrets = store.resolve_secret
    store.poll()
    for error in store.errors.values():
        print(f"warning: {error}", file=sys.stderr)
    snapshots: dict[str, list[Item]] = {}
    runners = [SourceRunner(name, source, snapshots.__setitem__, clock=lambda: start)
               for name, source in collector.sources.items() if name in table.events]
    try:
        await asyncio.gather(*(r.fetch_once() for r in runners))
    finally:
        await asyncio.gather(*(r.source.close() for r in runners), return_exceptions=True)
    for runner in runners:
        table.events[runner.owner].runner = runner
        if runner.health.last_error:
            print(f"warning: VirtualMetricEvent {runner.owner}: {runner.health.last_error}", file=sys.stderr)
        table.snapshot(runner.owner, snapshots.get(runner.owner, []))
    for state in table.events.values():
        if state.error:
            print(f"warning: {state.error}", file=sys.stderr)
    published = build_published(resolve_metric_names(table.metrics.values()).served, table.feeds(), start)
    req = PreviewRequest(args.metric, args.namespace, args.resource, start,
                         parse_duration(args.duration), parse_duration(args.step))
    doc = preview_document(published, table.events, req)
    if isinstance(doc, MetricNotFound):
        raise LookupError(doc.message)
    return doc


def _print_table(doc: dict[str, Any]) -> None:
    print(f"# {doc['metric']} for {doc['namespace']}/{doc['resource']} (VirtualMetric {doc['virtualMetric']}, "
          f"{doc['mergeStrategy']}, leadTime {doc['leadTime']:g}s, default {doc['defaultValue']:g})")
    print(f"# {doc['explanation']}")
    print(f"{'time':<21} {'value':>12}  contributions")
    for step in doc["steps"]:
        parts = [f"{c['event']}[{c['entry']}] {c['expression']}={c['value'] if c['value'] is not None else 'ERR'} "
                 f"@{_iso(c['start'])[11:16]}-{_iso(c['end'])[11:16]}" for c in step["contributions"]]
        print(f"{step['time']:<21} {step['value']:>12g}  {'; '.join(parts) if parts else '(default)'}")


def _plot(doc: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    times = [datetime.fromtimestamp(s["unix"], tz=UTC) for s in doc["steps"]]
    values = [s["value"] if math.isfinite(s["value"]) else float("nan") for s in doc["steps"]]
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.step(times, values, where="post", label=f"served {doc['metric']}")  # type: ignore[arg-type]
    ax.set_title(f"{doc['metric']} for {doc['namespace']}/{doc['resource']}")
    ax.set_xlabel("time (UTC)")
    ax.set_ylabel(doc["metric"])
    ax.legend()
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
