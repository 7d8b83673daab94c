"""The segmented timeline build (adapter.timeline) against the build it replaced (tests/timeline_v1.py):
the same arrays, bit for bit, on random inputs. Also its helpers against plain per-element models."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter import timeline
from adapter.timeline import STRATEGIES, ContributionArrays, MetricPolicy
from tests.timeline_v1 import build_arrays_v1

policies = st.builds(
    MetricPolicy,
    default_value=st.sampled_from([0.0, 3.0, -2.0]),
    merge_strategy=st.sampled_from(STRATEGIES),
    lead_time=st.sampled_from([0.0, 0.001, 1.0, 7.0, 30.0, 600.0]),
    hold_time=st.sampled_from([0.0, 5.0]),
    min=st.sampled_from([None, 0.0, 10.0]),
    max=st.sampled_from([None, 150.0]),
)
values = st.one_of(
    st.integers(-50, 200).map(float),
    st.floats(-1e3, 1e3),
    st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e308, -1e308]),
)
contribution = st.tuples(st.integers(0, 7), st.integers(0, 200), st.integers(-3, 60), values)


def _arrays(rows: list[tuple[int, int, int, float]], n_keys: int, order: str) -> ContributionArrays:
    rows = [(k % n_keys, s, s + length, v) for k, s, length, v in rows] if n_keys else []
    if order == "sorted":  # grouped by key, in time order: the usual shape (the stable-sort path)
        rows.sort(key=lambda r: (r[0], r[1], r[2]))
    elif order == "reversed":
        rows.sort(key=lambda r: (r[0], r[1]), reverse=True)
    return ContributionArrays(
        np.array([r[0] for r in rows], dtype=np.int64),
        np.array([r[1] for r in rows], dtype=float),
        np.array([r[2] for r in rows], dtype=float),
        np.array([r[3] for r in rows], dtype=float),
    )


def _assert_same(n_keys: int, table: list[MetricPolicy], which: np.ndarray, arrays: ContributionArrays) -> None:
    new = timeline._build_arrays(n_keys, table, which, arrays)
    old = build_arrays_v1(n_keys, table, which, arrays)
    for got, want in zip(new, old):
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype


@settings(max_examples=400, deadline=None)
@given(
    st.integers(0, 6),
    st.lists(policies, min_size=1, max_size=3),
    st.lists(contribution, max_size=40),
    st.sampled_from(["sorted", "reversed", "as drawn"]),
    st.randoms(use_true_random=False),
)
def test_segmented_build_equals_v1(n_keys, table, rows, order, rnd) -> None:
    which = np.array([rnd.randrange(len(table)) for _ in range(n_keys)], dtype=np.int64)
    _assert_same(n_keys, table, which, _arrays(rows, n_keys, order))


def test_segmented_build_equals_v1_at_scale() -> None:
    # Enough contributions for both sort paths to see long runs and real shuffles, long leadTimes
    # (deep sparse tables) and every strategy side by side.
    rng = np.random.default_rng(12)
    n_keys, n = 400, 60_000
    table = [
        MetricPolicy(default_value=1.0, merge_strategy=s, lead_time=lead, hold_time=hold)
        for s in STRATEGIES
        for lead, hold in ((0.0, 0.0), (300.0, 30.0), (86400.0, 0.0))
    ]
    which = rng.integers(0, len(table), n_keys)
    start = rng.integers(0, 200_000, n).astype(float) + rng.random(n).round(3)
    key = rng.integers(0, n_keys, n)
    shuffled = ContributionArrays(key, start, start + rng.integers(1, 5000, n), rng.normal(50, 30, n).round(2))
    _assert_same(n_keys, table, which, shuffled)
    order = np.lexsort((shuffled.start, shuffled.key))
    grouped = ContributionArrays(*(getattr(shuffled, f)[order] for f in ("key", "start", "end", "value")))
    _assert_same(n_keys, table, which, grouped)


int_values = st.one_of(st.integers(-50, 200).map(float), st.sampled_from([float("nan"), float("inf")]))
int_contribution = st.tuples(st.integers(0, 7), st.integers(0, 200), st.integers(-3, 60), int_values)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 6),
    st.lists(policies, min_size=1, max_size=3),
    st.lists(int_contribution, max_size=40),
    st.sampled_from(["sorted", "reversed", "as drawn"]),
    st.randoms(use_true_random=False),
)
def test_segment_tree_path_equals_v1(n_keys, table, rows, order, rnd) -> None:
    # The path for heavy overlap, forced on every build: with integer values sums are exact in any
    # order, so it must give v1's arrays bit for bit (max, min, counts and averages included).
    which = np.array([rnd.randrange(len(table)) for _ in range(n_keys)], dtype=np.int64)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(timeline, "EXPANSION_LIMIT_PER_CONTRIBUTION", 0)
        patch.setattr(timeline, "EXPANSION_LIMIT", -1)
        _assert_same(n_keys, table, which, _arrays(rows, n_keys, order))


def test_segment_tree_path_with_float_values_is_close_to_v1(monkeypatch) -> None:
    rng = np.random.default_rng(4)
    n_keys, n = 50, 5000
    table = [MetricPolicy(merge_strategy=s, lead_time=60.0) for s in STRATEGIES]
    which = rng.integers(0, len(table), n_keys)
    start = rng.integers(0, 20_000, n).astype(float)
    arrays = ContributionArrays(
        rng.integers(0, n_keys, n), start, start + rng.integers(1, 9000, n), rng.normal(50, 30, n)
    )
    want = timeline._build_arrays(n_keys, table, which, arrays)
    monkeypatch.setattr(timeline, "EXPANSION_LIMIT_PER_CONTRIBUTION", 0)
    monkeypatch.setattr(timeline, "EXPANSION_LIMIT", -1)
    got = timeline._build_arrays(n_keys, table, which, arrays)
    for g, w in zip(got[:3], want[:3]):
        np.testing.assert_array_equal(g, w)  # pre values, offsets and breakpoints: exact
    np.testing.assert_allclose(got[3], want[3], rtol=1e-12, atol=1e-9)


def test_many_overlapping_items_build_without_one_row_per_pair(monkeypatch) -> None:
    # 20 000 items all active at once on one target (e.g. a cron window longer than its period): one
    # row per (item, segment) would be 2e8 rows (3 GiB). Rows made by _expand_ranges are counted.
    made = []
    real = timeline._expand_ranges
    monkeypatch.setattr(timeline, "_expand_ranges", lambda a, b, v: made.append(int((b - a).sum())) or real(a, b, v))
    n = 20_000
    start = np.arange(n, dtype=float) * 60
    arrays = ContributionArrays(np.zeros(n, np.int64), start, start + 7 * 86400, np.ones(n))
    for strategy in STRATEGIES:
        pre, offsets, breaks_ms, values = timeline._build_arrays(
            1, [MetricPolicy(merge_strategy=strategy)], np.zeros(1, np.int64), arrays
        )
        assert sum(made) <= timeline.EXPANSION_LIMIT  # only the lookahead's small expansions, if any
        at = {"Sum": 10_080.0, "Max": 1.0, "Min": 1.0, "Average": 1.0}[strategy]  # a week of minutes active
        middle = np.searchsorted(breaks_ms, (7 * 86400 + 1) * 1000, side="right") - 1
        assert values[middle] == at
        assert values[0] == 1.0 and values[-1] == 0.0  # one item active at the first edge; none after the last


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-5, 5), min_size=1, max_size=60), st.data())
def test_range_max_matches_slices(f: list[int], data) -> None:
    arr = np.array(f, dtype=float)
    pairs = data.draw(st.lists(st.tuples(st.integers(0, len(f) - 1), st.integers(0, len(f) - 1)), max_size=30))
    lo = np.array([min(a, b) for a, b in pairs], dtype=np.int64)
    hi = np.array([max(a, b) for a, b in pairs], dtype=np.int64)
    want = [arr[a : b + 1].max() for a, b in zip(lo, hi)]
    np.testing.assert_array_equal(timeline._range_max(arr, lo, hi), np.array(want, dtype=float))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 30), max_size=80), st.lists(st.floats(-1e6, 1e6), min_size=80, max_size=80))
def test_group_extrema_match_per_segment(seg: list[int], vals: list[float]) -> None:
    ids = np.array(seg, dtype=np.int64)
    val = np.array(vals[: len(seg)], dtype=float)
    seg_max, seg_min = timeline._group_extrema(ids, val, 31)
    for s in range(31):
        mine = val[ids == s]
        assert seg_max[s] == (mine.max() if len(mine) else -np.inf)
        assert seg_min[s] == (mine.min() if len(mine) else np.inf)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 100)), min_size=1, max_size=40, unique=True), st.data())
def test_lookahead_windows_match_binary_searches(points, data) -> None:
    breaks = np.array(sorted((k << timeline._TIME_BITS) | (t + 1000) for k, t in points), dtype=np.int64)
    leads = {k: data.draw(st.integers(0, 50)) for k, _ in points}
    lead = np.array([leads[int(b >> timeline._TIME_BITS)] for b in breaks], dtype=np.int64)
    cand, lo, hi = timeline._lookahead_windows(breaks, lead)
    want = np.unique(np.concatenate([breaks, breaks - lead]))
    np.testing.assert_array_equal(cand, want)
    cand_lead = np.array([leads[int(c >> timeline._TIME_BITS)] for c in cand], dtype=np.int64)
    np.testing.assert_array_equal(lo, np.searchsorted(breaks, cand, side="right") - 1)
    np.testing.assert_array_equal(hi, np.searchsorted(breaks, cand + cand_lead, side="right") - 1)


@pytest.mark.parametrize("grouped", [True, False])
def test_parallel_split_equals_serial(monkeypatch, grouped: bool) -> None:
    # Contributions grouped by key are split into slices, others by mask: both as one serial build.
    monkeypatch.setattr(timeline, "PARALLEL_MIN_KEYS", 1)
    monkeypatch.setattr(timeline, "PARALLEL_MIN_CONTRIBUTIONS", 1)
    rng = np.random.default_rng(5)
    n_keys, n = 257, 4000
    key = rng.integers(0, n_keys - 7, n)  # the last keys have no contributions
    start = rng.integers(0, 5000, n).astype(float)
    arrays = ContributionArrays(key, start, start + rng.integers(1, 300, n), rng.normal(50, 20, n))
    if grouped:
        order = np.lexsort((arrays.start, arrays.key))
        arrays = ContributionArrays(*(getattr(arrays, f)[order] for f in ("key", "start", "end", "value")))
    keys = [("m", "ns", str(i)) for i in range(n_keys)]
    table = [MetricPolicy(lead_time=30, merge_strategy="Max", default_value=1), MetricPolicy(hold_time=5)]
    index = rng.integers(0, 2, n_keys)
    for workers in (2, 3):
        serial = timeline.build_timelines(keys, table, arrays, policy_index=index, workers=1)
        parallel = timeline.build_timelines(keys, table, arrays, policy_index=index, workers=workers)
        for a, b in zip(
            (serial._pre, serial._offsets, serial._break_ms, serial._values),
            (parallel._pre, parallel._offsets, parallel._break_ms, parallel._values),
        ):
            np.testing.assert_array_equal(a, b)
