"""Two prescaler processes against the real API server: both serve, only the Lease holder writes status.

Each process has its own ServiceAccount token; kube-apiserver records a token's ID in every audit event
(user.extra authentication.kubernetes.io/credential-id), so the audit log says which process renewed
the Lease and which wrote each status update."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.controlplane import ControlPlane
from tests.e2e.support import NAMESPACE, PrescalerProcess, audit_events, audit_offset, wait_for

log = logging.getLogger("e2e.leader")
LEASE = "prescaler-status-writer"


def lease_holder(plane: ControlPlane) -> str:
    result = plane.kubectl("get", "lease", LEASE, "-n", NAMESPACE, "-o", "jsonpath={.spec.holderIdentity}", check=False)
    return result.stdout.strip() if result.returncode == 0 else ""


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


def edit_and_wait_for_status(plane: ControlPlane, users: int) -> None:
    plane.apply(probe(users))
    generation = plane.get_json("virtualmetricevent", "probe")["metadata"]["generation"]
    wait_for(
        lambda: plane.get_json("virtualmetricevent", "probe").get("status", {}).get("observedGeneration") == generation,
        60,
        f"status.observedGeneration {generation}",
    )


@pytest.mark.timeout(300)
def test_only_the_lease_holder_writes_status(
    plane: ControlPlane, prescaler: PrescalerProcess, certs: Path, seed: dict[str, str]
) -> None:
    assert lease_holder(plane).startswith(f"{prescaler.name}_")
    second = PrescalerProcess(plane, certs, "prescaler-b", plane.service_account_token(NAMESPACE, "prescaler"))
    a, b = prescaler.credential_id, second.credential_id
    assert a != b
    second.start()
    try:
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
    finally:
        if not prescaler.running():
            prescaler.start()
        second.stop()
        plane.kubectl("delete", "virtualmetricevent", "probe", "--wait=false", check=False)
    wait_for(lambda: lease_holder(plane).startswith(f"{prescaler.name}_"), 60, "prescaler-a to hold the Lease again")
