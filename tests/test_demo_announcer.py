"""The demo announcer behind `make run`: the seed's JSON, batches announced ahead, stable ids."""

from __future__ import annotations

import json
import threading
import urllib.request
from http.server import ThreadingHTTPServer

from adapter.demo.announcer import batches, make_handler
from adapter.items import parse_item

NOW = 1_800_000_000.0  # a multiple of 300


def test_batches_cover_the_horizon_with_stable_ids() -> None:
    items = batches(NOW, period=300, duration=120, offset=60, horizon=1800, history=600)
    starts = [i["start"] for i in items]
    assert starts == list(range(int(NOW) - 540, int(NOW) + 1800, 300))
    assert all(i["end"] - i["start"] == 120 for i in items)
    assert all(parse_item(i).values["scheduledMessage"] in (20, 35, 50, 65) for i in items)
    # Re-announcing later keeps the ids of batches already announced (no double counting).
    later = {i["id"]: i for i in batches(NOW + 60)}
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
