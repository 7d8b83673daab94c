"""StatusWriter and LeaseElector against the fake API server."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from adapter.store.lease import LeaseElector
from adapter.store.status import StatusWriter, complete_status
from tests.fakekube import FakeKube

API = "prescaler.pingpong.ai/v1"
WAIT = 10.0
VME = ("VirtualMetricEvent", "stage")
VM = ("VirtualMetric", "rps")


def cond(type_: str, status: str, reason: str = "Ok", message: str = "", ltt: str | None = None) -> dict:
    c = {"type": type_, "status": status, "reason": reason, "message": message}
    if ltt:
        c["lastTransitionTime"] = ltt
    return c


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Desired:
    """What the engine would hand over; thread-safe like the real one must be."""

    def __init__(self, statuses: dict | None = None) -> None:
        self.lock = threading.Lock()
        self.statuses: dict[tuple[str, str], tuple[int, dict]] = dict(statuses or {})

    def set(self, key: tuple[str, str], generation: int, status: dict) -> None:
        with self.lock:
            self.statuses[key] = (generation, status)

    def __call__(self) -> dict:
        with self.lock:
            return dict(self.statuses)


@pytest.fixture()
def fake():
    with FakeKube() as server:
        server.apply(
            {
                "apiVersion": API,
                "kind": "VirtualMetricEvent",
                "metadata": {"name": "stage"},
                "spec": {"source": {"api": {"url": "https://x.invalid"}}, "metrics": []},
            }
        )
        server.apply({"apiVersion": API, "kind": "VirtualMetric", "metadata": {"name": "rps"}, "spec": {}})
        yield server


def patches(fake: FakeKube, name: str | None = None) -> list:
    return fake.requests_matching("PATCH", f"/{name or '[^/]+'}/status$")


def vme_status(ready: str = "True", message: str = "", ltt: str | None = None, fetched: str = "t1") -> dict:
    return {
        "conditions": [
            cond("Ready", ready, message=message, ltt=ltt),
            cond("SourceHealthy", "True"),
            cond("ExpressionsValid", "True"),
        ],
        "lastSuccessfulFetchTime": fetched,
        "itemCount": 3,
        "stale": False,
    }


def writer(fake: FakeKube, desired: Any, **kwargs: Any) -> StatusWriter:
    kwargs.setdefault("min_interval", 0.0)
    kwargs.setdefault("now", lambda: "2024-01-01T00:00:00Z")
    return StatusWriter(fake.api_client(), desired, **kwargs)


def test_writes_status_of_both_kinds_with_defaults_filled_in(fake):
    desired = Desired({VME: (1, vme_status()), VM: (1, {"targets": [{"namespace": "a", "name": "svc"}]})})
    w = writer(fake, desired)
    assert w.sync_once() is None
    stored = fake.get(*VME)["status"]
    assert stored["observedGeneration"] == 1 and stored["itemCount"] == 3 and stored["stale"] is False
    assert [c["type"] for c in stored["conditions"]] == ["Ready", "SourceHealthy", "ExpressionsValid"]
    assert all(
        c["lastTransitionTime"] == "2024-01-01T00:00:00Z" and c["observedGeneration"] == 1 for c in stored["conditions"]
    )
    assert fake.get(*VM)["status"] == {"targets": [{"namespace": "a", "name": "svc"}], "observedGeneration": 1}
    assert fake.get(*VM)["metadata"]["generation"] == 1
    assert all(r.headers["content-type"] == "application/merge-patch+json" for r in patches(fake))


def test_writes_only_when_something_changed(fake):
    desired = Desired({VME: (1, vme_status())})
    w = writer(fake, desired)
    w.sync_once()
    w.sync_once()
    w.sync_once()
    assert len(patches(fake)) == 1
    desired.set(VME, 1, vme_status(fetched="t2"))
    w.sync_once()
    w.sync_once()
    assert len(patches(fake)) == 2
    assert fake.get(*VME)["status"]["lastSuccessfulFetchTime"] == "t2"
    desired.set(VME, 2, vme_status(fetched="t2"))  # a new generation is a change (observedGeneration)
    w.sync_once()
    assert fake.get(*VME)["status"]["observedGeneration"] == 2


def test_a_fresh_writer_reads_the_server_and_does_not_rewrite_an_equal_status(fake):
    desired = Desired({VME: (1, vme_status())})
    writer(fake, desired).sync_once()
    # A restarted replica whose engine stamps "now" on conditions finds the same status: no write.
    later = writer(
        fake, Desired({VME: (1, vme_status(ltt="2030-01-01T00:00:00Z"))}), now=lambda: "2030-01-01T00:00:00Z"
    )
    later.sync_once()
    assert len(patches(fake)) == 1
    # It read the object itself: deploy/rbac.yaml grants get on the resource but only update/patch on
    # .../status, and a real API server answers 403 to a GET of the status subresource.
    assert fake.requests_matching("GET", "/virtualmetricevents/stage$")
    assert not fake.requests_matching("GET", "/status$")


def test_last_transition_time_kept_unless_the_condition_status_flips(fake):
    stamp = {"now": "2024-01-01T00:00:00Z"}
    desired = Desired({VME: (1, vme_status())})
    w = writer(fake, desired, now=lambda: stamp["now"])
    w.sync_once()
    stamp["now"] = "2024-01-01T00:05:00Z"
    desired.set(VME, 1, vme_status(message="fetched 3 items"))  # same status, new message
    w.sync_once()
    ready = fake.get(*VME)["status"]["conditions"][0]
    assert ready["message"] == "fetched 3 items" and ready["lastTransitionTime"] == "2024-01-01T00:00:00Z"
    stamp["now"] = "2024-01-01T00:09:00Z"
    desired.set(VME, 1, vme_status(ready="False", message="source down"))
    w.sync_once()
    conditions = fake.get(*VME)["status"]["conditions"]
    assert conditions[0]["lastTransitionTime"] == "2024-01-01T00:09:00Z"
    assert conditions[1]["lastTransitionTime"] == "2024-01-01T00:00:00Z"  # SourceHealthy unchanged


def test_fields_no_longer_desired_are_removed(fake):
    desired = Desired({VME: (1, vme_status())})
    w = writer(fake, desired)
    w.sync_once()
    status = vme_status()
    del status["lastSuccessfulFetchTime"]
    desired.set(VME, 1, status)
    w.sync_once()
    assert "lastSuccessfulFetchTime" not in fake.get(*VME)["status"]
    assert patches(fake)[-1].body["status"]["lastSuccessfulFetchTime"] is None


def test_rate_limit_coalesces_changes(fake):
    clock = Clock()
    desired = Desired({VME: (1, vme_status(fetched="t0"))})
    w = writer(fake, desired, min_interval=5.0, clock=clock)
    assert w.sync_once() is None
    for i in range(1, 4):
        clock.t += 1.0
        desired.set(VME, 1, vme_status(fetched=f"t{i}"))
        wait = w.sync_once()
        assert wait == pytest.approx(5.0 - i)  # told when the write will be due
    assert len(patches(fake)) == 1
    clock.t += 2.0
    assert w.sync_once() is None
    assert len(patches(fake)) == 2
    assert fake.get(*VME)["status"]["lastSuccessfulFetchTime"] == "t3"  # only the latest is written


def test_api_errors_are_retried_with_backoff_and_never_raise(fake):
    clock = Clock()
    fake.inject_error("PATCH", "/status$", code=500, times=2)
    desired = Desired({VME: (1, vme_status())})
    w = writer(fake, desired, clock=clock, backoff_initial=1.0, backoff_max=4.0)
    first = w.sync_once()
    assert first is not None and 0.5 <= first <= 1.0
    assert w.sync_once() is not None and len(patches(fake)) == 1  # still backing off: no request
    clock.t += 1.0
    second = w.sync_once()
    assert second is not None and 1.0 <= second <= 2.0  # doubled
    clock.t += 2.0
    assert w.sync_once() is None
    assert fake.get(*VME)["status"]["itemCount"] == 3
    assert w.errors == 2 and w.writes == 1


def test_deleted_object_and_unreachable_server_do_not_raise(fake):
    desired = Desired({("VirtualMetricEvent", "gone"): (1, vme_status())})
    w = writer(fake, desired)
    assert w.sync_once() is None
    fake.inject_error("*", ".", code=503, times=100)
    desired.set(VME, 1, vme_status())
    assert w.sync_once() is not None
    fake.stop()  # connection refused from now on
    w._retry_at.clear()
    assert w.sync_once() is not None


def test_desired_that_raises_does_not_kill_the_thread(fake):
    calls = {"n": 0}

    def flaky() -> dict:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("engine bug")
        return {VME: (1, vme_status())}

    w = writer(fake, flaky, backoff_initial=0.05)
    w.start()
    try:
        FakeKube.wait_for(lambda: (fake.get(*VME).get("status") or {}).get("itemCount") == 3, WAIT)
    finally:
        w.stop()


def test_thread_writes_after_notify(fake):
    desired = Desired({VME: (1, vme_status())})
    w = writer(fake, desired, idle_poll=30.0)
    w.start()
    try:
        FakeKube.wait_for(lambda: len(patches(fake)) == 1, WAIT)
        desired.set(VME, 1, vme_status(fetched="t9"))
        w.notify()
        FakeKube.wait_for(lambda: fake.get(*VME)["status"]["lastSuccessfulFetchTime"] == "t9", WAIT)
    finally:
        w.stop()


def test_two_replicas_with_a_lease_only_the_holder_writes_then_takeover(fake):
    fake.accepted_tokens |= {"replica-a", "replica-b"}
    replicas = {}
    for token in ("replica-a", "replica-b"):
        elector = LeaseElector(
            fake.api_client(token), "prescaler", identity=token, lease_duration=10.0, renew_interval=0.1
        )
        desired = Desired({VME: (1, vme_status(fetched=f"{token}-1"))})
        w = StatusWriter(fake.api_client(token), desired, elector=elector, min_interval=0.0, idle_poll=0.1)
        replicas[token] = (w, desired, elector)
    for w, _, _ in replicas.values():
        w.start()
    try:
        FakeKube.wait_for(lambda: patches(fake), WAIT)
        for w, desired, _ in replicas.values():  # both engines keep changing their status
            desired.set(VME, 1, vme_status(fetched="changed"))
            w.notify()
        FakeKube.wait_for(lambda: fake.get(*VME)["status"]["lastSuccessfulFetchTime"] == "changed", WAIT)
        writers = {r.headers["authorization"] for r in patches(fake)}
        assert len(writers) == 1
        leader = writers.pop().removeprefix("Bearer ")
        follower = next(t for t in replicas if t != leader)
        assert replicas[leader][2].is_leader and not replicas[follower][2].is_leader
        assert fake.get("Lease", "prescaler-status-writer", "prescaler")["spec"]["holderIdentity"] == leader

        replicas[leader][0].stop()  # releases the Lease
        replicas[follower][1].set(VME, 1, vme_status(fetched="by-follower"))
        FakeKube.wait_for(lambda: fake.get(*VME)["status"]["lastSuccessfulFetchTime"] == "by-follower", WAIT)
        assert patches(fake)[-1].headers["authorization"] == f"Bearer {follower}"
    finally:
        for w, _, _ in replicas.values():
            w.stop()


def test_lease_is_taken_over_after_expiry_when_the_holder_dies(fake):
    clock = Clock()
    a = LeaseElector(fake.api_client(), "ns", identity="a", lease_duration=10, renew_interval=1, clock=clock)
    b = LeaseElector(fake.api_client(), "ns", identity="b", lease_duration=10, renew_interval=1, clock=clock)
    assert a.try_acquire_or_renew() and a.is_leader
    assert not b.try_acquire_or_renew()
    clock.t += 5
    assert a.try_acquire_or_renew()  # renewal changes the record: b's expiry timer restarts
    assert not b.try_acquire_or_renew()
    clock.t += 9
    assert not b.try_acquire_or_renew()  # 9 s since b saw the last renewal: not yet expired
    assert a.is_leader
    clock.t += 2  # a crashed and never renewed: its lease ran out on both clocks
    assert not a.is_leader
    assert b.try_acquire_or_renew() and b.is_leader
    lease = fake.get("Lease", "prescaler-status-writer", "ns")
    assert lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew()  # the old holder does not grab it back


def test_lease_api_errors_do_not_raise(fake):
    clock = Clock()
    a = LeaseElector(fake.api_client(), "ns", identity="a", lease_duration=10, renew_interval=1, clock=clock)
    assert a.try_acquire_or_renew()
    fake.inject_error("*", "leases", code=500, times=100)
    assert a.try_acquire_or_renew()  # still within its own lease time
    clock.t += 11
    assert not a.try_acquire_or_renew() and not a.is_leader


def test_complete_status_leaves_input_untouched():
    desired = vme_status()
    out = complete_status(3, desired, None, "now")
    assert "observedGeneration" not in desired and out["observedGeneration"] == 3
    assert "lastTransitionTime" not in desired["conditions"][0]
