"""The timeline build as it was before the segmented rewrite (issue 12), kept verbatim as a reference.

Tests check that `adapter.timeline` builds exactly the same arrays; `bench/timeline.py --compare`
times both back to back. Not used by the server.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from adapter.timeline import _SHIFT, _TIME_BITS, _TIME_MASK, STRATEGIES, ContributionArrays, MetricPolicy, to_ms


def build_arrays_v1(
    n_keys: int, table: Sequence[MetricPolicy], which: np.ndarray, contributions: ContributionArrays
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(pre values, offsets, breakpoints in unix ms, values) for keys 0..n_keys-1."""
    default = np.array([p.default_value for p in table], dtype=float)[which]
    lead_ms = to_ms([p.lead_time for p in table])[which] if n_keys else np.empty(0, np.int64)
    hold_ms = to_ms([p.hold_time for p in table])[which] if n_keys else np.empty(0, np.int64)
    lo_clamp = np.array([-math.inf if p.min is None else p.min for p in table], dtype=float)[which]
    hi_clamp = np.array([math.inf if p.max is None else p.max for p in table], dtype=float)[which]
    strategy = np.array([STRATEGIES.index(p.merge_strategy) for p in table], dtype=np.int8)[which]

    kidx = np.asarray(contributions.key, dtype=np.int64)
    start = to_ms(contributions.start) + _SHIFT
    end = to_ms(contributions.end) + _SHIFT
    value = np.asarray(contributions.value, dtype=float)
    if len(kidx):
        end = end + hold_ms[kidx]
        keep = np.isfinite(value) & (end > start)
        if not keep.all():
            kidx, start, end, value = kidx[keep], start[keep], end[keep], value[keep]

    # --- F: merged load per segment --------------------------------------------------------------
    key_shift = kidx << _TIME_BITS
    s_comb, e_comb = key_shift | start, key_shift | end
    breaks, rank = _unique_with_rank(np.concatenate([s_comb, e_comb]))  # segment j = [breaks[j], breaks[j+1])
    i_s, i_e = rank[: len(s_comb)], rank[len(s_comb) :]
    seg, seg_val = _expand_ranges(i_s, i_e, value)
    n_b = len(breaks)
    count = np.bincount(seg, minlength=n_b)
    total = np.bincount(seg, weights=seg_val, minlength=n_b)
    break_key = breaks >> _TIME_BITS
    seg_strategy = strategy[break_key] if n_b else np.empty(0, np.int8)
    f = np.where(count > 0, total, default[break_key] if n_b else 0.0)
    active = count > 0
    avg_mask = active & (seg_strategy == 3)
    f[avg_mask] = total[avg_mask] / count[avg_mask]
    if np.any(seg_strategy == 1) or np.any(seg_strategy == 2):
        seg_max, seg_min = _group_extrema(seg, seg_val, n_b)
        f = np.where(active & (seg_strategy == 1), seg_max, f)
        f = np.where(active & (seg_strategy == 2), seg_min, f)

    # --- V: lookahead peak over [t, t + leadTime] -------------------------------------------------
    per_key = np.bincount(break_key, minlength=n_keys) if n_b else np.zeros(n_keys, np.int64)
    first = np.concatenate([[0], np.cumsum(per_key)])[:-1]  # index of each key's first breakpoint
    lead_of_break = lead_ms[break_key] if n_b else np.empty(0, np.int64)
    if n_b and np.any(lead_of_break > 0):
        cand = _sorted_unique(np.concatenate([breaks, breaks - lead_of_break]))
        cand_key = cand >> _TIME_BITS
        lo = np.searchsorted(breaks, cand, side="right") - 1
        hi = np.searchsorted(breaks, cand + lead_ms[cand_key], side="right") - 1
        before_first = lo < first[cand_key]  # window starts before the key's first edge: default is in it
        lo = np.where(before_first, first[cand_key], lo)
        v = _range_max(f, lo, hi)
        v = np.where(before_first, np.maximum(v, default[cand_key]), v)
        v_breaks, v_key = cand, cand_key
    else:
        v, v_breaks, v_key = f, breaks, break_key
    v = np.clip(v, lo_clamp[v_key], hi_clamp[v_key]) if len(v) else v
    pre = np.clip(default, lo_clamp, hi_clamp)

    counts = np.bincount(v_key, minlength=n_keys) if len(v_key) else np.zeros(n_keys, np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    plain_ms = (v_breaks & _TIME_MASK) - _SHIFT
    return pre, offsets, plain_ms.astype(np.int64), v.astype(float)


def _unique_with_rank(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique values and, for each input, its index among them (one argsort, no searches:
    binary searches with unsorted needles thrash the cache at a million points)."""
    order = np.argsort(values)  # equal values get equal ranks, so stability is not needed
    ordered = values[order]
    keep = np.ones(len(ordered), dtype=bool)
    if len(ordered) > 1:
        np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    rank = np.empty(len(values), dtype=np.int64)
    rank[order] = np.cumsum(keep) - 1
    return ordered[keep], rank


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    # np.unique in numpy 2 hashes before sorting, which is several times slower for int64 here. The
    # input is two sorted runs, which the stable sort (timsort) merges in linear time.
    ordered = np.sort(values, kind="stable")
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def _expand_ranges(i_s: np.ndarray, i_e: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Segment indices i_s[c] .. i_e[c]-1 for every contribution c, with its value repeated."""
    lengths = i_e - i_s
    total = int(lengths.sum()) if len(lengths) else 0
    if total == 0:
        return np.empty(0, np.int64), np.empty(0)
    starts = np.repeat(i_s - (np.cumsum(lengths) - lengths), lengths)
    seg = starts + np.arange(total, dtype=np.int64)
    return seg, np.repeat(value, lengths)


def _group_extrema(seg: np.ndarray, val: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    # ufunc.at is unbuffered and, since numpy 2, much faster than sorting the segment ids.
    seg_max = np.full(n, -np.inf)
    seg_min = np.full(n, np.inf)
    np.maximum.at(seg_max, seg, val)
    np.minimum.at(seg_min, seg, val)
    return seg_max, seg_min


def _range_max(f: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """max(f[lo[i]:hi[i]+1]) for each i (lo <= hi). Expands short ranges; sparse table for long ones."""
    lengths = hi - lo + 1
    total = int(lengths.sum())
    if total <= 8 * len(lo) + 1_000_000:
        idx, _ = _expand_ranges(lo, hi + 1, np.zeros(len(lo)))
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        return np.maximum.reduceat(f[idx], starts)
    table = [f]
    span = 1
    while span * 2 <= int(lengths.max()):
        prev = table[-1]
        table.append(np.maximum(prev[:-span], prev[span:]))
        span *= 2
    level = np.floor(np.log2(lengths)).astype(np.int64)
    out = np.empty(len(lo))
    for lv in np.unique(level):
        sel = level == lv
        width = 1 << int(lv)
        out[sel] = np.maximum(table[lv][lo[sel]], table[lv][hi[sel] - width + 1])
    return out
