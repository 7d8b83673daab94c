"""The demo announcer behind `make run`: the seed's JSON, batches announced ahead, stable ids."""

from __future__ import annotations

import json
import threading
import urllib.request
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from adapter.demo.announcer import DEFAULT_DURATION, DEFAULT_PERIOD, batches, make_handler
from adapter.durations import parse_duration
from adapter.items import parse_item
from tests.helpers import client, fetch_all, loaded_engine, run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "local"

NOW = 1_800_000_000.0  # a multiple of 300


def test_batches_cover_the_horizon_with_stable_ids() -> None:
    items = batches(NOW, period=300, duration=120, offset=60, horizon=1800, history=600)
    starts = [i["start"] for i in items]
    assert starts == list(range(int(NOW) - 540, int(NOW) + 1800, 300))
    assert all(i["end"] - i["start"] == 120 for i in items)
    assert all(parse_item(i).values["scheduledMessage"] in (20, 35, 50, 65) for i in items)
    # Re-announcing later keeps the ids of batches already announced (no double counting).
    later = {i["id"]: i for i in batches(NOW + 60, period=300, duration=120)}
    assert all(later[i["id"]] == i for i in items if i["id"] in later)


def test_http_endpoint_serves_the_seed_format() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(clock=lambda: NOW))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/service-a/metrics", timeout=5) as r:
            body = json.load(r)
        assert body["items"] == batches(NOW)
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=5)
        except urllib.error.HTTPError as exc:
            assert exc.code == 404
        else:
            raise AssertionError("non-metrics path answered")
    finally:
        server.shutdown()
        server.server_close()


# ------------------------------------------------------------------ the demo as `make run` shows it

SUNDAY_0300_UTC = 1_795_921_200  # 2026-11-29T03:00:00Z: outside the weekday evening campaign


def _demo_docs(announcer_port: int) -> list[dict[str, Any]]:
    docs = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            api = doc["spec"].get("source", {}).get("api")
            if api:
                api["url"] = api["url"].replace("127.0.0.1:8099", f"127.0.0.1:{announcer_port}")
            docs.append(doc)
    return docs


def test_make_run_demo_rises_lead_time_before_each_batch_and_falls_between() -> None:
    """examples/local + the announcer's defaults, through the real pipeline and HTTP API."""
    clock = {"now": float(SUNDAY_0300_UTC)}
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(clock=lambda: clock["now"]))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    docs = _demo_docs(server.server_address[1])
    spec = next(d for d in docs if d["kind"] == "VirtualMetric")["spec"]
    lead, hold = parse_duration(spec["leadTime"]), parse_duration(spec["holdTime"])

    async def value_at(engine: Any, namespace: str, t: float) -> float:
        clock["now"] = engine.test_clock["now"] = t
        await fetch_all(engine)  # the announcer re-announces as of t (and the source stays fresh)
        async with client(engine) as c:
            response = await c.get(
                f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/rps",
                params={"labelSelector": f"resource={namespace}"},
            )
        assert response.status_code == 200, response.text
        return float(response.json()["items"][0]["value"].rstrip("m")) / (
            1000 if response.json()["items"][0]["value"].endswith("m") else 1
        )

    async def scenario() -> list[str]:
        engine = await loaded_engine(docs, now=clock["now"])
        problems = []
        try:
            # Batches starting 03:06, 03:11, 03:16, 03:21 (the half-hourly burst is at :00 and :30).
            for batch in batches(SUNDAY_0300_UTC):
                if not SUNDAY_0300_UTC + 300 <= batch["start"] <= SUNDAY_0300_UTC + 1300:
                    continue
                start, end = batch["start"], batch["end"]
                expected = {
                    "service-a": 2 * batch["values"]["scheduledMessage"],
                    "service-b": batch["values"]["scheduledMessage"],
                }
                for namespace, high in expected.items():
                    checks = {
                        "before the rise": (start - lead - 10, 0.0),
                        "leadTime before the batch": (start - lead + 10, high),
                        "during the batch": (start + 10, high),
                        "between batches": (end + hold + 10, 0.0),
                    }
                    for what, (t, want) in checks.items():
                        got = await value_at(engine, namespace, t)
                        if got != want:
                            problems.append(f"{namespace} batch@{start} {what} (t={t}): {got} != {want}")
        finally:
            await engine.stop()
        return problems

    try:
        problems = run(scenario())
    finally:
        server.shutdown()
        server.server_close()
    assert not problems, "\n".join(problems)
    # And the fall-back is visible for a while, not an instant.
    assert DEFAULT_PERIOD - DEFAULT_DURATION - lead - hold >= 60
