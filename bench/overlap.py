"""Benchmark: the timeline build when many items are active at once on one target.

    .venv/bin/python bench/overlap.py [--sizes 1000,3000,6000,20000,100000]

N items on one target, each 7 days long and starting a minute after the previous one (what one
schedule window `cron: "* * * * *"`, `duration: 168h` expands to), built with each of the two ways
adapter.timeline merges the load, side by side on the same input: one row per (item, segment it
covers), N²/2 rows here, and the segment tree the build switches to beyond
EXPANSION_LIMIT_PER_CONTRIBUTION rows per item (+ EXPANSION_LIMIT). Prints the time and the peak
memory numpy allocated (tracemalloc) of each, and checks that both give the same values (the items'
values are integers, so sums are exact in any order). The row-per-pair build is left out above
--max-rows rows (3 GiB at 2e8 rows). Goal: the tree build's time and memory grow about linearly
with N (the ratio column), so no valid manifest can make a rebuild quadratic.
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapter import timeline
from adapter.timeline import ContributionArrays, MetricPolicy

WEEK = 7 * 86400.0


def overlapping(n: int) -> ContributionArrays:
    start = 1_900_000_000.0 + 60.0 * np.arange(n)
    return ContributionArrays(np.zeros(n, np.int64), start, start + WEEK, np.ones(n))


def build(arrays: ContributionArrays, tree: bool) -> tuple[float, float, tuple[np.ndarray, ...]]:
    """(seconds, peak MiB, arrays) of one build of one key, Sum merge, leadTime 5m."""
    saved = timeline.EXPANSION_LIMIT_PER_CONTRIBUTION, timeline.EXPANSION_LIMIT
    if tree:
        timeline.EXPANSION_LIMIT_PER_CONTRIBUTION, timeline.EXPANSION_LIMIT = 0, -1
    else:
        timeline.EXPANSION_LIMIT_PER_CONTRIBUTION, timeline.EXPANSION_LIMIT = 0, 1 << 62
    try:
        tracemalloc.start()
        began = time.perf_counter()
        out = timeline._build_arrays(1, [MetricPolicy(lead_time=300.0)], np.zeros(1, np.int64), arrays)
        seconds = time.perf_counter() - began
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    finally:
        timeline.EXPANSION_LIMIT_PER_CONTRIBUTION, timeline.EXPANSION_LIMIT = saved
    return seconds, peak, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,3000,6000,20000,100000")
    parser.add_argument("--max-rows", type=float, default=2e7, help="largest row-per-pair build run")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{'items':>7} {'row per pair':>13} | {'rows: s':>8} {'MiB':>7} | {'tree: s':>8} {'MiB':>7} | same")
    ok = True
    per_item: list[tuple[int, float, float]] = []
    for n in sizes:
        arrays = overlapping(n)
        rows = n * (n + 1) // 2  # item k covers the segments of the k items started before it ends
        tree_s, tree_mib, tree_out = build(arrays, tree=True)
        per_item.append((n, tree_s / n, tree_mib / n))
        if rows <= args.max_rows:
            rows_s, rows_mib, rows_out = build(arrays, tree=False)
            same = all(np.array_equal(a, b) for a, b in zip(rows_out, tree_out))
            ok &= same
            print(f"{n:7d} {rows:13.3g} | {rows_s:8.3f} {rows_mib:7.1f} | {tree_s:8.3f} {tree_mib:7.1f} | {same}")
        else:
            print(f"{n:7d} {rows:13.3g} | {'(not run)':>16} | {tree_s:8.3f} {tree_mib:7.1f} |")
    (n0, s0, m0), (n1, s1, m1) = per_item[0], per_item[-1]
    growth = f"{n1 / n0:.0f}x the items: time per item x{s1 / s0:.2f}, memory per item x{m1 / m0:.2f}"
    linear = s1 / s0 <= 3 and m1 / m0 <= 3  # log factors and fixed costs, never a factor of N
    print(f"tree build, {growth} (goal: both <= 3, i.e. about linear)")
    print("row-per-pair and tree give the same arrays" if ok else "MISMATCH between the two builds")
    return 0 if ok and linear else 1


if __name__ == "__main__":
    sys.exit(main())
