"""Explain a served value: V(t) over a coming window with the contributions behind each step.

- `prescaler preview (--manifests PATH | --kubeconfig FILE) --metric rps --namespace service-a
   --resource service-a [--from TIME] [--for 2h] [--step 1m] [--time-zone Europe/Berlin]
   [--plot FILE.png]` reads the objects from files or lists them once from a cluster, fetches every
   source once (live) and prints, per step, the value, the peak time inside [t, t + leadTime] and
   the contributions active at that peak (merged, they make the value). The plot shows the merged
   load F(t) stacked per contributing object and the served value V(t).
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
from datetime import datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from adapter.durations import DurationError, parse_duration
from adapter.items import Item
from adapter.pipeline.notices import event_warnings
from adapter.pipeline.objects import ObjectTable, resolve_metric_names
from adapter.pipeline.preview import PreviewRequest, parse_time, preview_document
from adapter.pipeline.publish import build_published
from adapter.pipeline.query import MetricNotFound
from adapter.resources import KIND_EVENT, KIND_METRIC
from adapter.sources.base import Source
from adapter.sources.runner import SourceRunner
from adapter.store.kube import KubeConfigError

# ---------------------------------------------------------------- CLI


def add_parsers(subparsers: Any) -> None:
    parser = subparsers.add_parser("preview", help="show and explain a metric's values over a coming window")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--manifests", nargs="+", metavar="PATH", help="read the objects from YAML files or directories")
    where.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="list the objects once from the cluster of this "
        "kubeconfig (read-only; Secrets for source headers are read from it too)",
    )
    parser.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")
    parser.add_argument("--metric", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--resource", required=True)
    parser.add_argument("--from", dest="start", default=None, help="start time: unix, RFC3339 or now (default: now)")
    parser.add_argument("--duration", default="2h", help="window length, as the route's duration=")
    parser.add_argument("--for", dest="duration", help=argparse.SUPPRESS)  # the flag's old name
    parser.add_argument("--step", default="1m", help="step (default 1m)")
    parser.add_argument(
        "--time-zone", default="UTC", help="IANA time zone for the table and the plot (default UTC), e.g. Asia/Seoul"
    )
    parser.add_argument("--plot", default=None, help="write a PNG plot of the values")
    parser.add_argument("--json", action="store_true", help="print the full JSON document")
    parser.add_argument("--allow-private-networks", action="store_true")
    parser.set_defaults(func=run_preview)


def run_preview(args: argparse.Namespace) -> int:
    try:
        zone = _time_zone(args.time_zone)
        doc = asyncio.run(_preview(args))
    except (LookupError, ValueError, DurationError, OSError, KubeConfigError) as exc:
        print(f"prescaler preview: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _print_table(doc, zone)
    if args.plot:
        _plot(doc, args.plot, zone)
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


def _time_zone(name: str) -> tzinfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"--time-zone: unknown time zone {name!r} (use an IANA name such as Europe/Berlin)") from None


def _load_manifests(collector: _Collector, context: Any, paths: list[str]) -> None:
    from adapter.store.manifests import ManifestError, ManifestStore

    try:
        store = ManifestStore(collector, paths)
    except ManifestError as exc:
        raise ValueError(str(exc)) from None
    context.secrets = store.resolve_secret
    store.poll()
    for error in [*store.errors.values(), *store.warnings]:
        print(f"warning: {error}", file=sys.stderr)


def _load_cluster(collector: _Collector, context: Any, kubeconfig: str, kube_context: str | None) -> None:
    """List both kinds once, as the cluster store's first list does (no watch: a preview is a snapshot)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from adapter.resources import GROUP, VERSION
    from adapter.store.kube import PLURALS, load_api_client
    from adapter.store.kube_json import secret_resolver

    api_client = load_api_client(kubeconfig, kube_context)
    objects = client.CustomObjectsApi(api_client)
    context.secrets = secret_resolver(api_client)
    for kind in (KIND_METRIC, KIND_EVENT):  # metrics first: events are checked against them
        try:
            listed: Any = objects.list_cluster_custom_object(GROUP, VERSION, PLURALS[kind], _request_timeout=30)
        except ApiException as exc:
            raise LookupError(f"cannot list {PLURALS[kind]}.{GROUP}: API error {exc.status} {exc.reason}") from None
        except Exception as exc:  # noqa: BLE001 - transport errors: one clear line
            raise LookupError(f"cannot list {PLURALS[kind]}.{GROUP}: {type(exc).__name__}: {exc}") from None
        for item in listed.get("items") or []:
            collector.apply({"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, **item})


async def _preview(args: argparse.Namespace) -> dict[str, Any]:
    """Load the objects, fetch every source once as of the start, and run the pipeline."""
    from adapter.sources.base import SourceContext

    context = SourceContext(allow_private_networks=args.allow_private_networks)
    start = parse_time(args.start, time.time())
    # Sources are fetched as of the preview's start, so a calendar is expanded around that time.
    context.clock = lambda: start
    table = ObjectTable(context)
    collector = _Collector(table)
    if args.manifests:
        _load_manifests(collector, context, args.manifests)
    else:
        _load_cluster(collector, context, args.kubeconfig, args.context)
    snapshots: dict[str, list[Item]] = {}
    runners = [
        SourceRunner(name, source, snapshots.__setitem__, clock=lambda: start)
        for name, source in collector.sources.items()
        if name in table.events
    ]
    try:
        await asyncio.gather(*(r.fetch_once() for r in runners))
    finally:
        await asyncio.gather(*(r.source.close() for r in runners), return_exceptions=True)
    for runner in runners:
        table.events[runner.owner].runner = runner
        if runner.health.last_error:
            print(f"warning: VirtualMetricEvent {runner.owner}: {runner.health.last_error}", file=sys.stderr)
        # Items the source skipped (a typo in one announced item) are what the server's status shows.
        for text in runner.health.warnings:
            print(f"warning: VirtualMetricEvent {runner.owner}: {text}", file=sys.stderr)
        table.snapshot(runner.owner, snapshots.get(runner.owner, []))
    names = resolve_metric_names(table.metrics.values())
    for conflict in names.conflicts.values():
        print(f"warning: {conflict}", file=sys.stderr)
    for name, state in table.events.items():
        if state.error:
            print(f"warning: {state.error}", file=sys.stderr)
        # The same non-fatal problems the server logs once (a metric nothing defines, ...).
        for text in sorted(event_warnings(state, names.served.keys())):
            print(f"warning: VirtualMetricEvent {name}: {text}", file=sys.stderr)
    published = build_published(names.served, table.feeds(), start)
    req = PreviewRequest(
        args.metric, args.namespace, args.resource, start, parse_duration(args.duration), parse_duration(args.step)
    )
    doc = preview_document(published, table.events, req)
    if isinstance(doc, MetricNotFound):
        raise LookupError(doc.message)
    return doc


def _clock(unix: float, zone: tzinfo) -> str:
    return datetime.fromtimestamp(unix, tz=zone).strftime("%H:%M")


def _print_table(doc: dict[str, Any], zone: tzinfo) -> None:
    print(
        f"# {doc['metric']} for {doc['namespace']}/{doc['resource']} (VirtualMetric {doc['virtualMetric']}, "
        f"{doc['mergeStrategy']}, leadTime {doc['leadTime']:g}s, default {doc['defaultValue']:g}; times in {zone})"
    )
    print(f"# {doc['explanation']}")
    print(f"{'time':<25} {'value':>12} {'peak':>6}  contributions at the peak")
    for step in doc["steps"]:
        parts = [
            f"{c['event']}[{c['entry']}] {c['expression']}={c['value']:g} "
            f"@{_clock(c['start'], zone)}-{_clock(c['end'], zone)}"
            for c in step["contributions"]
        ]
        when = datetime.fromtimestamp(step["unix"], tz=zone).isoformat(timespec="seconds")
        print(
            f"{when:<25} {step['value']:>12g} {_clock(step['peakUnix'], zone):>6}  "
            f"{'; '.join(parts) if parts else '(default)'}"
        )
    for failed in doc.get("failedContributions", []):
        print(f"# dropped: {failed['event']}[{failed['entry']}] item {failed['itemId']}: {failed.get('error')}")


def _plot(doc: dict[str, Any], path: str, zone: tzinfo) -> None:
    """Merged load F(t) (stacked per contributing object when the strategy is Sum) and served V(t)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    steps = doc["steps"]
    times = [datetime.fromtimestamp(s["unix"], tz=zone) for s in steps]
    served = [s["value"] if math.isfinite(s["value"]) else float("nan") for s in steps]
    load = [s["load"] for s in steps]
    objects = sorted({name for s in steps for name in s["loadByObject"]})
    fig, ax = plt.subplots(figsize=(11, 4.5))
    if objects and doc["mergeStrategy"] == "Sum":
        shares = [[s["loadByObject"].get(name, 0.0) for s in steps] for name in objects]
        ax.stackplot(
            times,  # type: ignore[arg-type]
            *shares,
            labels=[f"load from {name}" for name in objects],
            alpha=0.45,
            step="post",
        )
    else:
        for name in objects:
            ax.step(
                times,  # type: ignore[arg-type]
                [s["loadByObject"].get(name, float("nan")) for s in steps],
                where="post",
                alpha=0.6,
                linewidth=1,
                label=f"load from {name}",
            )
    ax.step(
        times,  # type: ignore[arg-type]
        load,
        where="post",
        color="black",
        linewidth=1,
        linestyle="--",
        label=f"merged load F(t) ({doc['mergeStrategy']}, default {doc['defaultValue']:g})",
    )
    ax.step(
        times,  # type: ignore[arg-type]
        served,
        where="post",
        color="tab:red",
        linewidth=2,
        label=f"served V(t) (peak of F over the next {doc['leadTime']:g}s, clamped)",
    )
    ax.set_title(f"{doc['metric']} for {doc['namespace']}/{doc['resource']} (VirtualMetric {doc['virtualMetric']})")
    ax.set_xlabel(f"time ({zone})")
    ax.set_ylabel(doc["metric"])
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%m-%d %H:%M", tz=zone))
    ax.set_ylim(bottom=min(0.0, *(v for v in served if math.isfinite(v))) if served else 0.0)
    ax.legend(loc="upper left", fontsize="small")
    ax.grid(alpha=0.3)
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
