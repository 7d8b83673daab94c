"""Timeline semantics (docs/semantics.md §2-§3) against a brute-force reference, plus the bulk multi-key build."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.timeline import (
    STRATEGIES,
    Contribution,
    ContributionArrays,
    MetricPolicy,
    build_timeline,
    build_timelines,
)
from tests.reference import reference_value

contribution = st.builds(
    lambda start, length, value: Contribution(float(start), float(start + length), float(value)),
    st.integers(0, 100),
    st.integers(1, 40),
    st.integers(-50, 200),
)
policy = st.builds(
    MetricPolicy,
    default_value=st.sampled_from([0.0, 3.0, -2.0]),
    merge_strategy=st.sampled_from(STRATEGIES),
    lead_time=st.sampled_from([0.0, 1.0, 7.0, 30.0]),
    hold_time=st.sampled_from([0.0, 5.0]),
    min=st.sampled_from([None, 0.0, 10.0]),
    max=st.sampled_from([None, 150.0]),
)


@settings(max_examples=300, deadline=None)
@given(policy, st.lists(contribution, max_size=8))
def test_matches_reference_everywhere(pol: MetricPolicy, contributions: list[Contribution]) -> None:
    timeline = build_timeline(pol, contributions)
    probe = np.arange(-50.0, 200.0, 0.5)
    got = timeline.values_at(probe)
    for t, value in zip(probe, got):
        assert value == pytest.approx(reference_value(pol, contributions, float(t)), abs=1e-9), t
        assert timeline.value_at(float(t)) == value


def test_seed_example_sum_and_lead_time() -> None:
    # The seed's batch: 50 messages on [1700545800, 1700545860), expression * 2.
    pol = MetricPolicy(default_value=0, merge_strategy="Sum", lead_time=300)
    tl = build_timeline(pol, [Contribution(1700545800, 1700545860, 100)])
    assert tl.value_at(1700545800 - 301) == 0
    assert tl.value_at(1700545800 - 300) == 100  # closed lookahead window: the rise is leadTime early
    assert tl.value_at(1700545859.9) == 100
    assert tl.value_at(1700545860) == 0  # end is exclusive


def test_concurrent_windows_per_strategy() -> None:
    cs = [Contribution(0, 10, 4), Contribution(5, 15, 10)]
    expected_at_7 = {"Sum": 14, "Max": 10, "Min": 4, "Average": 7}
    for strategy, value in expected_at_7.items():
        tl = build_timeline(MetricPolicy(default_value=1, merge_strategy=strategy), cs)
        assert tl.value_at(7) == value
        assert tl.value_at(2) == 4
        assert tl.value_at(20) == 1  # default when nothing is active


def test_hold_time_and_clamp() -> None:
    tl = build_timeline(MetricPolicy(hold_time=30, min=2, max=50), [Contribution(100, 160, 80)])
    assert tl.value_at(99) == 2  # default 0 clamped up to min
    assert tl.value_at(120) == 50  # 80 clamped down to max
    assert tl.value_at(189) == 50  # still held
    assert tl.value_at(190) == 2


def test_bulk_build_equals_single_key_builds() -> None:
    rng = np.random.default_rng(7)
    keys = [("rps", "ns", f"svc-{i}") for i in range(50)]
    policies = [
        MetricPolicy(default_value=float(i % 3), merge_strategy=STRATEGIES[i % 4], lead_time=float(i % 5) * 10)
        for i in range(50)
    ]
    n = 2000
    arrays = ContributionArrays(
        rng.integers(0, 50, n),
        rng.integers(0, 1000, n).astype(float),
        np.zeros(n),
        rng.integers(-10, 100, n).astype(float),
    )
    arrays.end = arrays.start + rng.integers(1, 100, n)
    bulk = build_timelines(keys, policies, arrays)
    probe = np.arange(-100.0, 1200.0, 3.0)
    for k, key in enumerate(keys):
        sel = arrays.key == k
        single = build_timeline(
            policies[k],
            [Contribution(s, e, v) for s, e, v in zip(arrays.start[sel], arrays.end[sel], arrays.value[sel])],
        )
        np.testing.assert_allclose(bulk.values_at(key, probe), single.values_at(probe), atol=1e-9)


def test_keys_without_contributions_serve_clamped_default() -> None:
    tls = build_timelines([("m", "ns", "a")], [MetricPolicy(default_value=-5, min=0)], ContributionArrays.empty())
    assert tls.value_at(("m", "ns", "a"), 1e9) == 0
    assert tls.value_at(("m", "ns", "missing"), 1e9) is None


def test_non_finite_contributions_are_ignored() -> None:
    tl = build_timeline(MetricPolicy(), [Contribution(0, 10, float("nan")), Contribution(0, 10, 3)])
    assert tl.value_at(5) == 3


def test_long_lead_time_uses_range_max_over_many_segments() -> None:
    # Many short contributions inside one lookahead window exercise the sparse-table path.
    cs = [Contribution(i, i + 1, float(i % 97)) for i in range(0, 20000, 2)]
    pol = MetricPolicy(lead_time=7 * 86400)
    tl = build_timeline(pol, cs)
    assert tl.value_at(-10) == 96
    assert tl.value_at(19990) == max(c.value for c in cs if c.start >= 19990 or c.end > 19990)


def test_parallel_build_equals_serial(monkeypatch) -> None:
    from adapter import timeline

    monkeypatch.setattr(timeline, "PARALLEL_MIN_KEYS", 1)
    monkeypatch.setattr(timeline, "PARALLEL_MIN_CONTRIBUTIONS", 1)
    rng = np.random.default_rng(3)
    keys = [("m", "ns", str(i)) for i in range(301)]
    table = [MetricPolicy(lead_time=30, merge_strategy="Max", default_value=1), MetricPolicy(hold_time=5)]
    index = rng.integers(0, 2, len(keys))
    n = 5000
    start = rng.integers(0, 5000, n).astype(float)
    arrays = ContributionArrays(
        rng.integers(0, len(keys), n), start, start + rng.integers(1, 300, n), rng.normal(50, 20, n)
    )
    serial = build_timelines(keys, table, arrays, policy_index=index, workers=1)
    parallel = build_timelines(keys, table, arrays, policy_index=index, workers=3)
    probe = np.arange(-100.0, 5500.0, 7.0)
    for key in keys:
        np.testing.assert_array_equal(serial.values_at(key, probe), parallel.values_at(key, probe))
