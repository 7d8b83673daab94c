"""Status-writer failover: when the Lease holder dies, another replica holds the Lease within 20 s.

Both electors run against the fake API server on a simulated clock, scheduled exactly as their
threads schedule themselves (`next_attempt_in`), with every API call taking API_CALL_SECONDS of
simulated time. The holder dies right after a renewal (the worst moment) and the follower's polling
phase is swept over a whole period, so the worst case of the default timings is what is checked.
"""

from __future__ import annotations

import pytest

from adapter.store.lease import LeaseElector
from tests.fakekube import FakeKube

API_CALL_SECONDS = 0.2  # a slow API server: each read + replace costs this much simulated time
FAILOVER_GOAL_SECONDS = 20.0


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture(scope="module")
def fake():
    with FakeKube() as server:
        yield server


def takeover_after_death(fake: FakeKube, lease: str, follower_phase: float, death_delay: float) -> float:
    """Seconds from the holder's death to the follower holding the Lease (default timings)."""
    clock = Clock()
    holder = LeaseElector(fake.api_client(), "ns", lease, identity="holder", clock=clock)
    follower = LeaseElector(fake.api_client(), "ns", lease, identity="follower", clock=clock)
    next_at = {holder: clock.t, follower: clock.t + follower_phase}
    death: float | None = None
    while clock.t < 1000.0 + 300.0:
        elector = min(next_at, key=lambda e: next_at[e])
        clock.t = next_at[elector]
        leader = elector.try_acquire_or_renew()
        clock.t += API_CALL_SECONDS
        if elector is follower and leader:
            assert death is not None, "the follower took the Lease from a live holder"
            return clock.t - death
        next_at[elector] = clock.t + elector.next_attempt_in(leader)
        if elector is holder and leader and death is None and clock.t > 1000.0 + 30.0:
            death = clock.t + death_delay  # dies after this renewal, before the next one
            next_at[holder] = float("inf")
    raise AssertionError("the follower never took over")


def test_defaults_leave_room_for_failover_within_20_seconds(fake):
    elector = LeaseElector(fake.api_client(), "ns", "defaults", identity="x")
    assert elector.retry_interval < elector.renew_interval < elector.lease_duration
    worst = 0.0
    steps = 4
    for i in range(steps):
        phase = elector.retry_interval * i / steps
        for death_delay in (0.0, elector.renew_interval / 2):
            worst = max(worst, takeover_after_death(fake, f"lease-{i}-{death_delay:g}", phase, death_delay))
    assert worst <= FAILOVER_GOAL_SECONDS, f"worst failover {worst:.1f} s"
    # ... and it is not faster than the lease allows: a live holder is never displaced early.
    assert worst >= elector.lease_duration


def test_follower_looks_more_often_than_the_holder_renews(fake):
    elector = LeaseElector(
        fake.api_client(), "ns", "pace", identity="x", lease_duration=15, renew_interval=5, retry_interval=2
    )
    assert elector.next_attempt_in(True) == 5 and elector.next_attempt_in(False) == 2
    # A retry interval longer than the renewal pace makes no sense: capped.
    assert (
        LeaseElector(fake.api_client(), "ns", "cap", identity="y", renew_interval=1, retry_interval=3).next_attempt_in(
            False
        )
        == 1
    )
