"""Timeline benchmarks: rebuild cost at scale and query cost independent of the number of targets.

    .venv/bin/python bench/timeline.py [--targets 100000] [--items 1000000]

Prints: time and peak memory to rebuild 100 000 targets from 1 000 000 items (goal < 1 s, < 1 GB),
vectorised expression throughput, and the in-process cost of one query with 10 vs 100 000 targets
loaded (goal: ratio <= 1.2).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adapter.expressions import compile_expression
from adapter.labels import parse_selector
from adapter.timeline import ContributionArrays, MetricPolicy, build_timelines


def synthetic(n_targets: int, n_items: int, seed: int = 1) -> tuple[list, list, ContributionArrays]:
    rng = np.random.default_rng(seed)
    keys = [("rps", f"ns-{i % 100}", f"svc-{i}") for i in range(n_targets)]
    policies = [MetricPolicy(default_value=0.0, merge_strategy=("Sum", "Max")[i % 2], lead_time=300.0,
                             hold_time=30.0) for i in range(n_targets)]
    start = 1.8e9 + rng.integers(0, 86400, n_items).astype(float)
    arrays = ContributionArrays(rng.integers(0, n_targets, n_items), start,
                                start + rng.integers(60, 3600, n_items), rng.integers(0, 500, n_items).astype(float))
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
    print(f"rebuild {n_targets:,} targets from {n_items:,} items: first {elapsed:.3f} s, best of 3 "
          f"{min(runs):.3f} s on 2 threads, {min(serial):.3f} s on one (goal < 1 s); peak traced memory {peak / 2**20:.0f} MiB (goal < 1024 MiB); "
          f"result {timelines.nbytes / 2**20:.0f} MiB")


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
    print(f"expressions: vectorised {n_items:,} items in {vector * 1000:.1f} ms "
          f"({vector / n_items * 1e9:.0f} ns/item); simpleeval scalar {scalar * 1e6:.1f} us/item "
          f"(ratio {scalar / (vector / n_items):.0f}x)")


def bench_query(n_targets: int) -> float:
    from adapter.engine import Engine
    from adapter.pipeline.publish import PartitionView, Published, Target

    async def go() -> float:
        engine = Engine(start_sources=False)
        keys, policies, arrays = synthetic(n_targets, n_targets * 10)
        from adapter.resources import VirtualMetric
        metrics = {"rps": VirtualMetric(name="rps", metric_name="rps", policy=MetricPolicy(lead_time=300.0))}
        timelines = build_timelines(keys, policies, arrays)
        grouped: dict = {}
        for k, (m, ns, r) in enumerate(keys):
            grouped.setdefault((m, ns), []).append(Target(r, k, {"resource": r}))
        engine.published = Published(metrics, {p: PartitionView(timelines, tuple(t), {x.resource: x for x in t})
                                               for p, t in grouped.items()})
        selector = parse_selector(f"resource={keys[-1][2]}")
        namespace = keys[-1][1]
        # The HPA's query: its namespace, one resource. Per namespace there are n_targets/100 targets.
        samples = []
        for _ in range(7):
            t0 = time.perf_counter()
            for _ in range(2000):
                engine.query("rps", namespace, selector, 1.8e9 + 100)
            samples.append((time.perf_counter() - t0) / 2000)
        return statistics.median(samples)

    return asyncio.run(go())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--targets", type=int, default=100_000)
    parser.add_argument("--items", type=int, default=1_000_000)
    args = parser.parse_args()
    bench_rebuild(args.targets, args.items)
    bench_expressions(args.items)
    small = bench_query(10)
    large = bench_query(args.targets)
    print(f"engine.query: {small * 1e6:.1f} us with 10 targets, {large * 1e6:.1f} us with {args.targets:,} "
          f"targets (ratio {large / small:.2f}, goal <= 1.2; {args.targets // 100:,} targets per namespace)")


if __name__ == "__main__":
    main()
