"""Timelines: contributions merged per (metric, target) into the served value V(t).

For one key (metric m, target r):
  F(s) = mergeStrategy over contributions active at s (active on [start, end + holdTime)),
         defaultValue when none is active;
  V(t) = clamp(max over s in [t, t + leadTime] of F(s), min, max).

F is piecewise constant with right-open segments, so V is too; its breakpoints are the contribution
edges b and b - leadTime. We precompute V's breakpoints and values for every key in one vectorised
pass, so a query is a dictionary lookup plus a binary search: nothing is rebuilt per GET, and time
passing needs no rebuild either.

Layout: all keys share flat numpy arrays (CSR style, key k owns [offsets[k], offsets[k+1])). Internally
times are int64 milliseconds shifted by _SHIFT so that `time - leadTime` stays positive, and each
breakpoint is combined with its key index into one sortable int64 (`key << 43 | ms`), which lets one
sort of the edges and one merge for the lookahead windows serve all keys at once (segmented: no
Python loop or numpy call per key). tests/timeline_v1.py keeps the previous build, which tests
compare with this one bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from adapter.policy import MetricPolicy  # re-exported: the timeline's input type

_TIME_BITS = 43  # 2**43 ms ~ year 2248, beyond adapter.items.MAX_TIMESTAMP plus the shift
_TIME_MASK = (1 << _TIME_BITS) - 1
_MAX_SPAN_MS = 8 * 86400 * 1000  # leadTime/holdTime are capped at 7 days by validation
_SHIFT = _MAX_SPAN_MS
_MAX_KEYS = 1 << (62 - _TIME_BITS)

STRATEGIES = ("Sum", "Max", "Min", "Average")
# Below these sizes a build takes milliseconds and threads would only add overhead.
PARALLEL_MIN_KEYS = 10_000
PARALLEL_MIN_CONTRIBUTIONS = 200_000
# F is computed from one row per (contribution, segment it covers) while there are at most this many
# rows per contribution plus EXPANSION_LIMIT (the usual case: items rarely overlap); beyond that, from
# a segment tree (_covered_by_tree), whose cost does not grow with the overlap.
EXPANSION_LIMIT_PER_CONTRIBUTION = 8
EXPANSION_LIMIT = 2_000_000


@dataclass(frozen=True)
class Contribution:
    """One (metric entry, item) pair: `value` on [start, end); holdTime is applied by the timeline."""

    start: float
    end: float
    value: float


@dataclass
class ContributionArrays:
    """Columnar contributions for a bulk build: key index, start, end (seconds), value."""

    key: np.ndarray
    start: np.ndarray
    end: np.ndarray
    value: np.ndarray

    @staticmethod
    def empty() -> ContributionArrays:
        return ContributionArrays(np.empty(0, np.int64), np.empty(0), np.empty(0), np.empty(0))

    @staticmethod
    def concat(parts: Sequence[ContributionArrays]) -> ContributionArrays:
        if not parts:
            return ContributionArrays.empty()
        return ContributionArrays(
            *(np.concatenate([getattr(p, f) for p in parts]) for f in ("key", "start", "end", "value"))
        )


def to_ms(seconds: np.ndarray | Sequence[float] | float) -> np.ndarray:
    return np.rint(np.asarray(seconds, dtype=float) * 1000.0).astype(np.int64)


class TimelineSet:
    """V(t) for many keys, precomputed. Immutable once built; safe to share across threads."""

    def __init__(
        self,
        keys: list[Hashable],
        pre_values: np.ndarray,
        offsets: np.ndarray,
        break_ms: np.ndarray,
        values: np.ndarray,
        index: Mapping[Any, int] | None = None,
    ):
        self.keys = keys
        self.index = index if index is not None else dict(zip(keys, range(len(keys))))  # key -> position
        self._pre = pre_values  # V before the key's first breakpoint (clamped default)
        self._offsets = offsets
        self._break_ms = break_ms  # plain unix ms (unshifted)
        self._values = values
        self._pre_list = pre_values.tolist()
        self._offsets_list = offsets.tolist()

    def __len__(self) -> int:
        return len(self.keys)

    def __contains__(self, key: Hashable) -> bool:
        return key in self.index

    def value_at(self, key: Hashable, t: float) -> float | None:
        """V(t) for one key, or None when the key is unknown. O(log n) with no allocation of note."""
        k = self.index.get(key)
        if k is None:
            return None
        lo, hi = self._offsets_list[k], self._offsets_list[k + 1]
        if lo == hi:
            return self._pre_list[k]
        i = int(np.searchsorted(self._break_ms[lo:hi], int(round(t * 1000.0)), side="right"))
        return self._pre_list[k] if i == 0 else float(self._values[lo + i - 1])

    def value_and_next_change(self, key: Hashable, t: float) -> tuple[float, float] | None:
        """V(t) and the first time after t at which V may change (inf when it never does)."""
        k = self.index.get(key)
        if k is None:
            return None
        lo, hi = self._offsets_list[k], self._offsets_list[k + 1]
        if lo == hi:
            return self._pre_list[k], math.inf
        i = int(np.searchsorted(self._break_ms[lo:hi], int(round(t * 1000.0)), side="right"))
        value = self._pre_list[k] if i == 0 else float(self._values[lo + i - 1])
        # Queries round t to whole ms, so the value changes from (break - 0.5 ms) on.
        return value, (float(self._break_ms[lo + i]) / 1000.0 - 0.0005 if lo + i < hi else math.inf)

    def values_at(self, key: Hashable, times: np.ndarray) -> np.ndarray:
        k = self.index[key]
        lo, hi = self._offsets_list[k], self._offsets_list[k + 1]
        idx = np.searchsorted(self._break_ms[lo:hi], to_ms(times), side="right")
        out = np.full(len(idx), self._pre_list[k], dtype=float)
        inside = idx > 0
        out[inside] = self._values[lo + idx[inside] - 1]
        return out

    def breakpoints(self, key: Hashable) -> np.ndarray:
        """Times (seconds) at which V changes for this key (for previews and plots)."""
        k = self.index[key]
        return self._break_ms[self._offsets_list[k] : self._offsets_list[k + 1]] / 1000.0

    @property
    def nbytes(self) -> int:
        return int(self._pre.nbytes + self._offsets.nbytes + self._break_ms.nbytes + self._values.nbytes)


class Timeline:
    """A single key's V(t); convenience wrapper used by the simulator and previews."""

    def __init__(self, timelines: TimelineSet):
        self._set = timelines

    def value_at(self, t: float) -> float:
        value = self._set.value_at(0, t)
        assert value is not None
        return value

    def values_at(self, times: np.ndarray) -> np.ndarray:
        return self._set.values_at(0, np.asarray(times, dtype=float))

    def breakpoints(self) -> np.ndarray:
        return self._set.breakpoints(0)


def build_timeline(policy: MetricPolicy, contributions: Iterable[Contribution]) -> Timeline:
    items = list(contributions)
    arrays = ContributionArrays(
        key=np.zeros(len(items), dtype=np.int64),
        start=np.array([c.start for c in items], dtype=float),
        end=np.array([c.end for c in items], dtype=float),
        value=np.array([c.value for c in items], dtype=float),
    )
    return Timeline(build_timelines([0], [policy], arrays))


def build_timelines(
    keys: Sequence[Hashable],
    policies: Sequence[MetricPolicy],
    contributions: ContributionArrays,
    policy_index: np.ndarray | None = None,
    workers: int = 1,
    index: Mapping[Any, int] | None = None,
) -> TimelineSet:
    """Build V for every key at once; `contributions.key` indexes `keys`.

    Policies: either one per key (`policies[k]` for `keys[k]`), or, with `policy_index`, a small
    table that `policy_index[k]` points into (the engine has one policy per metric, so it avoids
    hashing 100 000 equal policies). With `workers > 1` large builds are split by key range and run
    in threads: the numpy work releases the GIL, so two cores build twice as fast. `index`, when
    given, is `{key: position in keys}` and becomes the set's own (the caller made it anyway).

    Contributions with a non-finite value or an empty window are ignored (the engine reports them
    before they get here).
    """
    n_keys = len(keys)
    if n_keys >= _MAX_KEYS:
        raise ValueError(f"too many timeline keys ({n_keys})")
    if policy_index is None:
        distinct: dict[MetricPolicy, int] = {}
        which = np.fromiter((distinct.setdefault(p, len(distinct)) for p in policies), np.int64, n_keys)
        table: Sequence[MetricPolicy] = list(distinct)
    else:
        which, table = np.asarray(policy_index, dtype=np.int64), policies
    big = n_keys >= PARALLEL_MIN_KEYS and len(contributions.key) >= PARALLEL_MIN_CONTRIBUTIONS
    chunks = workers if workers > 1 and big else 1
    if chunks == 1:
        parts = [_build_arrays(n_keys, table, which, contributions)]
    else:
        from concurrent.futures import ThreadPoolExecutor

        bounds = np.linspace(0, n_keys, chunks + 1).astype(np.int64)
        key = np.asarray(contributions.key, dtype=np.int64)
        columns = (contributions.start, contributions.end, contributions.value)
        ordered = bool(np.all(key[1:] >= key[:-1]))  # usually: contributions come grouped by key
        cuts = np.searchsorted(key, bounds) if ordered else bounds
        jobs = []
        for lo, hi, a, b in zip(bounds[:-1], bounds[1:], cuts[:-1], cuts[1:]):
            if ordered:  # slices: views, no copies
                part = ContributionArrays(key[a:b] - lo, *(c[a:b] for c in columns))
            else:
                sel = np.flatnonzero((key >= lo) & (key < hi))
                part = ContributionArrays(key[sel] - lo, *(c[sel] for c in columns))
            jobs.append((int(hi - lo), which[lo:hi], part))
        with ThreadPoolExecutor(max_workers=chunks) as pool:
            parts = list(pool.map(lambda job: _build_arrays(job[0], table, job[1], job[2]), jobs))
    pre = np.concatenate([p[0] for p in parts])
    shifts = np.cumsum([0] + [len(p[2]) for p in parts[:-1]])
    offsets = np.concatenate([[0]] + [p[1][1:] + shift for p, shift in zip(parts, shifts)]).astype(np.int64)
    return TimelineSet(
        list(keys),
        pre,
        offsets,
        np.concatenate([p[2] for p in parts]),
        np.concatenate([p[3] for p in parts]),
        index,
    )


def _build_arrays(
    n_keys: int, table: Sequence[MetricPolicy], which: np.ndarray, contributions: ContributionArrays
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(pre values, offsets, breakpoints in unix ms, values) for keys 0..n_keys-1.

    Written for memory as much as for speed: at 100 000 keys each temporary is megabytes, and
    fresh memory costs a page fault per 4 KiB. So each step is a function whose temporaries are
    freed when it returns, arrays are updated in place where the arithmetic is the same, and
    what a step no longer needs is dropped (`del`) before the next one allocates."""
    policy = _PolicyColumns(table, which)
    breaks, break_key, f = _merged_load(policy, contributions)
    # --- V: lookahead peak over [t, t + leadTime] -------------------------------------------------
    if len(breaks) and policy.lead_ms.any_positive(break_key):
        per_key = np.bincount(break_key, minlength=n_keys)
        first = np.cumsum(per_key)
        first -= per_key  # index of each key's first breakpoint
        del per_key
        lead = policy.lead_ms.at(break_key)
        del break_key
        v, v_breaks, v_key = _lookahead_peak(policy, breaks, lead, f, first)
        del breaks, f, first, lead
    else:
        v, v_breaks, v_key = f, breaks, break_key
    if len(v) and policy.clamps:
        v = np.clip(v, policy.lo_clamp.at(v_key), policy.hi_clamp.at(v_key))
    pre = np.clip(policy.default.per_key, policy.lo_clamp.per_key, policy.hi_clamp.per_key)

    counts = np.bincount(v_key, minlength=n_keys) if len(v_key) else np.zeros(n_keys, np.int64)
    del v_key
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64, copy=False)
    plain_ms = v_breaks  # made by this build alone: changed in place
    plain_ms &= _TIME_MASK
    plain_ms -= _SHIFT
    return pre, offsets, plain_ms, v.astype(float, copy=False)


def _merged_load(
    policy: _PolicyColumns, contributions: ContributionArrays
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """F, the merged load: the sorted unique edges (key in the high bits), each edge's key, and F
    on each segment [breaks[j], breaks[j+1])."""
    edges, value = _edges(policy, contributions)
    breaks, rank = _unique_with_rank(edges)
    del edges
    n_c = len(value)
    n_b = len(breaks)
    break_key = breaks >> _TIME_BITS
    strategies = policy.strategy.present(break_key)
    i_s, i_e = rank[:n_c], rank[n_c:]
    covered = int((i_e - i_s).sum()) if n_c else 0
    if covered <= EXPANSION_LIMIT_PER_CONTRIBUTION * n_c + EXPANSION_LIMIT:
        seg, seg_val = _expand_ranges(i_s, i_e, value)
        del rank, value, i_s, i_e
        count = np.bincount(seg, minlength=n_b)
        # The Sum; the other strategies overwrite it. (Float even when empty: bincount then gives ints.)
        f = np.bincount(seg, weights=seg_val, minlength=n_b).astype(float, copy=False)
        extrema = _group_extrema(seg, seg_val, n_b) if strategies & {1, 2} else None
        del seg, seg_val
    else:
        # Many items active at once on one target (a cron window longer than its period, thousands of
        # overlapping announcements): one row per (contribution, segment) would be quadratic.
        f, count, extrema = _covered_by_tree(i_s, i_e, value, n_b, bool(strategies & {1, 2}))
        del rank, value, i_s, i_e
    active = count > 0
    if 3 in strategies:
        avg_mask = active if strategies == {3} else active & (policy.strategy.at(break_key) == 3)
        f[avg_mask] /= count[avg_mask]
    if extrema is not None:
        for code, extreme in zip((1, 2), extrema):
            if code in strategies:
                mask = active if strategies == {code} else active & (policy.strategy.at(break_key) == code)
                np.copyto(f, extreme, where=mask)
    idle = np.logical_not(active, out=active)
    np.copyto(f, policy.default.at(break_key), where=idle)  # no contribution active: the default
    return breaks, break_key, f


def _edges(policy: _PolicyColumns, contributions: ContributionArrays) -> tuple[np.ndarray, np.ndarray]:
    """Every contribution's start edge, then every end edge (`key << 43 | shifted ms`, the end after
    holdTime), and the values; contributions with a non-finite value or an empty window are left out."""
    kidx = np.asarray(contributions.key, dtype=np.int64)
    start = to_ms(contributions.start)
    start += _SHIFT
    end = to_ms(contributions.end)
    end += _SHIFT
    value = np.asarray(contributions.value, dtype=float)
    if len(kidx):
        end += policy.hold_ms.at(kidx)
        keep = np.isfinite(value) & (end > start)
        if not keep.all():
            kidx, start, end, value = kidx[keep], start[keep], end[keep], value[keep]
    n_c = len(kidx)
    edges = np.empty(2 * n_c, dtype=np.int64)
    key_shift = np.left_shift(kidx, _TIME_BITS, out=edges[n_c:])  # kept in the second half until the end edges
    np.bitwise_or(key_shift, start, out=edges[:n_c])
    np.bitwise_or(key_shift, end, out=key_shift)
    return edges, value


def _lookahead_peak(
    policy: _PolicyColumns, breaks: np.ndarray, lead: np.ndarray | np.generic, f: np.ndarray, first: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """V = the max of F over [t, t + leadTime] at V's candidate breakpoints: (V, the candidates,
    their keys). `first[k]` is the index of key k's first break."""
    cand, lo, hi = _lookahead_windows(breaks, lead)
    cand_key = cand >> _TIME_BITS
    first_of_cand = first[cand_key]
    before_first = lo < first_of_cand  # the window starts before the key's first edge: the default is in it
    np.maximum(lo, first_of_cand, out=lo)
    del first_of_cand
    v = _range_max(f, lo, hi)
    del lo, hi
    np.maximum(v, policy.default.at(cand_key), out=v, where=before_first)
    return v, cand, cand_key


class _Column:
    """One policy field for every key: `at(key_index_array)` gives it per element, as a scalar when
    every key has the same policy (one metric: no gather over millions of breakpoints)."""

    def __init__(self, by_policy: np.ndarray, which: np.ndarray, uniform: bool):
        self.per_key = by_policy[which]
        self._scalar = by_policy[which[0]] if uniform and len(which) else None

    def at(self, keys: np.ndarray) -> np.ndarray | np.generic:
        return self._scalar if self._scalar is not None else self.per_key[keys]

    def any_positive(self, keys: np.ndarray) -> bool:
        return bool(self._scalar > 0) if self._scalar is not None else bool(np.any(self.per_key[keys] > 0))

    def present(self, keys: np.ndarray) -> set[int]:
        if self._scalar is not None:
            return {int(self._scalar)} if len(keys) else set()
        return {int(x) for x in np.unique(self.per_key[keys])}


class _PolicyColumns:
    def __init__(self, table: Sequence[MetricPolicy], which: np.ndarray):
        uniform = bool(len(which) == 0 or np.all(which == which[0]))
        self.default = _Column(np.array([p.default_value for p in table], dtype=float), which, uniform)
        self.lead_ms = _Column(to_ms([p.lead_time for p in table]), which, uniform)
        self.hold_ms = _Column(to_ms([p.hold_time for p in table]), which, uniform)
        lo = np.array([-math.inf if p.min is None else p.min for p in table], dtype=float)
        hi = np.array([math.inf if p.max is None else p.max for p in table], dtype=float)
        self.clamps = any(p.min is not None or p.max is not None for p in table)
        self.lo_clamp = _Column(lo, which, uniform)
        self.hi_clamp = _Column(hi, which, uniform)
        codes = np.array([STRATEGIES.index(p.merge_strategy) for p in table], dtype=np.int8)
        self.strategy = _Column(codes, which, uniform)


def _argsort(values: np.ndarray) -> np.ndarray:
    """argsort, picking the algorithm by how sorted `values` already is. Contributions usually come
    grouped by key and in time order, so the edges are a few sorted runs, which timsort (numpy's
    stable sort) merges in linear time; on shuffled input it is several times slower than the default."""
    if len(values) > 1 and np.count_nonzero(values[1:] < values[:-1]) <= len(values) >> 8:
        return np.argsort(values, kind="stable")
    return np.argsort(values)


def _unique_with_rank(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique values and, for each input, its index among them (one argsort, no searches:
    binary searches with unsorted needles thrash the cache at a million points)."""
    order = _argsort(values)  # equal values get equal ranks, so stability is not needed
    ordered = values[order]
    keep = np.ones(len(ordered), dtype=bool)
    if len(ordered) > 1:
        np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    unique = ordered[np.flatnonzero(keep)]
    position = np.cumsum(keep, out=ordered)  # the sorted copy is not needed any more: reuse it
    del keep
    position -= 1
    rank = np.empty(len(values), dtype=np.int64)
    rank[order] = position
    return unique, rank


def _lookahead_windows(breaks: np.ndarray, lead: np.ndarray | np.generic) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """V's candidate breakpoints (the sorted union of `breaks` and `breaks - lead`) and, for each
    candidate c, the index of the last break <= c (lo) and of the last break <= c + lead (hi).

    `breaks` is sorted and unique (key in the high bits), `lead` is its key's leadTime in ms (one
    scalar when every key has the same), and
    `breaks - lead` stays in its key's range. One merge instead of two binary searches: a break b is
    <= c + lead exactly when b - lead <= c, so both indexes are counts of the merged runs' elements
    <= c. Each value carries its origin in the low bit (0: a break, 1: a shifted break), which also
    orders a break before an equal shifted one."""
    n = len(breaks)
    merged = np.empty(2 * n, dtype=np.int64)  # filled in place: these arrays are the build's largest
    np.left_shift(breaks, 1, out=merged[:n])
    shifted = merged[n:]
    np.subtract(breaks, lead, out=shifted)
    shifted <<= 1
    shifted |= 1
    merged.sort(kind="stable")  # two sorted runs: a linear merge
    last = np.empty(len(merged), dtype=bool)  # the last element of each run of equal values
    last[-1] = True
    # Values are distinct (breaks are, and so are shifted ones), so equal ones differ in the low bit only.
    step = np.bitwise_xor(merged[1:], merged[:-1])
    np.not_equal(step, 1, out=last[:-1])
    del step
    at = np.flatnonzero(last)  # integer gathers: boolean masks of this size are several times slower
    del last
    cand = merged[at]
    cand >>= 1
    shifted_le = np.bitwise_and(merged, 1, out=merged)  # merged is not needed any more: reuse it
    np.cumsum(shifted_le, out=shifted_le)
    hi = shifted_le[at]
    del merged, shifted_le
    hi -= 1
    lo = at  # at - hi - 1, in place
    lo -= hi
    lo -= 1
    return cand, lo, hi


def _expand_ranges(i_s: np.ndarray, i_e: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Segment indices i_s[c] .. i_e[c]-1 for every contribution c, with its value repeated."""
    lengths = i_e - i_s
    total = int(lengths.sum()) if len(lengths) else 0
    if total == 0:
        return np.empty(0, np.int64), np.empty(0)
    shift = np.cumsum(lengths)
    shift -= lengths
    np.subtract(i_s, shift, out=shift)
    seg = np.repeat(shift, lengths)
    seg += np.arange(total, dtype=np.int64)
    return seg, np.repeat(value, lengths)


def _covered_by_tree(
    i_s: np.ndarray, i_e: np.ndarray, value: np.ndarray, n: int, extrema: bool
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
    """Per segment 0..n-1: the sum and the count of the values of the contributions covering it
    (contribution c covers segments i_s[c] .. i_e[c]-1), and their max and min when `extrema`.

    Each range is split into the O(log n) nodes of a segment tree that tile it exactly, each node
    accumulates what covers it whole, and every leaf then adds up its ancestors: O(C log n + n)
    however much the contributions overlap. A segment's sum is that of exactly the contributions
    active on it (only in another order than one row per pair: floats may round differently;
    max, min and counts are exact)."""
    size = 1 << max(0, (n - 1).bit_length())
    lo, hi, val = i_s + size, i_e + size, np.asarray(value, dtype=float)
    nodes, weights = [], []
    while len(lo):
        live = lo < hi
        lo, hi, val = lo[live], hi[live], val[live]
        left = (lo & 1).astype(bool)
        nodes.append(lo[left])
        weights.append(val[left])
        lo += left
        right = (hi & 1).astype(bool)
        hi -= right
        nodes.append(hi[right])
        weights.append(val[right])
        lo >>= 1
        hi >>= 1
    node = np.concatenate(nodes) if nodes else np.empty(0, np.int64)
    weight = np.concatenate(weights) if weights else np.empty(0)
    del nodes, weights
    total = np.bincount(node, weights=weight, minlength=2 * size).astype(float, copy=False)
    count = np.bincount(node, minlength=2 * size)
    high = low = None
    if extrema:
        high, low = _group_extrema(node, weight, 2 * size)
    del node, weight
    width = 1
    while width < size:  # push every level down to its children: leaves end with their ancestors' sum
        parent, child = slice(width, 2 * width), slice(2 * width, 4 * width)
        total[child] += np.repeat(total[parent], 2)
        count[child] += np.repeat(count[parent], 2)
        if high is not None and low is not None:
            np.maximum(high[child], np.repeat(high[parent], 2), out=high[child])
            np.minimum(low[child], np.repeat(low[parent], 2), out=low[child])
        width *= 2
    leaves = slice(size, size + n)
    pair = (high[leaves], low[leaves]) if high is not None and low is not None else None
    return total[leaves], count[leaves], pair


def _group_extrema(seg: np.ndarray, val: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Max and min of `val` per segment id in `seg` (+-inf where a segment has none): one sort of
    the ids and a segmented reduce (ufunc.at is unbuffered: ~100 ns per element)."""
    seg_max = np.full(n, -np.inf)
    seg_min = np.full(n, np.inf)
    if not len(seg):
        return seg_max, seg_min
    order = _argsort(seg)
    ids, vals = seg[order], val[order]
    first = np.ones(len(ids), dtype=bool)
    np.not_equal(ids[1:], ids[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    present = ids[starts]
    seg_max[present] = np.maximum.reduceat(vals, starts)
    seg_min[present] = np.minimum.reduceat(vals, starts)
    return seg_max, seg_min


def _range_max(f: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """max(f[lo[i]:hi[i]+1]) for each i (lo <= hi), from a sparse table: row j holds the maxima of
    the windows of 2**j, and each range is the max of two (overlapping) windows of its row."""
    if not len(lo):
        return np.empty(0)
    n = len(f)
    lengths = hi - lo + 1
    top = int(lengths.max()).bit_length() - 1
    if top == 0:
        return f[lo]
    if int(lengths.max()) == 2:  # the usual case (edges far apart compared with leadTime)
        out = f[lo]
        return np.maximum(out, f[hi], out=out)
    table = np.empty((top + 1, n))
    table[0] = f
    for j in range(1, top + 1):
        half, valid = 1 << (j - 1), n - (1 << j) + 1  # row j is defined on [0, valid)
        np.maximum(table[j - 1, :valid], table[j - 1, half : half + valid], out=table[j, :valid])
        table[j, valid:] = table[j - 1, valid:]  # never read; keeps the table initialised
    level = np.frexp(lengths.astype(float))[1].astype(np.int64) - 1  # floor(log2(length)), exact
    flat = table.ravel()
    row = level * n
    return np.maximum(flat[row + lo], flat[row + hi - (np.int64(1) << level) + 1])
