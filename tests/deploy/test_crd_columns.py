"""What `kubectl get pvm` shows: the Metric column comes from status.metricName, which the engine fills
with the served name even when spec.name defaults to metadata.name; short names avoid clashes."""

from __future__ import annotations

from typing import Any

from adapter.crd import SHORT_NAMES, virtual_metric_crd
from adapter.validate import load_validators
from tests.helpers import loaded_engine, metric_status, run

# Short names of widely installed CRDs (KubeVirt, Velero, Argo, cert-manager, Istio, Knative, ...).
POPULAR_SHORT_NAMES = {
    "vm",
    "vmi",
    "vmis",
    "vms",
    "vme",
    "vmim",
    "vmr",
    "dv",
    "pvc",
    "pv",
    "vs",
    "vsc",
    "app",
    "apps",
    "wf",
    "ro",
    "cert",
    "certs",
    "cr",
    "crs",
    "vsvc",
    "dr",
    "gw",
    "se",
    "ksvc",
    "rev",
    "kn",
    "sm",
    "pm",
    "pr",
    "am",
    "hpa",
    "vpa",
    "sp",
}


def jsonpath_simple(doc: dict[str, Any], path: str) -> Any:
    node: Any = doc
    for part in path.strip(".").split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def test_metric_column_shows_the_defaulted_name() -> None:
    vm = {
        "apiVersion": "prescaler.pingpong.ai/v1",
        "kind": "VirtualMetric",
        "metadata": {"name": "queue-depth"},
        "spec": {"defaultValue": 0},
    }  # no spec.name: the metric is metadata.name

    async def status() -> dict[str, Any]:
        engine = await loaded_engine([vm])
        try:
            return metric_status(engine, "queue-depth")
        finally:
            await engine.stop()

    obj = {**vm, "status": run(status())}
    [version] = virtual_metric_crd()["spec"]["versions"]
    metric_column = next(c for c in version["additionalPrinterColumns"] if c["name"] == "Metric")
    assert jsonpath_simple(obj, metric_column["jsonPath"]) == "queue-depth"
    # And the field is one the CRD schema accepts (conditions get their times from the status writer).
    plain = {**vm, "status": {k: v for k, v in obj["status"].items() if k != "conditions"}}
    assert load_validators()["VirtualMetric"].errors(plain) == []
    assert load_validators()["VirtualMetric"].errors({**vm, "status": {"metricName": "bad name!"}}) != []


def test_short_names_do_not_clash_with_popular_crds() -> None:
    assert set(SHORT_NAMES.values()) == {"pvm", "pvme"}
    assert not set(SHORT_NAMES.values()) & POPULAR_SHORT_NAMES
