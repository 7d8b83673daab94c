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
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from adapter.durations import DurationError, parse_duration
from adapter.engine import Engine
from adapter.expressions import ExpressionError
from adapter.timefmt import rfc3339

MAX_STEPS = 10_000


@dataclass(frozen=True)
class PreviewRequest:
    metric: str
    namespace: str
    resource: str
    start: float
    duration: float = 7200.0
    step: float = 60.0


def preview(engine: Engine, req: PreviewRequest) -> dict[str, Any]:
    """The preview document. Raises LookupError for an unknown metric, ValueError for bad ranges."""
    pub = engine.published
    vm = pub.metrics.get(req.metric)
    if vm is None:
        raise LookupError(f"no VirtualMetric serves metric {req.metric!r}")
    if req.step <= 0 or req.duration < 0:
        raise ValueError("step must be positive and duration non-negative")
    count = int(req.duration // req.step) + 1
    if count > MAX_STEPS:
        raise ValueError(f"{count} steps requested; at most {MAX_STEPS} (use a larger step)")
    times = req.start + np.arange(count) * req.step
    key = (req.metric, req.namespace, req.resource)
    if key in pub.timelines:
        values = pub.timelines.values_at(key, times)
    else:
        values = np.full(count, vm.clamp(vm.default_value))
    contributions = _contributions(engine, key, vm.hold_time)
    steps = []
    for t, v in zip(times.tolist(), values.tolist()):
        window_end = t + vm.lead_time
        active = [c for c in contributions if c["start"] <= window_end and c["activeUntil"] > t]
        steps.append({"time": _iso(t), "unix": t, "value": v, "contributions": active})
    return {
        "metric": req.metric, "namespace": req.namespace, "resource": req.resource,
        "virtualMetric": vm.name, "mergeStrategy": vm.merge_strategy, "defaultValue": vm.default_value,
        "leadTime": vm.lead_time, "holdTime": vm.hold_time, "min": vm.min, "max": vm.max,
        "explanation": ("value(t) = clamp(max over s in [t, t+leadTime] of "
                        f"{vm.merge_strategy}(contributions active at s) or defaultValue, min, max)"),
        "steps": steps,
    }


def _contributions(engine: Engine, key: tuple[str, str, str], hold: float) -> list[dict[str, Any]]:
    out = []
    metric, namespace, resource = key
    for name in sorted(engine.events):
        state = engine.events[name]
        for entry in state.entries:
            if entry.metric != metric or entry.namespace != namespace:
                continue
            for item in state.items:
                target = entry.name if entry.name is not None else item.labels.get(entry.name_from_label or "")
                if target != resource:
                    continue
                try:
                    value: float | None = entry.expression.evaluate(item.values)
                    error = None
                except ExpressionError as exc:
                    value, error = None, str(exc)
                record = {"event": name, "entry": entry.index, "expression": entry.expression.text,
                          "itemId": item.id, "start": item.start, "end": item.end,
                          "activeUntil": item.end + hold, "values": dict(item.values), "value": value}
                if error:
                    record["error"] = error
                out.append(record)
    return out


_iso = rfc3339


def parse_time(text: str | None, now: float) -> float:
    if text is None or text == "now":
        return now
    try:
        return float(text)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"invalid time {text!r}: use unix seconds, RFC3339 or 'now'") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


# ---------------------------------------------------------------- HTTP route on the running server


def install_preview_routes(api: Any, engine: Engine) -> None:
    from fastapi.responses import JSONResponse

    @api.get("/prescaler/v1/preview")
    async def preview_route(metric: str, namespace: str, resource: str, start: str | None = None,
                            duration: str = "2h", step: str = "1m") -> JSONResponse:
        try:
            req = PreviewRequest(metric, namespace, resource, parse_time(start, engine.clock()),
                                 parse_duration(duration), parse_duration(step))
            return JSONResponse(preview(engine, req))
        except LookupError as exc:
            return JSONResponse({"error": str(exc)}, status_code=404)
        except (ValueError, DurationError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)


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


async def _preview_from_manifests(args: argparse.Namespace) -> dict[str, Any]:
    from adapter.sources.base import SourceContext
    from adapter.store.manifests import ManifestError, ManifestStore

    context = SourceContext(allow_private_networks=args.allow_private_networks)
    start = parse_time(args.start, time.time())
    # Sources are fetched as of the preview's start, so a calendar is expanded around that time.
    engine = Engine(context, clock=lambda: start, start_sources=False)
    try:
        store = ManifestStore(engine, args.manifests)
    except ManifestError as exc:
        raise ValueError(str(exc)) from None
    context.secrets = store.resolve_secret
    await engine.start()
    store.poll()
    await engine.settle()
    for error in store.errors.values():
        print(f"warning: {error}", file=sys.stderr)
    runners = [s.runner for s in engine.events.values() if s.runner is not None]
    await asyncio.gather(*(r.fetch_once() for r in runners))
    for state in engine.events.values():
        if state.error:
            print(f"warning: {state.error}", file=sys.stderr)
        elif state.runner and state.runner.health.last_error:
            print(f"warning: VirtualMetricEvent {state.name}: {state.runner.health.last_error}", file=sys.stderr)
    await engine.settle()
    req = PreviewRequest(args.metric, args.namespace, args.resource, start,
                         parse_duration(args.duration), parse_duration(args.step))
    try:
        return preview(engine, req)
    finally:
        await engine.stop()


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
