"""HorizontalPodPrescaler against the real API server: the CRD from deploy/crds/ takes the seed's HPP
verbatim; prescaler (cluster mode, read-only on HPAs) writes `HPAConfigured` through the status
subresource - False with the exact `kubectl patch` command while the HPA lacks the External metric,
True once the user has run that command. prescaler itself cannot patch an HPA (checked with the real
RBAC authorizer)."""

from __future__ import annotations

import copy
import logging
import shlex
from typing import Any

import yaml

from tests.e2e.controlplane import ROOT, ControlPlane
from tests.e2e.support import NAMESPACE, PrescalerProcess, wait_for

log = logging.getLogger("e2e.hpp")

SEED_HPP = ROOT / "examples/seed/horizontalpodprescaler.yaml"
EXAMPLE_HPA = ROOT / "examples/hpa/service-a-hpa.yaml"
PRESCALER_SA = f"system:serviceaccount:{NAMESPACE}:prescaler"


def hpa_configured(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    doc = plane.get_json("horizontalpodprescaler", name, "-n", namespace)
    return next((c for c in doc.get("status", {}).get("conditions", []) if c["type"] == "HPAConfigured"), {})


def can_i(plane: ControlPlane, *args: str) -> bool:
    result = plane.kubectl("auth", "can-i", *args, f"--as={PRESCALER_SA}", check=False)
    assert result.stdout.strip() in ("yes", "no"), result
    return result.stdout.strip() == "yes"


def test_prescaler_cannot_write_hpas(plane: ControlPlane, prescaler: PrescalerProcess) -> None:
    """What deploy/rbac.yaml grants, asked of the real authorizer: HPAs read-only, HPP status writable."""
    for verb in ("get", "list", "watch"):
        assert can_i(plane, verb, "horizontalpodautoscalers.autoscaling", "-n", "service-a"), verb
    for verb in ("patch", "update", "create", "delete"):
        assert not can_i(plane, verb, "horizontalpodautoscalers.autoscaling", "-n", "service-a"), verb
    assert not can_i(plane, "patch", "horizontalpodautoscalers.autoscaling", "--subresource=status", "-n", "x")
    assert not can_i(plane, "patch", "horizontalpodprescalers.prescaler.pingpong.ai", "-n", "service-a")
    assert can_i(
        plane, "patch", "horizontalpodprescalers.prescaler.pingpong.ai", "--subresource=status", "-n", "service-a"
    )


def test_hpp_status_says_how_to_patch_the_hpa_and_turns_true_once_patched(
    plane: ControlPlane, prescaler: PrescalerProcess, seed: dict[str, str]
) -> None:
    hpp = yaml.safe_load(SEED_HPP.read_text())
    namespace, name = hpp["metadata"]["namespace"], hpp["metadata"]["name"]
    hpa_name = hpp["spec"]["scaleTargetRef"]["name"]
    # The seed fixture applied the file verbatim through the real CRD schema; applying it again is a no-op.
    assert seed[SEED_HPP.name] == f"horizontalpodprescaler.prescaler.pingpong.ai/{name} created", seed
    applied = plane.kubectl("apply", "-f", str(SEED_HPP)).stdout
    assert applied.strip() == f"horizontalpodprescaler.prescaler.pingpong.ai/{name} unchanged", applied
    plane.kubectl("delete", "hpa", hpa_name, "-n", namespace, "--ignore-not-found")

    # No HPA yet.
    wait_for(
        lambda: hpa_configured(plane, namespace, name).get("reason") == "HPANotFound",
        60,
        "HPAConfigured=False/HPANotFound",
    )
    assert hpa_configured(plane, namespace, name)["status"] == "False"

    # The user's HPA as it was before prescaler: the documented example without its External entry.
    documented = yaml.safe_load(EXAMPLE_HPA.read_text())
    before = copy.deepcopy(documented)
    before["spec"]["metrics"] = [m for m in before["spec"]["metrics"] if m["type"] != "External"]
    assert len(before["spec"]["metrics"]) == len(documented["spec"]["metrics"]) - 1
    plane.apply(before)
    missing = wait_for(
        lambda: (c := hpa_configured(plane, namespace, name)).get("reason") == "MetricMissing" and c,
        60,
        "HPAConfigured=False/MetricMissing after the HPA appeared",
    )
    log.info("HPAConfigured: %s", missing)
    assert missing["status"] == "False"
    message = missing["message"]
    assert "apply: " in message, message
    command = message.split("apply: ", 1)[1].strip()
    argv = shlex.split(command)
    assert argv[:1] == ["kubectl"] and "patch" in argv and hpa_name in argv, command
    # prescaler never changed the HPA: it still has only the user's metrics.
    assert plane.get_json("hpa", hpa_name, "-n", namespace)["spec"]["metrics"] == before["spec"]["metrics"]

    # The user runs exactly that command (with the pinned kubectl against the real API server).
    out = plane.kubectl(*argv[1:]).stdout
    assert f"{hpa_name} patched" in out, out
    assert plane.get_json("hpa", hpa_name, "-n", namespace)["spec"]["metrics"] == documented["spec"]["metrics"]
    configured = wait_for(
        lambda: (c := hpa_configured(plane, namespace, name)).get("status") == "True" and c,
        60,
        "HPAConfigured=True after the patch",
    )
    assert configured["reason"] == "HPAConfigured", configured
    assert "rps" in configured["message"], configured
    # Printer column: kubectl get shows the HPA name.
    table = plane.kubectl("get", "hpp", "-n", namespace).stdout
    assert name in table and hpa_name in table, table
