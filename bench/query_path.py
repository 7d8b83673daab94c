"""In-process cost of the value endpoint (PrescalerApp.__call__), without TLS, sockets or wrk.

    .venv/bin/python bench/query_path.py

Prints microseconds per request for the HPA's repeated query (answered from the response cache)
and for distinct queries (computed). Much less noisy than bench/serve.py on a shared machine, so it
is the one to compare two checkouts with, side by side:

    git archive main | tar -x -C /tmp/main
    for i in 1 2 3; do PYTHONPATH=/tmp/main .venv/bin/python /tmp/main/bench/query_path.py; \
                       .venv/bin/python bench/query_path.py; done
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adapter.api.app import PrescalerApp  # noqa: E402
from tests.helpers import NOW, entry, loaded_engine, metric, schedule_event  # noqa: E402

REQUESTS = 20_000
ROUNDS = 5


async def main() -> None:
    docs = [metric("rps", leadTime="5m")] + [
        schedule_event(
            f"e{i}", [{"start": NOW, "end": NOW + 3600, "values": {"n": i}}], [entry("ns-0", f"svc-{i}", "n")]
        )
        for i in range(10)
    ]
    engine = await loaded_engine(docs)
    app = PrescalerApp(engine)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request"}

    async def send(message: Any) -> None:
        pass

    def scope(query: bytes) -> dict[str, Any]:
        return {
            "type": "http",
            "path": "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns-0/rps",
            "method": "GET",
            "query_string": query,
            "headers": [],
        }

    repeated = scope(b"labelSelector=resource%3Dsvc-0")
    cases = {
        "repeated query (response cache)": [repeated] * REQUESTS,
        "distinct queries (computed)": [
            scope(f"labelSelector=resource%3Dsvc-{i % 10}&n={i}".encode()) for i in range(REQUESTS)
        ],
    }
    for label, scopes in cases.items():
        best = float("inf")
        for _ in range(ROUNDS):
            started = time.perf_counter()
            for one in scopes:
                await app(one, receive, send)
            best = min(best, (time.perf_counter() - started) / len(scopes))
        print(f"{label}: {best * 1e6:.2f} us/request (best of {ROUNDS} x {len(scopes)})")
    await engine.stop()


if __name__ == "__main__":
    asyncio.run(main())
