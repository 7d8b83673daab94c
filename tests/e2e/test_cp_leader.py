"""Two prescaler processes against the real API server: both serve, only the Lease holder writes status.

Each process has its own ServiceAccount token; kube-apiserver records a token's ID in every audit event
(user.extra authentication.kubernetes.io/credential-id), so the audit log says which process renewed
the Lease and which wrote each status update."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.controlplane import ControlPlane
from tests.e2e.support import (
    NAMESPACE,
    PrescalerProcess,
    apiservice_available,
    audit_events,
    audit_offset,
    wait_for,
)

log = logging.getLogger("e2e.leader")
LEASE = "prescaler-status-writer"
FAILOVER_GOAL_SECONDS = 20.0  # from the holder's death to another process holding the Lease


def lease_record(plane: ControlPlane) -> tuple[str, str]:
    """(holderIdentity, renewTime) of the status writers' Lease; empty strings while there is none."""
    result = plane.kubectl("get", "lease", LEASE, "-n", NAMESPACE, "-o", "json", check=False)
    if result.returncode != 0:
        return "", ""
    spec = json.loads(result.stdout).get("spec", {})
    return spec.get("holderIdentity", ""), spec.get("renewTime", "")


def lease_holder(plane: ControlPlane) -> str:
    return lease_record(plane)[0]


def writers(plane: ControlPlane, offset: int, resource: str, name: str) -> set[str]:
    """Credential IDs of successful writes to ``resource`` named ``name`` since ``offset``."""
    found = set()
    for event in audit_events(plane, offset):
        ref = event.get("objectRef", {})
        if (ref.get("resource"), ref.get("name")) != (resource, name) or event.get("stage") != "ResponseComplete":
            continue
        if resource == "virtualmetricevents" and ref.get("subresource") != "status":
            continue
        if event.get("responseStatus", {}).get("code", 0) >= 300:
            continue
        extra = event.get("user", {}).get("extra", {})
        found.update(extra.get("authentication.kubernetes.io/credential-id", ["<no credential id>"]))
    return found


def probe(users: int) -> dict[str, Any]:
    now = int(time.time())
    return {
        "apiVersion": "prescaler.pingpong.ai/v1",
        "kind": "VirtualMetricEvent",
        "metadata": {"name": "probe"},
        "spec": {
            "source": {"schedule": {"items": [{"start": now - 60, "end": now + 3600, "values": {"users": users}}]}},
            "metrics": [
                {
                    "name": "rps",
                    "resource": {"name": "probe", "namespace": "probe"},
                    "value": {"expression": f"users * {users}"},
                }
            ],
        },
    }


def edit_probe(plane: ControlPlane, users: int) -> int:
    """Apply the probe VME with `users`; returns the generation its status must come to observe."""
    plane.apply(probe(users))
    return int(plane.get_json("virtualmetricevent", "probe")["metadata"]["generation"])


def wait_for_probe_status(plane: ControlPlane, generation: int) -> None:
    wait_for(
        lambda: plane.get_json("virtualmetricevent", "probe").get("status", {}).get("observedGeneration") == generation,
        60,
        f"status.observedGeneration {generation}",
    )


def edit_and_wait_for_status(plane: ControlPlane, users: int) -> None:
    wait_for_probe_status(plane, edit_probe(plane, users))


@contextlib.contextmanager
def second_process(plane: ControlPlane, certs: Path, prescaler: PrescalerProcess) -> Iterator[PrescalerProcess]:
    """prescaler-b beside the APIService's prescaler-a, with its own token. Afterwards prescaler-a runs,
    holds the Lease and is available through the aggregator again, and the probe VME is gone."""
    second = PrescalerProcess(plane, certs, "prescaler-b", plane.service_account_token(NAMESPACE, "prescaler"))
    second.start()
    try:
        yield second
    finally:
        if not prescaler.running():
            prescaler.start()
        second.stop()
        plane.kubectl("delete", "virtualmetricevent", "probe", "--wait=false", check=False)
    wait_for(lambda: lease_holder(plane).startswith(f"{prescaler.name}_"), 60, "prescaler-a to hold the Lease again")
    wait_for(lambda: apiservice_available(plane), 90, "the APIService Available again")


@pytest.mark.timeout(300)
def test_only_the_lease_holder_writes_status(
    plane: ControlPlane, prescaler: PrescalerProcess, certs: Path, seed: dict[str, str]
) -> None:
    assert lease_holder(plane).startswith(f"{prescaler.name}_")
    with second_process(plane, certs, prescaler) as second:
        a, b = prescaler.credential_id, second.credential_id
        assert a != b
        offset = audit_offset(plane)
        edit_and_wait_for_status(plane, 2)
        status_writers = writers(plane, offset, "virtualmetricevents", "probe")
        # The holder renews every 5 s: wait for one renewal to see who holds it.
        lease_writers = wait_for(lambda: writers(plane, offset, "leases", LEASE), 20, "a Lease renewal")
        log.info(
            "holder %s; status writes by %s; lease renewals by %s (a=%s, b=%s)",
            lease_holder(plane),
            status_writers,
            lease_writers,
            a,
            b,
        )
        assert status_writers == {a}, (status_writers, a, b)
        assert lease_writers == {a}, (lease_writers, a, b)

        # The holder goes away: the other process takes the Lease and becomes the only writer.
        prescaler.stop()
        wait_for(lambda: lease_holder(plane).startswith("prescaler-b_"), 60, "prescaler-b to take the Lease")
        offset = audit_offset(plane)
        edit_and_wait_for_status(plane, 3)
        status_writers = writers(plane, offset, "virtualmetricevents", "probe")
        log.info("after failover: holder %s; status writes by %s", lease_holder(plane), status_writers)
        assert status_writers == {b}, (status_writers, a, b)


@pytest.mark.timeout(300)
def test_when_the_holder_dies_the_other_process_writes_status_within_20_seconds(
    plane: ControlPlane, prescaler: PrescalerProcess, certs: Path, seed: dict[str, str]
) -> None:
    """SIGKILL, so nothing releases the Lease: the other process must see it expire and take it."""

    def held_by_a() -> tuple[str, str] | None:
        record = lease_record(plane)
        return record if record[0].startswith(f"{prescaler.name}_") else None

    with second_process(plane, certs, prescaler) as second:
        _, renewed = wait_for(held_by_a, 60, "prescaler-a to hold the Lease")
        # Die right after a renewal, the worst moment: the follower waits a whole lease from then.
        wait_for(lambda: lease_record(plane)[1] != renewed, 20, "a renewal of the Lease", interval=0.1)
        prescaler.kill()
        died = time.monotonic()
        offset = audit_offset(plane)
        generation = edit_probe(plane, 4)  # a change that only a live status writer can report
        wait_for(lambda: lease_holder(plane).startswith("prescaler-b_"), 60, "prescaler-b to take the Lease", 0.1)
        took_lease = time.monotonic() - died
        wait_for_probe_status(plane, generation)  # written by prescaler-b
        wrote_status = time.monotonic() - died
        status_writers = writers(plane, offset, "virtualmetricevents", "probe")
        log.info(
            "holder died after a renewal: prescaler-b held the Lease %.1f s later and wrote the pending status %.1f s later",
            took_lease,
            wrote_status,
        )
        assert status_writers == {second.credential_id}, (status_writers, second.credential_id)
        # Within the goal, and not before the Lease could expire: prescaler-b may have seen the renewal
        # up to the time it took us to notice it (well under a second) before the kill.
        assert 14.0 <= took_lease <= FAILOVER_GOAL_SECONDS, took_lease
