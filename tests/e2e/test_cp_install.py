"""What a user sees after installing prescaler into a real cluster: the APIService becomes Available, the
seed's values come back through the real aggregator, the real CRD schema and CEL rules accept the seed
and reject bad objects, `kubectl get` shows the printer columns, status is written through the real
status subresource, and the Helm chart and kustomize base pass a server-side dry run."""

from __future__ import annotations

import json
import re
import ssl
from pathlib import Path
from typing import Any

import helm_python as helm
import httpx
import pytest
import yaml

from tests.e2e.controlplane import ROOT, ControlPlane
from tests.e2e.support import APISERVICE, V1, PrescalerProcess, apiservice_available, served, wait_for


def test_apiservice_becomes_available(plane: ControlPlane, prescaler: PrescalerProcess) -> None:
    assert apiservice_available(plane)
    doc = plane.get_json("apiservice", APISERVICE)
    assert doc["spec"]["service"]["name"] == "prescaler"
    assert doc["spec"]["caBundle"]  # from `prescaler certs`, not insecureSkipTLSVerify
    assert not doc["spec"].get("insecureSkipTLSVerify")


def test_seed_applies_verbatim(seed: dict[str, str]) -> None:
    assert seed["virtualmetric.yaml"] == "virtualmetric.prescaler.pingpong.ai/rps created"
    assert seed["virtualmetricevent.yaml"] == "virtualmetricevent.prescaler.pingpong.ai/stage-vme created"
    for name, output in seed.items():  # any other seed kind with a CRD in deploy/crds/
        assert output.endswith(" created"), (name, output)


def test_seed_values_through_the_aggregator(plane: ControlPlane, seed: dict[str, str]) -> None:
    # 50 scheduled messages: scheduledMessage * 2 for service-a, scheduledMessage for service-b.
    wait_for(lambda: served(plane, "service-a", "service-a") == ["100"], 30, "service-a to serve 100")
    assert served(plane, "service-b", "service-b") == ["50"]
    body = json.loads(
        plane.kubectl("get", "--raw", f"{V1}/namespaces/service-a/rps?labelSelector=resource%3Dservice-a").stdout
    )
    assert body["kind"] == "ExternalMetricValueList"
    assert body["items"][0]["metricName"] == "rps"
    assert body["items"][0]["metricLabels"] == {"resource": "service-a"}


def test_api_resources_lists_rps(plane: ControlPlane, seed: dict[str, str]) -> None:
    result = plane.kubectl("api-resources", "--api-group=external.metrics.k8s.io", "-o", "name")
    assert "rps.external.metrics.k8s.io" in result.stdout.split()


def printer_columns(plural: str, wide: bool = False) -> list[str]:
    crd = yaml.safe_load((ROOT / f"deploy/crds/prescaler.pingpong.ai_{plural}.yaml").read_text())
    columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    return ["NAME"] + [c["name"].upper() for c in columns if wide or not c.get("priority")]


def table(plane: ControlPlane, *args: str) -> list[dict[str, str]]:
    """`kubectl get` output as rows keyed by header (no column here contains spaces)."""
    lines = plane.kubectl("get", *args).stdout.splitlines()
    header = lines[0].split()
    return [dict(zip(header, line.split())) | {"__header__": " ".join(header)} for line in lines[1:]]


def test_printer_columns(plane: ControlPlane, seed: dict[str, str]) -> None:
    wait_for(lambda: served(plane, "service-a", "service-a") == ["100"], 30, "values")
    rows = wait_for(  # the seed's two targets: an earlier test's objects may still be on their way out
        lambda: (
            (r := table(plane, "virtualmetric", "rps"))
            and r[0].get("READY") == "True"
            and r[0].get("TARGETS") == "2"
            and r
        ),
        30,
        "VirtualMetric rps READY True with the seed's 2 targets",
    )
    assert rows[0]["__header__"] == " ".join(printer_columns("virtualmetrics"))
    assert (rows[0]["NAME"], rows[0]["METRIC"], rows[0]["STRATEGY"], rows[0]["TARGETS"]) == ("rps", "rps", "Sum", "2")
    rows = wait_for(
        lambda: (r := table(plane, "virtualmetricevent", "stage-vme")) and r[0].get("READY") == "True" and r,
        30,
        "VirtualMetricEvent stage-vme READY True",
    )
    assert rows[0]["__header__"] == " ".join(printer_columns("virtualmetricevents"))
    assert (rows[0]["SOURCE"], rows[0]["ITEMS"]) == ("api", "1")
    wide = table(plane, "virtualmetricevent", "stage-vme", "-o", "wide")
    assert wide[0]["__header__"] == " ".join(printer_columns("virtualmetricevents", wide=True))  # + priority 1
    assert wide[0]["STALE"] == "false"


def _conditions(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in doc.get("status", {}).get("conditions", [])}


def test_status_through_the_status_subresource(plane: ControlPlane, seed: dict[str, str]) -> None:
    def healthy() -> dict[str, Any] | None:
        doc = plane.get_json("virtualmetricevent", "stage-vme")
        conds = _conditions(doc)
        ok = all(conds.get(t, {}).get("status") == "True" for t in ("Ready", "SourceHealthy", "ExpressionsValid"))
        return doc if ok and doc["status"].get("observedGeneration") == doc["metadata"]["generation"] else None

    doc = wait_for(healthy, 30, "stage-vme Ready/SourceHealthy/ExpressionsValid = True")
    doc = plane.get_json("virtualmetricevent", "stage-vme", "--show-managed-fields")
    assert doc["status"]["itemCount"] == 1
    assert doc["status"]["sourceKind"] == "api"
    # Written by prescaler's ServiceAccount through .../status: the managedFields entry says so.
    status_managers = [m for m in doc["metadata"]["managedFields"] if m.get("subresource") == "status"]
    assert status_managers and all(m["operation"] == "Update" for m in status_managers), status_managers
    # The seed's two targets (an earlier test's objects may still be on their way out: wait for them).
    wait_for(
        lambda: plane.get_json("virtualmetric", "rps").get("status", {}).get("targets") == 2,
        30,
        "VirtualMetric rps status.targets == 2",
    )


def _event_versions(plane: ControlPlane, prescaler: PrescalerProcess) -> dict[str, float]:
    """prescaler_event_versions_total by outcome, scraped from prescaler's /metrics with the admin's
    client certificate (prescaler trusts the cluster's client CA, and authorizes /metrics by SAR)."""
    context = ssl.create_default_context(cafile=prescaler.ssl_ca)
    context.check_hostname = False  # the certificate names prescaler.prescaler.svc; we dial 127.0.0.1
    context.load_cert_chain(plane.pki.path("admin.crt"), plane.pki.path("admin.key"))
    text = httpx.get(f"https://127.0.0.1:{prescaler.port}/metrics", verify=context, timeout=10).text
    found = re.findall(r'^prescaler_event_versions_total\{outcome="(\w+)"\} (\S+)$', text, re.MULTILINE)
    return {outcome: float(value) for outcome, value in found}


def test_a_new_version_with_the_same_spec_is_not_parsed_again(
    plane: ControlPlane, prescaler: PrescalerProcess, seed: dict[str, str]
) -> None:
    """prescaler writes each event's status every few seconds and the watch sends the whole object
    back each time. The real API server keeps metadata.generation for a metadata-only change (here an
    annotation) as for a status write: prescaler does not parse that version again. A label change is
    parsed (labels are part of what it loads)."""
    before = _event_versions(plane, prescaler)
    plane.kubectl("annotate", "virtualmetricevent", "stage-vme", "e2e.prescaler/touched=1", "--overwrite")
    after = wait_for(
        lambda: (v := _event_versions(plane, prescaler)).get("unchanged", 0) > before.get("unchanged", 0) and v,
        30,
        "the annotated version counted as unchanged",
    )
    assert after.get("parsed", 0) == before.get("parsed", 0)
    plane.kubectl("label", "virtualmetricevent", "stage-vme", "e2e.prescaler/touched=1", "--overwrite")
    wait_for(
        lambda: _event_versions(plane, prescaler).get("parsed", 0) > after.get("parsed", 0),
        30,
        "the relabelled version parsed",
    )
    plane.kubectl("label", "virtualmetricevent", "stage-vme", "e2e.prescaler/touched-")
    plane.kubectl("annotate", "virtualmetricevent", "stage-vme", "e2e.prescaler/touched-")
    wait_for(lambda: served(plane, "service-a", "service-a") == ["100"], 30, "service-a still serves 100")


def test_failed_source_shows_in_status(plane: ControlPlane, prescaler: PrescalerProcess) -> None:
    """The seed's own URL (stage.pingpong.ai) is unreachable from here: status says so, nothing else breaks."""
    doc = yaml.safe_load((ROOT / "examples/seed/virtualmetricevent.yaml").read_text())
    doc["metadata"]["name"] = "unreachable-vme"
    for entry in doc["spec"]["metrics"]:
        entry["resource"]["namespace"] = entry["resource"]["name"] = "unreachable"
    plane.apply(doc)
    try:
        conds = wait_for(
            lambda: (
                (c := _conditions(plane.get_json("virtualmetricevent", "unreachable-vme")))
                .get("SourceHealthy", {})
                .get("status")
                == "False"
                and c
            ),
            60,
            "SourceHealthy=False",
        )
        assert conds["SourceHealthy"]["reason"] in ("FetchFailed", "Stale")
        assert conds["Ready"]["status"] == "False"
        # The condition change is also a Kubernetes Event, created through the real API server (in
        # "default": the object is cluster-scoped), as `kubectl describe` and `kubectl get events` show.
        events = wait_for(
            lambda: [
                e
                for e in plane.get_json(
                    "events", "-n", "default", "--field-selector", "involvedObject.name=unreachable-vme"
                ).get("items", [])
                if e.get("type") == "Warning" and e.get("source", {}).get("component") == "prescaler"
            ],
            60,
            "a Warning Event for unreachable-vme",
        )
        assert events[0]["involvedObject"]["kind"] == "VirtualMetricEvent"
    finally:
        plane.kubectl("delete", "virtualmetricevent", "unreachable-vme", "--wait=false")


VM = {"apiVersion": "prescaler.pingpong.ai/v1", "kind": "VirtualMetric"}


@pytest.mark.parametrize(
    ("name", "spec", "expected"),
    [
        ("min-over-max", {"min": 10, "max": 5}, ["min must not be greater than max"]),
        ("median", {"mergeStrategy": "Median"}, ["spec.mergeStrategy", "Unsupported value", '"Median"']),
        # Strict field validation rejects the unknown field while decoding, before the object (and so its
        # name) exists: the message names the kind and the field.
        ("unknown-field", {"leadtime": "5m"}, ["VirtualMetric", 'unknown field "spec.leadtime"']),
        ("bad-duration", {"leadTime": "5 minutes"}, ["spec.leadTime", "5 minutes"]),
    ],
)
def test_bad_objects_are_rejected_by_the_api_server(
    plane: ControlPlane, name: str, spec: dict[str, Any], expected: list[str]
) -> None:
    doc = {**VM, "metadata": {"name": name}, "spec": {"name": name, "defaultValue": 0, "mergeStrategy": "Sum", **spec}}
    result = plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc), check=False)
    assert result.returncode != 0, result.stdout
    message = result.stderr
    if name != "unknown-field":
        assert f'The VirtualMetric "{name}" is invalid' in message, message  # names the object
    for text in expected:
        assert text in message, message
    assert plane.kubectl("get", "virtualmetric", name, check=False).returncode != 0  # nothing was stored


def test_bad_vme_is_rejected_with_the_cel_message(plane: ControlPlane) -> None:
    doc = {
        "apiVersion": "prescaler.pingpong.ai/v1",
        "kind": "VirtualMetricEvent",
        "metadata": {"name": "two-names"},
        "spec": {
            "source": {"schedule": {"items": [{"start": 0, "end": 1, "values": {"x": 1}}]}},
            "metrics": [
                {
                    "name": "rps",
                    "resource": {"name": "a", "nameFromLabel": "svc", "namespace": "ns1"},
                    "value": {"expression": "x"},
                }
            ],
        },
    }
    result = plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc), check=False)
    assert result.returncode != 0
    assert "exactly one of name or nameFromLabel is required" in result.stderr, result.stderr


def _dry_run(plane: ControlPlane, manifests: str, tmp_path: Path, name: str) -> str:
    path = tmp_path / name
    path.write_text(manifests)
    # --server-side: the CRDs are larger than client-side apply's last-applied annotation allows.
    result = plane.kubectl(
        "apply", "--dry-run=server", "--server-side", "--force-conflicts", "-f", str(path), check=False, timeout=120
    )
    assert result.returncode == 0, f"{name}: {result.stderr}"
    return result.stdout


def test_helm_chart_passes_server_dry_run(plane: ControlPlane, prescaler: PrescalerProcess, tmp_path: Path) -> None:
    chart = helm.Chart.load(str(ROOT / "deploy/helm/prescaler"))
    rendered = chart.render(values={}, name="prescaler", namespace="prescaler", is_install=True)
    docs = [yaml.safe_load(c["data"]) for c in chart.crds]
    for template, text in rendered.items():
        if template.endswith((".yaml", ".yml")):
            docs += [d for d in yaml.safe_load_all(text) if d]
    out = _dry_run(plane, yaml.safe_dump_all(docs), tmp_path, "helm.yaml")
    assert "deployment.apps/prescaler serverside-applied (server dry run)" in out, out
    assert f"apiservice.apiregistration.k8s.io/{APISERVICE} serverside-applied (server dry run)" in out, out


def test_kustomize_base_passes_server_dry_run(plane: ControlPlane, prescaler: PrescalerProcess, tmp_path: Path) -> None:
    rendered = plane.kubectl("kustomize", str(ROOT / "deploy")).stdout
    out = _dry_run(plane, rendered, tmp_path, "kustomize.yaml")
    kinds = {line.split("/")[0] for line in out.splitlines()}
    assert "customresourcedefinition.apiextensions.k8s.io" in kinds, out
    assert "deployment.apps" in kinds, out
