"""Two replicas agree: two `prescaler serve` processes on the same manifests and the same source serve
the same values at the same instants.

A value is a function of the item snapshot and the time. So:
  * with an explicit evaluation time (the preview endpoint reads the timelines the API serves), the
    two replicas' series over a window must be identical;
  * on the external metrics API itself (no time parameter), a pair of answers taken while no
    breakpoint passed between the first request and the second (the items change only on whole
    BREAK_SECONDS boundaries) must be identical, and enough such pairs must be seen.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from tests.announcer_server import Announcer
from tests.serve_process import ServeProcess

BREAK_SECONDS = 2
WINDOW = 120
V1 = "/apis/external.metrics.k8s.io/v1beta1"


def staircase(start: int) -> list[dict]:
    """Items whose value changes every BREAK_SECONDS, from `start` for WINDOW seconds."""
    return [
        {
            "start": start + i,
            "end": start + i + BREAK_SECONDS,
            "values": {"n": (i // BREAK_SECONDS) % 9 + 1},
            "id": f"step-{i}",
        }
        for i in range(0, WINDOW, BREAK_SECONDS)
    ]


def write_manifests(directory: Path, url: str, start: int) -> None:
    docs = [
        {
            "apiVersion": "prescaler.pingpong.ai/v1",
            "kind": "VirtualMetric",
            "metadata": {"name": "rps"},
            "spec": {"name": "rps", "defaultValue": 0, "mergeStrategy": "Sum"},
        },
        {
            "apiVersion": "prescaler.pingpong.ai/v1",
            "kind": "VirtualMetric",
            "metadata": {"name": "rps-ahead"},
            "spec": {"name": "rps-ahead", "defaultValue": 0, "mergeStrategy": "Max", "leadTime": "4s"},
        },
        {
            "apiVersion": "prescaler.pingpong.ai/v1",
            "kind": "VirtualMetricEvent",
            "metadata": {"name": "announced"},
            "spec": {
                "source": {"api": {"url": url}, "interval": "1s"},
                "metrics": [
                    {
                        "name": m,
                        "resource": {"name": f"svc-{i}", "namespace": "apps"},
                        "value": {"expression": f"n * {i + 1}"},
                    }
                    for m in ("rps", "rps-ahead")
                    for i in range(3)
                ],
            },
        },
        {
            "apiVersion": "prescaler.pingpong.ai/v1",
            "kind": "VirtualMetricEvent",
            "metadata": {"name": "planned"},
            "spec": {
                "source": {"schedule": {"items": staircase(start)}},
                "metrics": [
                    {
                        "name": "rps",
                        "resource": {"name": "svc-0", "namespace": "apps"},
                        "value": {"expression": "n * 100"},
                    }
                ],
            },
        },
    ]
    (directory / "objects.yaml").write_text("\n---\n".join(json.dumps(d) for d in docs))


def value_of(server: ServeProcess, metric: str, resource: str) -> tuple[str, str]:
    r = server.get(f"{V1}/namespaces/apps/{metric}", params={"labelSelector": f"resource={resource}"})
    assert r.status_code == 200, r.text
    item = r.json()["items"][0]
    return item["value"], r.json()["items"][0]["timestamp"]


def test_two_replicas_serve_identical_values_at_the_same_instants(tmp_path: Path) -> None:
    start = int(time.time()) // BREAK_SECONDS * BREAK_SECONDS
    announcer = Announcer()
    announcer.set_items(staircase(start))
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    write_manifests(manifests, announcer.url, start)
    replicas = []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            replicas.append(ServeProcess([manifests], tmp_path / name))
        a, b = replicas
        deadline = time.time() + 30  # both have fetched the source once
        while not all(value_of(s, "rps", "svc-1")[0] != "0" for s in replicas):
            assert time.time() < deadline, "a replica never served the announced values"
            time.sleep(0.2)

        # Explicit evaluation times: the same series, instant by instant.
        params = {
            "metric": "rps-ahead",
            "namespace": "apps",
            "resource": "svc-2",
            "start": str(start - 5),
            "duration": f"{WINDOW + 10}s",
            "step": "0.5s",
        }
        series = [
            [(s["unix"], s["value"]) for s in r.get("/prescaler/v1/preview", params=params).json()["steps"]]
            for r in replicas
        ]
        assert series[0] == series[1]
        assert len({v for _, v in series[0]}) >= 5  # the series really moves

        # The API itself, at the same instants: pairs taken between two breakpoints must agree.
        compared = 0
        deadline = time.time() + 20
        while compared < 12 and time.time() < deadline:
            for metric, resource in (("rps", "svc-0"), ("rps-ahead", "svc-2")):
                before = time.time()
                first, second = value_of(a, metric, resource), value_of(b, metric, resource)
                after = time.time()
                # Breakpoints sit on multiples of BREAK_SECONDS (the lead time is one too); queries
                # are rounded to whole milliseconds, hence the margin.
                if math.floor(before / BREAK_SECONDS - 1e-3) == math.floor(after / BREAK_SECONDS + 1e-3):
                    assert first[0] == second[0], (metric, resource, first, second, before, after)
                    compared += 1
            time.sleep(0.05)
        assert compared >= 12, f"only {compared} pairs fell between two breakpoints"
    finally:
        for server in replicas:
            server.stop()
        announcer.server.shutdown()
