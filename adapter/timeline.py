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
`np.unique`/`np.searchsorted` serve all keys at once.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

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
    ):
        self.keys = keys
        self.index = {key: i for i, key in enumerate(keys)}
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
    keys: list[Hashable],
    policies: Sequence[MetricPolicy],
    contributions: ContributionArrays,
    policy_index: np.ndarray | None = None,
    workers: int = 1,
) -> TimelineSet:
    """Build V for every key at once; `contributions.key` indexes `keys`.

    Policies: either one per key (`policies[k]` for `keys[k]`), or, with `policy_index`, a small
    table that `policy_index[k]` points into (the engine has one policy per metric, so it avoids
    hashing 100 000 equal policies). With `workers > 1` large builds are split by key range and run
    in threads: the numpy work releases the GIL, so two cores build twice as fast.

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
        jobs = []
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            sel = (key >= lo) & (key < hi)
            jobs.append(
                (
                    int(hi - lo),
                    which[lo:hi],
                    ContributionArrays(
                        key[sel] - lo, contributions.start[sel], contributions.end[sel], contributions.value[sel]
                    ),
                )
            )
        with ThreadPoolExecutor(max_workers=chunks) as pool:
            parts = list(pool.map(lambda job: _build_arrays(job[0], table, job[1], job[2]), jobs))
    pre = np.concatenate([p[0] for p in parts])
    shifts = np.cumsum([0] + [len(p[2]) for p in parts[:-1]])
    offsets = np.concatenate([[0]] + [p[1][1:] + shift for p, shift in zip(parts, shifts)]).astype(np.int64)
    return TimelineSet(
        list(keys), pre, offsets, np.concatenate([p[2] for p in parts]), np.concatenate([p[3] for p in parts])
    )


def _build_arrays(
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
