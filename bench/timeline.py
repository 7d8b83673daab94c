"""Timeline benchmarks: rebuild cost at scale and query cost independent of the number of targets.

    .venv/bin/python bench/timeline.py [--targets 100000] [--items 1000000] [--runs 5] [--compare] [--full-only]

Prints: time and peak memory to rebuild 100 000 targets from 1 000 000 items (goal < 1 s, < 1 GB),
vectorised expression throughput; then, in the engine as `prescaler serve` runs it, with 100 000
targets in one namespace and 1 000 000 contributions loaded: how long after one source's new snapshot
its new values are served (goal <= 50 ms: only its targets are rebuilt), the event loop's longest
steps while a snapshot arrives every 0.3 s for --steps-seconds, a full rebuild (goal <= 0.5 s;
median of --runs; with --compare also the build before issue 12, run alternately in the same process)
and its peak memory per 100 000 targets; and the in-process cost of one query with 10 vs 100 000
targets loaded (goal: ratio <= 1.2).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import heapq
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adapter import heap
from adapter.engine import Engine
from adapter.expressions import compile_expression
from adapter.items import Item
from adapter.labels import parse_selector
from adapter.pipeline.publish import build_published
from adapter.timeline import ContributionArrays, MetricPolicy, build_timelines

T0 = 1.8e9


def synthetic(n_targets: int, n_items: int, seed: int = 1) -> tuple[list, list, ContributionArrays]:
    rng = np.random.default_rng(seed)
    keys = [("rps", f"ns-{i % 100}", f"svc-{i}") for i in range(n_targets)]
    policies = [
        MetricPolicy(default_value=0.0, merge_strategy=("Sum", "Max")[i % 2], lead_time=300.0, hold_time=30.0)
        for i in range(n_targets)
    ]
    start = 1.8e9 + rng.integers(0, 86400, n_items).astype(float)
    arrays = ContributionArrays(
        rng.integers(0, n_targets, n_items),
        start,
        start + rng.integers(60, 3600, n_items),
        rng.integers(0, 500, n_items).astype(float),
    )
    return keys, policies, arrays


def bench_rebuild(n_targets: int, n_items: int) -> None:
    keys, policies, arrays = synthetic(n_targets, n_items)
    gc.collect()
    table = sorted(set(policies), key=policies.index)
    index = np.fromiter(({p: i for i, p in enumerate(table)}[p] for p in policies), np.int64, len(policies))
    started = time.perf_counter()
    timelines = build_timelines(keys, table, arrays, policy_index=index, workers=2)
    elapsed = time.perf_counter() - started
    tracemalloc.start()  # a separate traced build: tracing slows allocation, so it is not timed
    build_timelines(keys, table, arrays, policy_index=index, workers=2)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    runs, serial = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        build_timelines(keys, table, arrays, policy_index=index, workers=2)
        runs.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        build_timelines(keys, table, arrays, policy_index=index, workers=1)
        serial.append(time.perf_counter() - t0)
    print(
        f"rebuild {n_targets:,} targets from {n_items:,} items: first {elapsed:.3f} s, best of 3 "
        f"{min(runs):.3f} s on 2 threads, {min(serial):.3f} s on one (goal < 1 s); peak traced memory {peak / 2**20:.0f} MiB (goal < 1024 MiB); "
        f"result {timelines.nbytes / 2**20:.0f} MiB"
    )


def bench_expressions(n_items: int) -> None:
    expr = compile_expression("ceil(scheduledMessage * 2 / 3) + max(a, 1)")
    columns = {"scheduledMessage": np.arange(n_items, dtype=float), "a": np.ones(n_items)}
    t0 = time.perf_counter()
    expr.evaluate_many(columns, n_items)
    vector = time.perf_counter() - t0
    sample = 20000
    t0 = time.perf_counter()
    for i in range(sample):
        expr.evaluate({"scheduledMessage": float(i), "a": 1.0})
    scalar = (time.perf_counter() - t0) / sample
    print(
        f"expressions: vectorised {n_items:,} items in {vector * 1000:.1f} ms "
        f"({vector / n_items * 1e9:.0f} ns/item); simpleeval scalar {scalar * 1e6:.1f} us/item "
        f"(ratio {scalar / (vector / n_items):.0f}x)"
    )


def event_docs(n_events: int, per_event: int, namespace: str = "bench") -> list[dict]:
    """One VirtualMetric and `n_events` VirtualMetricEvents of `per_event` targets (api sources that
    the bench feeds itself: the engine runs with start_sources=False)."""
    docs: list[dict] = [
        {
            "apiVersion": "prescaler.pingpong.ai/v1",
            "kind": "VirtualMetric",
            "metadata": {"name": "rps"},
            "spec": {"name": "rps", "defaultValue": 0, "mergeStrategy": "Sum", "leadTime": "5m"},
        }
    ]
    for e in range(n_events):
        docs.append(
            {
                "apiVersion": "prescaler.pingpong.ai/v1",
                "kind": "VirtualMetricEvent",
                "metadata": {"name": f"ev-{e}"},
                "spec": {
                    "source": {"api": {"url": f"http://127.0.0.1:9/items/{e}"}},
                    "metrics": [
                        {
                            "name": "rps",
                            "resource": {"name": f"svc-{e * per_event + i}", "namespace": namespace},
                            "value": {"expression": f"n * {1 + i % 7}"},
                        }
                        for i in range(per_event)
                    ],
                },
            }
        )
    return docs


def snapshot_items(n_items: int, base: float) -> list[Item]:
    return [Item(T0 + 600 * j, T0 + 600 * j + 900, {"n": base + j}) for j in range(n_items)]


async def loaded_engine(n_targets: int, items_per_source: int) -> Engine:
    heap.enable()  # as `prescaler serve` runs
    engine = Engine(start_sources=False)
    await engine.start()
    per_event = min(n_targets, 1000)
    docs = event_docs(max(1, n_targets // per_event), per_event)
    engine.resync("VirtualMetric", docs[:1])
    engine.resync("VirtualMetricEvent", docs[1:])
    await until_idle(engine)
    for name in list(engine.events):
        engine._on_snapshot(name, snapshot_items(items_per_source, 1.0))
    await until_idle(engine)
    return engine


async def until_idle(engine: Engine, timeout: float = 300.0, poll: float = 0.001) -> None:
    deadline = time.monotonic() + timeout
    while engine.busy:
        if time.monotonic() > deadline:
            raise SystemExit("the engine did not publish in time")
        await asyncio.sleep(poll)


SNAPSHOT_EVERY = 0.3  # seconds: about the delivering phase of bench/scale.py (3.3 snapshots/s)


async def loop_steps(engine: Engine, items_per_source: int, seconds: float) -> tuple[list[float], int, int]:
    """Feed a 1 000-target snapshot to a random source every SNAPSHOT_EVERY s and time how long a
    task that is always ready waits for its next turn: the longest steps the loop ran meanwhile, which
    is what a request arriving then would wait. Returns the five longest waits, the number over 4 ms
    and the snapshots fed."""
    longest: list[float] = []  # a min-heap of the five longest waits (there are millions of turns)
    over = 0
    stop = False

    async def ticker() -> None:
        nonlocal over
        while not stop:
            before = time.perf_counter()
            await asyncio.sleep(0)
            wait = time.perf_counter() - before
            over += wait > 0.004
            if len(longest) < 5:
                heapq.heappush(longest, wait)
            elif wait > longest[0]:
                heapq.heapreplace(longest, wait)

    probe = asyncio.get_running_loop().create_task(ticker())
    rng = np.random.default_rng(12)
    snapshots = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        name = f"ev-{int(rng.integers(len(engine.events)))}"
        engine._on_snapshot(name, snapshot_items(items_per_source, 100.0 + snapshots))
        snapshots += 1
        await asyncio.sleep(SNAPSHOT_EVERY)
    await until_idle(engine)
    stop = True
    await probe
    return sorted(longest, reverse=True), over, snapshots


def bench_partitioned(
    n_targets: int, items_per_source: int, runs: int = 5, compare: bool = False, steps_seconds: float = 20.0
) -> None:
    """One source's new snapshot -> its new values served, with everything else loaded."""

    async def go() -> None:
        engine = await loaded_engine(n_targets, items_per_source)
        contributions = n_targets * items_per_source
        latencies: list[float] = []
        whole: list[float] = []  # until every target of the snapshot is served (the last piece)
        cpu: list[float] = []  # the process's CPU time (all threads) from the snapshot to idle
        for round_ in range(40):  # 20 sources once, then the same 20 again
            name = f"ev-{round_ % min(20, len(engine.events))}"
            before = engine.published
            cpu_started = time.process_time()
            started = time.perf_counter()
            engine._on_snapshot(name, snapshot_items(items_per_source, 5.0 + round_))
            deadline = started + 10
            while engine.published is before and time.perf_counter() < deadline:
                await asyncio.sleep(0.0005)
            if round_ < 20:
                latencies.append(time.perf_counter() - started)
            await until_idle(engine, poll=0.0005)
            if round_ < 20:
                whole.append(time.perf_counter() - started)
            cpu.append(time.process_time() - cpu_started)
        longest, steps, snapshots = await loop_steps(engine, items_per_source, steps_seconds)
        feeds = engine.table.feeds()
        metrics = engine.names.served
        gc.collect()
        fulls: list[float] = []
        before: list[float] = []
        with heap.no_collection():  # as the engine builds
            for _ in range(runs):
                if compare:  # the build before issue 12, alternating with the current one
                    with previous_build() as old_build:
                        t0 = time.perf_counter()
                        old_build(metrics, feeds, T0)
                        before.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                build_published(metrics, feeds, T0)
                fulls.append(time.perf_counter() - t0)
            tracemalloc.start()
            build_published(metrics, feeds, T0)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        await engine.stop()
        heap.enable(False)
        full = statistics.median(fulls)
        print(
            f"partitioned rebuild, {n_targets:,} targets in one namespace x {items_per_source} items each "
            f"= {contributions:,} contributions loaded:"
        )
        print(
            f"  one source's new snapshot ({min(n_targets, 1000):,} targets, "
            f"{min(n_targets, 1000) * items_per_source:,} contributions) -> its first new values served: "
            f"median {statistics.median(latencies) * 1000:.1f} ms, worst {max(latencies) * 1000:.1f} ms of 20; "
            f"all of them: median {statistics.median(whole) * 1000:.1f} ms, worst {max(whole) * 1000:.1f} ms "
            f"(goal <= 50 ms); CPU per snapshot (all threads, until published): median "
            f"{statistics.median(cpu[:20]) * 1000:.1f} ms for a source's first after loading, "
            f"{statistics.median(cpu[20:]) * 1000:.1f} ms for its next (the same targets again)"
        )
        print(
            f"  {snapshots} snapshots of 1,000 targets, one every {SNAPSHOT_EVERY} s for {steps_seconds:.0f} s, "
            f"no requests: the longest waits of a ready task on the event loop (its longest steps) "
            f"{', '.join(f'{x * 1000:.1f}' for x in longest)} ms; {steps} waits over 4 ms"
        )
        print(
            f"  full rebuild of everything: median {full:.3f} s of {runs} (min {min(fulls):.3f}, max "
            f"{max(fulls):.3f}; in order {', '.join(f'{f:.3f}' for f in fulls)}; goal <= 0.5 s); peak traced memory "
            f"{peak / 2**20:.0f} MiB = {peak / 2**20 / (n_targets / 100_000):.0f} MiB per 100 000 targets"
        )
        if compare:
            print(
                f"  the same full rebuild as built before issue 12 (tests/publish_v1.py, tests/timeline_v1.py), "
                f"alternating with it: median {statistics.median(before):.3f} s (min {min(before):.3f}, "
                f"max {max(before):.3f})"
            )

    asyncio.run(go())


@contextlib.contextmanager
def previous_build() -> Iterator[Callable[..., object]]:
    """The full build as it was before issue 12: per-key publishing and the previous timeline arrays."""
    from adapter import timeline
    from tests.publish_v1 import build_published_v1
    from tests.timeline_v1 import build_arrays_v1

    current = timeline._build_arrays
    timeline._build_arrays = build_arrays_v1
    try:
        yield build_published_v1
    finally:
        timeline._build_arrays = current


def bench_query(n_targets: int) -> float:
    """In-process cost of the HPA's query (one namespace, one resource) with n_targets loaded."""

    async def go() -> float:
        engine = await loaded_engine(n_targets, 2)
        selector = parse_selector("resource=svc-0")
        samples = []
        for _ in range(7):
            t0 = time.perf_counter()
            for _ in range(2000):
                engine.query("rps", "bench", selector, T0 + 100)
            samples.append((time.perf_counter() - t0) / 2000)
        await engine.stop()
        heap.enable(False)
        return statistics.median(samples)

    return asyncio.run(go())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--targets", type=int, default=100_000)
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5, help="full rebuilds timed (median, min, max)")
    parser.add_argument(
        "--compare", action="store_true", help="also time the full rebuild as built before issue 12, alternating"
    )
    parser.add_argument("--full-only", action="store_true", help="only the partitioned and full rebuild figures")
    parser.add_argument(
        "--steps-seconds", type=float, default=20.0, help="how long snapshots arrive for the loop steps"
    )
    args = parser.parse_args()
    if not args.full_only:
        bench_rebuild(args.targets, args.items)
        bench_expressions(args.items)
    bench_partitioned(args.targets, max(1, args.items // args.targets), args.runs, args.compare, args.steps_seconds)
    if args.full_only:
        return
    small = bench_query(10)
    large = bench_query(args.targets)
    print(
        f"engine.query: {small * 1e6:.1f} us with 10 targets, {large * 1e6:.1f} us with {args.targets:,} "
        f"targets, all in one namespace (ratio {large / small:.2f}, goal <= 1.2)"
    )


if __name__ == "__main__":
    main()
