"""HorizontalPodPrescaler: parsing, the HPA check, the patch and manifest (adapter/store/hpp.py), and
`prescaler migrate` (adapter/migrate.py) on the seed's manifest."""

from __future__ import annotations

import copy
import io
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapter.cli import build_parser, main
from adapter.migrate import run
from adapter.store.hpp import HPPError, check_hpa, parse_hpp, patch_ops, patched_manifest
from tests.fakekube import ApiError, json_patch

ROOT = Path(__file__).resolve().parents[2]
SEED_HPP = ROOT / "examples" / "seed" / "horizontalpodprescaler.yaml"
SEED_HPA = ROOT / "examples" / "hpa" / "service-a-hpa.yaml"
ENTRY = {
    "type": "External",
    "external": {
        "metric": {"name": "rps", "selector": {"matchLabels": {"resource": "service-a"}}},
        "target": {"type": "AverageValue", "averageValue": "10"},
    },
}
CPU = {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}


def seed() -> dict[str, Any]:
    return yaml.safe_load(SEED_HPP.read_text())


def hpa(metrics: list[dict[str, Any]] | None, api_version: str = "autoscaling/v2") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "service-a"},
        "minReplicas": 2,
        "maxReplicas": 50,
    }
    if metrics is not None:
        spec["metrics"] = metrics
    return {
        "apiVersion": api_version,
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "service-a-hpa", "namespace": "service-a", "resourceVersion": "7", "uid": "u"},
        "spec": spec,
        "status": {"currentReplicas": 3},
    }


def test_seed_hpp_means_an_external_metric_for_its_workload() -> None:
    hpp = parse_hpp(seed())
    assert (hpp.namespace, hpp.name, hpp.hpa_name) == ("service-a", "service-a", "service-a-hpa")
    assert [(m.name, m.average_value) for m in hpp.metrics] == [("rps", "10")]
    assert patched_manifest(hpp, hpa([CPU]))["spec"]["metrics"] == [CPU, ENTRY]


def test_check_against_the_example_hpa_is_configured() -> None:
    check = check_hpa(parse_hpp(seed()), yaml.safe_load(SEED_HPA.read_text()))
    assert check.configured and check.reason == "HPAConfigured" and check.command == ""


@pytest.mark.parametrize(
    "metrics, reason, expected",
    [
        ([CPU], "MetricMissing", [CPU, ENTRY]),
        ([], "MetricMissing", [ENTRY]),
        (
            None,
            "MetricMissing",
            [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
                },
                ENTRY,
            ],
        ),  # the implicit CPU default is kept
        (
            [
                CPU,
                {**ENTRY, "external": {**ENTRY["external"], "target": {"type": "AverageValue", "averageValue": "20"}}},
            ],
            "TargetDiffers",
            [CPU, ENTRY],
        ),
        (
            [{**ENTRY, "external": {**ENTRY["external"], "target": {"type": "Value", "value": "10"}}}, CPU],
            "TargetDiffers",
            [ENTRY, CPU],
        ),
        # another workload's entry for the same metric is left alone
        (
            [
                {
                    **ENTRY,
                    "external": {
                        **ENTRY["external"],
                        "metric": {"name": "rps", "selector": {"matchLabels": {"resource": "service-b"}}},
                    },
                }
            ],
            "MetricMissing",
            None,
        ),
    ],
)
def test_patch_gives_the_configured_hpa(metrics, reason, expected) -> None:
    """The JSON patch, applied by an independent RFC 6902 implementation, yields an HPA that passes
    the check; and the printed manifest has the same metrics."""
    hpp = parse_hpp(seed())
    before = hpa(copy.deepcopy(metrics))
    check = check_hpa(hpp, before)
    assert not check.configured and check.reason == reason
    assert check.command in check.message
    after = json_patch(before, check.ops)
    assert check_hpa(hpp, after).configured
    assert patched_manifest(hpp, before)["spec"]["metrics"] == after["spec"]["metrics"]
    if expected is not None:
        assert after["spec"]["metrics"] == expected


def test_patch_command_is_one_ready_shell_command() -> None:
    hpp = parse_hpp(seed())
    check = check_hpa(hpp, hpa([CPU]))
    argv = shlex.split(check.command)
    assert argv[:7] == ["kubectl", "-n", "service-a", "patch", "hpa", "service-a-hpa", "--type=json"]
    assert argv[7] == "-p" and json.loads(argv[8]) == check.ops == [
        {"op": "add", "path": "/spec/metrics/-", "value": ENTRY}
    ]


def test_replace_is_guarded_against_a_moved_entry() -> None:
    hpp = parse_hpp(seed())
    stale = hpa(
        [CPU, {**ENTRY, "external": {**ENTRY["external"], "target": {"type": "AverageValue", "averageValue": "3"}}}]
    )
    ops = patch_ops(hpp, stale)
    moved = hpa(
        [
            {"type": "External", "external": {"metric": {"name": "other"}, "target": {"type": "Value", "value": "1"}}},
            CPU,
        ]
    )
    with pytest.raises(ApiError):
        json_patch(moved, ops)


def test_missing_hpa_and_quantities() -> None:
    doc = seed()
    doc["spec"]["metrics"][0]["target"]["averageValue"] = "2.5"
    hpp = parse_hpp(doc)
    assert hpp.metrics[0].average_value == "2500m"
    check = check_hpa(hpp, None)
    assert (
        not check.configured and check.reason == "HPANotFound" and "service-a/service-a-hpa not found" in check.message
    )
    configured = hpa(
        [{**ENTRY, "external": {**ENTRY["external"], "target": {"type": "AverageValue", "averageValue": "2.5"}}}]
    )
    assert check_hpa(hpp, configured).configured  # 2.5 == 2500m


def test_autoscaling_v1_hpa_keeps_its_cpu_target() -> None:
    v1 = {
        "apiVersion": "autoscaling/v1",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "service-a-hpa", "namespace": "service-a"},
        "spec": {
            "scaleTargetRef": {"kind": "Deployment", "name": "service-a"},
            "maxReplicas": 5,
            "targetCPUUtilizationPercentage": 60,
        },
    }
    manifest = patched_manifest(parse_hpp(seed()), v1)
    assert manifest["apiVersion"] == "autoscaling/v2" and "targetCPUUtilizationPercentage" not in manifest["spec"]
    assert manifest["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 60


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d["spec"].pop("scaleTargetRef"), "spec.scaleTargetRef.name"),
        (lambda d: d["spec"].update(metrics=[]), "spec.metrics"),
        (lambda d: d["spec"]["metrics"][0]["target"].update(averageValue="ten"), "spec.metrics[0].target.averageValue"),
        (lambda d: d["spec"]["metrics"][0]["target"].update(averageValue=0), "spec.metrics[0].target.averageValue"),
        (lambda d: d["spec"]["metrics"][0].pop("metric"), "spec.metrics[0].metric.name"),
        (lambda d: d["spec"]["scaleTargetRef"].update(kind="Deployment"), "spec.scaleTargetRef.kind"),
    ],
)
def test_bad_hpp_names_object_and_field(mutate, field) -> None:
    doc = seed()
    mutate(doc)
    with pytest.raises(HPPError, match=r"HorizontalPodPrescaler service-a/service-a: " + field.replace("[", r"\[")):
        parse_hpp(doc)


# ------------------------------------------------------------------ prescaler migrate


def migrate(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    args = build_parser().parse_args(["migrate", *argv])
    return run(args, out), out.getvalue()


def commands_and_manifest(text: str) -> tuple[list[str], dict[str, Any]]:
    commands = [line for line in text.splitlines() if line.startswith("kubectl ")]
    manifest = yaml.safe_load(text.split("\n---\n", 1)[1])
    return commands, manifest


def test_migrate_seed_alone() -> None:
    code, text = migrate("--hpp", str(SEED_HPP))
    assert code == 0
    [command], manifest = commands_and_manifest(text)
    assert json.loads(shlex.split(command)[8]) == [{"op": "add", "path": "/spec/metrics/-", "value": ENTRY}]
    assert manifest["metadata"] == {"name": "service-a-hpa", "namespace": "service-a"}
    assert manifest["spec"]["metrics"] == [ENTRY]
    assert manifest["spec"]["scaleTargetRef"]["name"] == "service-a"


def test_migrate_seed_against_an_hpa_file(tmp_path: Path) -> None:
    path = tmp_path / "hpa.yaml"
    path.write_text(yaml.safe_dump_all([{"kind": "ConfigMap", "metadata": {"name": "x"}}, hpa([CPU])]))
    code, text = migrate("--hpp", str(SEED_HPP), "--hpa", str(path))
    assert code == 0
    [command], manifest = commands_and_manifest(text)
    assert manifest["spec"]["metrics"] == [CPU, ENTRY]
    assert "status" not in manifest and "resourceVersion" not in manifest["metadata"]
    assert manifest["spec"]["maxReplicas"] == 50  # the user's HPA, not placeholders
    code, text = migrate("--hpp", str(SEED_HPP), "--hpa", str(SEED_HPA))
    assert code == 0 and "already has it: nothing to change" in text and "kubectl " not in text


def test_migrate_errors_are_clear(tmp_path: Path, capsys) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("kind: ConfigMap\nmetadata: {name: x}\n")
    assert main(["migrate", "--hpp", str(empty)]) == 2
    assert "no HorizontalPodPrescaler document" in capsys.readouterr().err
    assert main(["migrate", "--hpp", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err


# ------------------------------------------------------------------ the CRD


def test_hpp_crd_is_namespaced_and_accepts_the_seed() -> None:
    from tests.deploy.test_manifests_crds import VALIDATORS, crds

    crd = crds()["HorizontalPodPrescaler"]
    assert crd["metadata"]["name"] == "horizontalpodprescalers.prescaler.pingpong.ai"
    assert crd["spec"]["scope"] == "Namespaced" and crd["spec"]["names"]["shortNames"] == ["hpp"]
    [version] = crd["spec"]["versions"]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Configured"] == '.status.conditions[?(@.type=="HPAConfigured")].status'
    validator = VALIDATORS["HorizontalPodPrescaler"]
    assert validator.errors(seed()) == []
    for mutate in (
        lambda d: d["spec"].pop("scaleTargetRef"),
        lambda d: d["spec"].update(metrics=[]),
        lambda d: d["spec"]["metrics"][0]["target"].update(averageValue="ten"),
        lambda d: d["spec"]["metrics"][0].update(extra=1),
    ):
        doc = seed()
        mutate(doc)
        assert validator.errors(doc), doc
